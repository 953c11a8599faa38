"""Certified brackets in the report, as two figures of the report's usual size (each its own
slot, legible at the report's width): each input's certified lower bound beside its verified
radius (:func:`bracket_figure`), and the certified robust-accuracy curve beside the empirical
one (:func:`certified_accuracy_figure`)."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from robustscope.core.ecdf import robust_accuracy
from robustscope.core.result import RadiusResult
from robustscope.core.statuses import AT_ZERO
from robustscope.scores.certified import bracket_summary, certified_accuracy

#: Most brackets drawn: beyond this, evenly spaced ranks of the sorted inputs are drawn (a
#: figure of a million markers would cost hundreds of MiB to render).
MAX_DRAWN = 1000


def has_brackets(result: RadiusResult) -> bool:
    """True when some input carries a positive certified lower bound."""
    return bool((np.asarray(result.lower_bound) > 0).any())


def bracket_figure(result: RadiusResult, title: str = "Certified brackets") -> Figure:
    """Per well-classified input (sorted by radius) the bracket from ``lower_bound`` to
    ``radius``; the title counts the closed brackets and gives the median radius / bound."""
    fig = Figure(figsize=(6, 4.2))
    ax = fig.add_subplot()
    keep = np.isfinite(result.radius) & ~np.isin(result.status, AT_ZERO)
    r, lb = result.radius[keep], result.lower_bound[keep]
    order = np.argsort(r)
    idx = np.arange(len(order))
    if len(idx) > MAX_DRAWN:  # evenly spaced ranks, the first and last included
        idx = np.unique(np.linspace(0, len(order) - 1, MAX_DRAWN).round().astype(np.int64))
    drawn = order[idx]
    ax.vlines(idx, lb[drawn], r[drawn], color="#8fa8c8", lw=1.2)
    ax.plot(idx, r[drawn], "v", color="#c0392b", ms=3, label="verified radius")
    ax.plot(idx, lb[drawn], "^", color="#1f6f43", ms=3, label="certified lower bound")
    s = bracket_summary(result.radius, result.lower_bound, result.status)
    ax.set_title(f"{title}: {s.closed}/{s.n} closed, radius/bound median "
                 f"{s.ratio_median:.3g}")
    ax.set_xlabel("input (sorted by radius)" if len(idx) == len(order) else
                  f"input (sorted by radius; {len(idx):,} of {len(order):,} drawn, evenly "
                  "spaced)")
    ax.set_ylabel("scaled norm")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def certified_accuracy_figure(result: RadiusResult, title: str = "Certified brackets"
                              ) -> Figure:
    """Certified robust accuracy (share with ``lower_bound > eps``) and empirical robust
    accuracy (share with ``radius > eps``) against strength; the true curve lies between."""
    fig = Figure(figsize=(6, 4.2))
    ax = fig.add_subplot()
    eps = np.linspace(0.0, result.max_radius, 400)
    ax.step(eps, robust_accuracy(result.radius, result.status, result.max_radius, eps),
            where="post", color="#c0392b", lw=1.8, label="empirical (verified radii)")
    ax.step(eps, certified_accuracy(result.lower_bound, result.status, eps), where="post",
            color="#1f6f43", lw=1.8, label="certified (lower bounds)")
    ax.set_xlabel("strength ε (scaled norm)")
    ax.set_ylabel("robust accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlim(left=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(f"Certified vs empirical accuracy — {title}")
    fig.tight_layout()
    return fig
