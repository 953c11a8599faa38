"""Figures of the difficulty-aware scores: radius against g(loss), easy vs hard subsets.

Functions take score objects from :mod:`robustscope.scores.intrinsic` and return a matplotlib
Figure (Agg backend); :func:`save_figure` writes it as PNG.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from robustscope.core.fileio import atomic_write  # noqa: E402
from robustscope.core.result import CENSORED, MISCLASSIFIED  # noqa: E402
from robustscope.core.statuses import AT_ZERO  # noqa: E402
from robustscope.report.figures import drawn_note, points_to_draw  # noqa: E402
from robustscope.scores.intrinsic import IntrinsicScores, SubsetComparison  # noqa: E402


def plot_radius_vs_g(scores: IntrinsicScores, title: str | None = None,
                     radius_label: str = "radius r") -> Figure:
    """Scatter of r against g(loss) for the well-classified, uncensored inputs (misclassified
    ones at r = 0 in grey), with the least-squares line (fitted on every input) and its R^2.
    Above :data:`~robustscope.report.figures.MAX_SCATTER_POINTS` inputs, a seeded random
    subset of the points is drawn and the title says so."""
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    s = scores.status
    ok = ~np.isin(s, AT_ZERO) & (s != CENSORED) & np.isfinite(scores.g)
    wrong = (s == MISCLASSIFIED) & np.isfinite(scores.g)
    drawn = np.zeros(len(s), dtype=bool)
    drawn[points_to_draw(len(s))] = True
    shown_ok, shown_wrong = ok & drawn, wrong & drawn
    ax.scatter(scores.g[shown_ok], scores.r[shown_ok], s=14, color="tab:blue",
               label="well-classified")
    if shown_wrong.any():
        ax.scatter(scores.g[shown_wrong], scores.r[shown_wrong], s=14, color="0.6",
                   marker="x", label="misclassified (r = 0)")
    if np.isfinite(scores.slope) and ok.any():
        gx = np.linspace(min(0.0, scores.g[ok].min()), scores.g[ok].max(), 50)
        ax.plot(gx, scores.intercept + scores.slope * gx, color="tab:red",
                label=f"fit: r = {scores.slope:.3g} g + {scores.intercept:.3g}, "
                      f"R² = {scores.r2:.3f}")
    ax.axvline(0, color="0.8", lw=0.8)
    ax.set_xlabel("g(loss) = -log(exp(loss) - 1)")
    ax.set_ylabel(radius_label)
    ax.set_title((title or f"Radius against g(loss)  (R_ν = {scores.R_nu:.3g})")
                 + drawn_note(len(s)))
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_subsets(comparison: SubsetComparison, names: tuple[str, ...] = ("R_m", "R_nu"),
                 title: str | None = None) -> Figure:
    """Bars of each score on the easy and hard subsets, bootstrap intervals as error bars and
    the relative variation written above each pair."""
    fig, ax = plt.subplots(figsize=(5.0, 3.8))
    x = np.arange(len(names))
    width = 0.38
    for k, (part, color) in enumerate(((comparison.easy, "tab:green"),
                                       (comparison.hard, "tab:orange"))):
        vals = np.array([getattr(part, n) for n in names], dtype=float)
        lows = np.array([part.intervals.get(n, (np.nan, np.nan))[0] for n in names])
        highs = np.array([part.intervals.get(n, (np.nan, np.nan))[1] for n in names])
        err = np.vstack([np.clip(vals - lows, 0, None), np.clip(highs - vals, 0, None)])
        err = np.nan_to_num(err)
        ax.bar(x + (k - 0.5) * width, np.nan_to_num(vals), width, yerr=err, capsize=3,
               color=color, label="easy half" if k == 0 else "hard half")
    top = ax.get_ylim()[1]
    for i, n in enumerate(names):
        rv = comparison.rel_var.get(n, np.nan)
        ax.text(i, top * 0.97, f"rel. var. {rv:.2f}", ha="center", va="top", fontsize=8)
    ax.set_xticks(x, [n.replace("_nu", "_ν") for n in names])
    ax.set_ylabel("score")
    ax.set_title(title or "Scores on the easy and hard halves (split by loss)")
    ax.legend(fontsize=8, loc="center right")
    fig.tight_layout()
    return fig


def save_figure(fig: Figure, path: str | Path, dpi: int = 120) -> Path:
    """Write ``fig`` as PNG and close it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=dpi, format="png"))
    plt.close(fig)
    return path
