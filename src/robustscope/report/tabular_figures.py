"""Figures for the black-box tutorial's readings: flip rate against strength, initial against
perturbed score, and the out-of-distribution check.

Each function takes arrays (or a :class:`RadiusResult`), returns a matplotlib ``Figure``
built without pyplot (no global state, any backend), and :func:`save_figure` writes it as a
PNG.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from robustscope.core.fileio import atomic_write
from robustscope.core.result import RadiusResult
from robustscope.report.figures import drawn_note, points_to_draw
from robustscope.scores.distribution import OODReport, flip_rate, score_shift


def save_figure(fig: Figure, path: str | Path, dpi: int = 120) -> Path:
    """Write ``fig`` as a PNG (by way of the Agg canvas) and return the path."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    path = Path(path)
    FigureCanvasAgg(fig)
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=dpi, format="png"))
    return path


def flip_rate_figure(result: RadiusResult | np.ndarray, labels: np.ndarray | None = None,
                     status: np.ndarray | None = None, eps: np.ndarray | None = None,
                     class_names: dict | None = None, title: str = "Flip rate vs strength"
                     ) -> Figure:
    """Step curves of the flip rate (share of inputs with radius ``<= eps``) overall and per
    class. Censored inputs never count as flipped; misclassified inputs are left out."""
    radius = result.radius if isinstance(result, RadiusResult) else np.asarray(result)
    finite = radius[np.isfinite(radius)]
    if eps is None:
        top = float(finite.max()) * 1.05 if len(finite) and finite.max() > 0 else 1.0
        eps = np.linspace(0.0, top, 200)
    table = flip_rate(result, eps, labels=labels, status=status)
    fig = Figure(figsize=(6, 4.5))
    ax = fig.add_subplot()
    for group, part in table.groupby("group", sort=False):
        name = "all" if group == "all" else f"class {(class_names or {}).get(group, group)}"
        ax.step(part["eps"], part["flip_rate"], where="post",
                lw=2.2 if group == "all" else 1.4, label=f"{name} (n={int(part['n'].iloc[0])})")
    ax.set_xlabel("strength eps (scaled norm)")
    ax.set_ylabel("flip rate")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    return fig


def score_scatter_figure(proba: np.ndarray, proba_adv: np.ndarray, radius: np.ndarray,
                         prediction: np.ndarray | None = None, threshold: float | None = None,
                         title: str = "Initial vs perturbed score") -> Figure:
    """Probability of the predicted class before (x) and after (y) the perturbation, one
    point per input, coloured by radius. Pass only inputs with a counterexample.
    ``threshold`` draws the decision line (0.5 for a binary model). Above
    :data:`~robustscope.report.figures.MAX_SCATTER_POINTS` inputs, a seeded random subset is
    drawn and the title says so."""
    n = len(proba)
    rows = points_to_draw(n)
    proba, proba_adv = np.asarray(proba)[rows], np.asarray(proba_adv)[rows]
    prediction = None if prediction is None else np.asarray(prediction)[rows]
    before, after = score_shift(proba, proba_adv, prediction)
    radius = np.asarray(radius, dtype=np.float64).reshape(-1)[rows]
    title += drawn_note(n)
    fig = Figure(figsize=(6, 5))
    ax = fig.add_subplot()
    points = ax.scatter(before, after, c=radius, cmap="viridis", alpha=0.75, s=22)
    fig.colorbar(points, ax=ax, label="radius (scaled norm)")
    if threshold is None and proba.shape[1] == 2:
        threshold = 0.5
    if threshold is not None:
        ax.axhline(threshold, ls="--", c="grey", lw=1)
        ax.axvline(threshold, ls="--", c="grey", lw=1)
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("initial score (predicted class)")
    ax.set_ylabel("perturbed score (same class)")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def ood_figure(report: OODReport, title: str = "IsolationForest scores") -> Figure:
    """Histograms of IsolationForest scores for clean inputs and counterexamples, with the
    outlier threshold (points left of it are outliers)."""
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    both = np.r_[report.clean_score, report.adv_score]
    bins = np.linspace(both.min(), both.max(), 30) if len(both) else 10
    ax.hist(report.clean_score, bins=bins, alpha=0.6,
            label=f"clean ({report.clean_outliers}/{len(report.clean_score)} outliers)")
    ax.hist(report.adv_score, bins=bins, alpha=0.6,
            label=f"counterexamples ({report.adv_outliers}/{len(report.adv_score)} outliers)")
    ax.axvline(report.threshold, c="k", ls="--", lw=1, label="outlier threshold")
    ax.set_xlabel("IsolationForest score (higher = more normal)")
    ax.set_ylabel("inputs")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    return fig
