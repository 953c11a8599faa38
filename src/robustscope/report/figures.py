"""Report figures nobody else draws: accuracy against strength, fragile inputs, radius
distributions; and helpers to embed any figure in HTML.

Figures are built on :class:`matplotlib.figure.Figure` directly (no pyplot state, Agg canvas).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from robustscope.core.ecdf import robust_accuracy
from robustscope.core.result import CENSORED, RadiusResult
from robustscope.core.statuses import AT_ZERO

#: Colours of the curves of run A / run B (and further sections), colour-blind safe.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")


#: Most points a scatter plot draws; above it, a seeded random subset is drawn (the figure
#: says so). Drawing 10⁶ markers costs hundreds of MB and shows nothing more.
MAX_SCATTER_POINTS = 5000


def points_to_draw(n: int, limit: int | None = None, seed: int = 0) -> np.ndarray:
    """Sorted indices of at most ``limit`` (default :data:`MAX_SCATTER_POINTS`) of ``n``
    points: all of them, or a random subset drawn without replacement with ``seed`` (the
    same subset on every call)."""
    limit = MAX_SCATTER_POINTS if limit is None else limit
    if n <= limit:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=limit, replace=False))


def drawn_note(n: int, limit: int | None = None) -> str:
    """``""`` when every point is drawn, else a note to append to the title."""
    limit = MAX_SCATTER_POINTS if limit is None else limit
    return "" if n <= limit else f" ({limit:,} of {n:,} drawn at random)"


def figure_to_data_uri(fig: Figure, dpi: int = 96) -> str:
    """PNG of ``fig`` as a ``data:image/png;base64,...`` URI (the figure is then closed)."""
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    try:  # figures made through pyplot stay registered there until closed
        import matplotlib.pyplot as plt

        plt.close(fig)
    except Exception:  # noqa: BLE001 - closing is best effort
        pass
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def png_size(uri: str) -> tuple[int, int]:
    """``(width, height)`` in pixels of the PNG in a ``data:image/png;base64,...`` URI (read
    from its IHDR header)."""
    head = base64.b64decode(uri.split(",", 1)[1][:32])
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        raise ValueError("not a PNG data URI")
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


@dataclass
class Curve:
    """One accuracy curve: a label, per-input radii and statuses, and the largest strength
    searched (accuracy above it is unknown)."""

    label: str
    radius: np.ndarray
    status: np.ndarray
    max_radius: float
    strengths: np.ndarray | None = None

    @classmethod
    def of(cls, label: str, result: RadiusResult, strengths: Sequence[float] | None = None
           ) -> Curve:
        return cls(label, result.radius, result.status, result.max_radius,
                   None if strengths is None else np.asarray(strengths, dtype=np.float64))

    def accuracy(self, eps: np.ndarray) -> np.ndarray:
        """Robust accuracy: share of inputs with radius > eps (censored inputs count as robust
        up to ``max_radius``; NaN above it). Misclassified inputs have radius 0."""
        return robust_accuracy(self.radius, self.status, self.max_radius, eps)


def accuracy_vs_strength_figure(curves: Sequence[Curve], title: str = "Accuracy vs strength",
                                xlabel: str = "strength ε (scaled norm)") -> Figure:
    """Robust accuracy against strength, one step curve per :class:`Curve` (exact for the
    solver used, since threat sets are nested), with markers at the curve's grid strengths.
    At ε = 0 the curve starts at the clean accuracy."""
    fig = Figure(figsize=(6, 4.2))
    ax = fig.add_subplot()
    for k, c in enumerate(curves):
        colour = PALETTE[k % len(PALETTE)]
        eps = np.linspace(0.0, c.max_radius, 400)
        ax.step(eps, c.accuracy(eps), where="post", color=colour, lw=1.8, label=c.label)
        if c.strengths is not None and len(c.strengths):
            ax.plot(c.strengths, c.accuracy(c.strengths), "o", color=colour, ms=3.5)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("robust accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlim(left=0)
    ax.grid(alpha=0.3)
    ax.set_title(title)
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    return fig


def radius_distribution_figure(curves: Sequence[Curve], title: str = "Radius distribution"
                               ) -> Figure:
    """Histogram of the finite radii of the well-classified inputs, one per curve; censored
    and misclassified counts in the legend."""
    fig = Figure(figsize=(6, 3.8))
    ax = fig.add_subplot()
    finite = [c.radius[(c.status != CENSORED) & ~np.isin(c.status, AT_ZERO)] for c in curves]
    top = max((float(f.max()) for f in finite if len(f)), default=1.0) or 1.0
    bins = np.linspace(0.0, top, 30)
    for k, (c, r) in enumerate(zip(curves, finite, strict=True)):
        n_cens = int((c.status == CENSORED).sum())
        ax.hist(r, bins=bins, alpha=0.55, color=PALETTE[k % len(PALETTE)],
                label=f"{c.label} ({len(r)} radii, {n_cens} censored)")
    ax.set_xlabel("radius (scaled norm)")
    ax.set_ylabel("inputs")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def fragile_indices(result: RadiusResult, k: int) -> np.ndarray:
    """Indices of the ``k`` well-classified inputs with the smallest verified radius
    (ties by input order)."""
    ok = np.flatnonzero((result.status != CENSORED) & ~np.isin(result.status, AT_ZERO))
    order = np.argsort(result.radius[ok], kind="stable")
    return ok[order[:k]]


def fragile_images_figure(X: np.ndarray, result: RadiusResult, indices: np.ndarray,
                          class_names: Sequence | None = None) -> Figure:
    """For each index: the input, its counterexample and the perturbation (rescaled to its
    own largest absolute value). ``X`` is ``(n, C, H, W)`` or ``(n, H, W)`` in [0, 1]."""
    n = len(indices)
    fig = Figure(figsize=(6, 2.0 * max(n, 1)))
    if n == 0:
        ax = fig.add_subplot()
        ax.text(0.5, 0.5, "no counterexample", ha="center", va="center")
        ax.axis("off")
        return fig
    names = (lambda c: str(class_names[c])) if class_names is not None else str
    for row, i in enumerate(indices):
        x = np.asarray(X[i], dtype=np.float64)
        xa = np.asarray(result.x_adv[i], dtype=np.float64).reshape(x.shape)
        delta = xa - x
        scale = np.abs(delta).max() or 1.0
        panels = ((_image(x), f"input #{int(result.sample[i])}: {names(result.label[i])}"),
                  (_image(xa), f"counterexample: {names(result.adv_prediction[i])}"),
                  (_image(0.5 + 0.5 * delta / scale), f"δ (r = {result.radius[i]:.3g})"))
        for col, (img, title) in enumerate(panels):
            ax = fig.add_subplot(n, 3, 3 * row + col + 1)
            ax.imshow(np.clip(img, 0, 1), cmap="gray" if img.ndim == 2 else None,
                      vmin=0, vmax=1, interpolation="nearest")
            ax.set_title(title, fontsize=8)
            ax.axis("off")
    fig.tight_layout()
    return fig


def _image(x: np.ndarray) -> np.ndarray:
    """(C, H, W) or (H, W) -> (H, W) grey or (H, W, 3) colour for imshow."""
    if x.ndim == 3:
        return x[0] if x.shape[0] == 1 else np.moveaxis(x[:3], 0, -1)
    return x


def changed_features(x: np.ndarray, x_adv: np.ndarray, names: Sequence[str],
                     scale: np.ndarray, limit: int = 10, rtol: float = 1e-9) -> list[dict]:
    """Features a counterexample changes, largest scaled change first: dicts with ``name``,
    ``before``, ``after`` and ``scaled`` (``(after - before) / scale``)."""
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    xa = np.asarray(x_adv, dtype=np.float64).reshape(-1)
    scaled = (xa - x) / np.asarray(scale, dtype=np.float64)
    moved = np.flatnonzero(np.abs(scaled) > rtol)
    moved = moved[np.argsort(-np.abs(scaled[moved]), kind="stable")]
    return [{"name": str(names[j]), "before": float(x[j]), "after": float(xa[j]),
             "scaled": float(scaled[j])} for j in moved[:limit]]
