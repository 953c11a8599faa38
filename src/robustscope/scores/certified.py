"""Readings of certified brackets ``[lower_bound, radius]``: certified robust accuracy and
how wide the brackets are.

A certified lower bound ``lb`` proves that no counterexample lies strictly inside the ball of
``lb``; a verified radius ``r`` is the size of a counterexample found. The true robust
accuracy at strength ``eps`` therefore lies between the certified curve (share of inputs
with ``lb > eps``) and the empirical one (share with ``r > eps``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from robustscope.core.ecdf import share_above
from robustscope.core.statuses import AT_ZERO
from robustscope.solvers.tolerances import BRACKET_RTOL


def certified_accuracy(lower_bound: np.ndarray, status: np.ndarray,
                       eps: np.ndarray | float) -> np.ndarray:
    """``(m,)`` share of all inputs whose certified bound exceeds each strength ``eps``
    (at ``eps = 0``: the well-classified inputs with a positive bound). Inputs at radius 0
    (misclassified, already satisfied) never count."""
    lb = np.where(np.isin(np.asarray(status), AT_ZERO), np.nan,
                  np.asarray(lower_bound, dtype=np.float64))
    return share_above(lb, eps)


@dataclass(frozen=True)
class BracketSummary:
    """Brackets of the well-classified inputs with a finite radius: ``n`` of them,
    ``certified`` with a positive bound, ``closed`` within ``BRACKET_RTOL`` (the search's own
    rule for status ``exact``), and the ratio
    ``radius / lower_bound`` (median, p90; ``inf`` where the bound is 0)."""

    n: int
    certified: int
    closed: int
    ratio_median: float
    ratio_p90: float


def bracket_summary(radius: np.ndarray, lower_bound: np.ndarray,
                    status: np.ndarray) -> BracketSummary:
    """:class:`BracketSummary` of one result's arrays (each ``(n,)``)."""
    r = np.asarray(radius, dtype=np.float64)
    lb = np.asarray(lower_bound, dtype=np.float64)
    keep = np.isfinite(r) & ~np.isin(np.asarray(status), AT_ZERO)
    r, lb = r[keep], lb[keep]
    if len(r) == 0:
        return BracketSummary(0, 0, 0, float("nan"), float("nan"))
    ratio = np.where(lb > 0, r / np.where(lb > 0, lb, 1.0), np.inf)
    return BracketSummary(int(len(r)), int((lb > 0).sum()),
                          int((r - lb <= BRACKET_RTOL * r).sum()),
                          float(np.median(ratio)),
                          float(np.percentile(ratio, 90, method="higher")))
