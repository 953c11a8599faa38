"""Certified brackets in the report: each input's certified lower bound beside its verified
radius, and the certified robust-accuracy curve beside the empirical one."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from robustscope.core.ecdf import robust_accuracy
from robustscope.core.result import RadiusResult
from robustscope.core.statuses import AT_ZERO
from robustscope.scores.certified import bracket_summary, certified_accuracy

#: Most brackets drawn in the left panel: beyond this, evenly spaced ranks of the sorted
#: inputs are drawn (a figure of a million markers would cost hundreds of MiB to render).
MAX_DRAWN = 1000


def has_brackets(result: RadiusResult) -> bool:
    """True when some input carries a positive certified lower bound."""
    return bool((np.asarray(result.lower_bound) > 0).any())


def bracket_figure(result: RadiusResult, title: str = "Certified brackets") -> Figure:
    """Left: per well-classified input (sorted by radius) the bracket from ``lower_bound``
    to ``radius``. Right: certified robust accuracy (share with ``lower_bound > eps``) and
    empirical robust accuracy (share with ``radius > eps``); the true curve lies between."""
    fig = Figure(figsize=(10, 4.0))
    left, right = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    keep = np.isfinite(result.radius) & ~np.isin(result.status, AT_ZERO)
    r, lb = result.radius[keep], result.lower_bound[keep]
    order = np.argsort(r)
    idx = np.arange(len(order))
    if len(idx) > MAX_DRAWN:  # evenly spaced ranks, the first and last included
        idx = np.unique(np.linspace(0, len(order) - 1, MAX_DRAWN).round().astype(np.int64))
    drawn = order[idx]
    left.vlines(idx, lb[drawn], r[drawn], color="#8fa8c8", lw=1.2)
    left.plot(idx, r[drawn], "v", color="#c0392b", ms=3, label="verified radius")
    left.plot(idx, lb[drawn], "^", color="#1f6f43", ms=3, label="certified lower bound")
    s = bracket_summary(result.radius, result.lower_bound, result.status)
    left.set_title(f"{title}: {s.closed}/{s.n} closed, radius/bound median "
                   f"{s.ratio_median:.3g}", fontsize=9)
    left.set_xlabel("input (sorted by radius)" if len(idx) == len(order) else
                    f"input (sorted by radius; {len(idx):,} of {len(order):,} drawn, evenly "
                    "spaced)")
    left.set_ylabel("scaled norm")
    left.legend(fontsize=8)
    left.grid(alpha=0.3)
    eps = np.linspace(0.0, result.max_radius, 400)
    right.step(eps, robust_accuracy(result.radius, result.status, result.max_radius, eps),
               where="post", color="#c0392b", lw=1.8, label="empirical (verified radii)")
    right.step(eps, certified_accuracy(result.lower_bound, result.status, eps), where="post",
               color="#1f6f43", lw=1.8, label="certified (lower bounds)")
    right.set_xlabel("strength ε (scaled norm)")
    right.set_ylabel("robust accuracy")
    right.set_ylim(-0.02, 1.02)
    right.set_xlim(left=0)
    right.grid(alpha=0.3)
    right.legend(fontsize=8)
    right.set_title("the true curve lies between", fontsize=9)
    fig.tight_layout()
    return fig
