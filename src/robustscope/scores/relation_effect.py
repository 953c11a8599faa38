"""What relations between features change: the radii with and without them.

A result searched with ``radius(..., compare_unconstrained=True)`` on a feature space with
relations carries, per input, the radius found without the relations and whether that
counterexample breaks one. :func:`relation_effect` turns them into the numbers a report shows.
"""

from __future__ import annotations

import math

import numpy as np

from robustscope.core.result import CENSORED, FAILED, INVALID, RadiusResult
from robustscope.core.statuses import AT_ZERO


def relation_effect(result: RadiusResult) -> dict | None:
    """Per threat, how much the relations matter; ``None`` when the result has no
    unconstrained comparison.

    Returns a dict:

    * ``n``: inputs searched under both (not ``invalid``, not ``failed``, not already broken
      at radius 0);
    * ``unconstrained_found``: of those, inputs with an unconstrained counterexample;
    * ``unconstrained_invalid``: of those, counterexamples that break a relation, and
      ``unconstrained_invalid_share`` their share of ``unconstrained_found``;
    * ``lost``: inputs with an unconstrained counterexample but none under the relations
      (censored);
    * ``median_growth``, ``mean_growth``: ratio of the constrained radius to the
      unconstrained one over inputs with both radii finite and > 0;
    * ``grew``: inputs whose radius grew by more than 1e-6 (relative);
    * ``median_radius``, ``median_unconstrained_radius``: over the inputs with both finite.
    """
    meta = result.meta or {}
    if "unconstrained_radius" not in meta or "unconstrained_breaks" not in meta:
        return None
    free = np.asarray(meta["unconstrained_radius"], dtype=np.float64)
    breaks = np.asarray(meta["unconstrained_breaks"], dtype=bool)
    status = np.asarray(result.status)
    keep = ~np.isin(status, (INVALID, FAILED, *AT_ZERO)) & ~np.isnan(free)
    r = np.where(status == CENSORED, math.inf, result.radius)[keep]
    f, b = free[keep], breaks[keep]
    found = np.isfinite(f)
    both = found & np.isfinite(r) & (f > 0)
    ratio = r[both] / f[both]
    return {
        "n": int(keep.sum()),
        "unconstrained_found": int(found.sum()),
        "unconstrained_invalid": int((b & found).sum()),
        "unconstrained_invalid_share": float((b & found).sum() / found.sum()) if found.any()
        else math.nan,
        "lost": int((found & ~np.isfinite(r)).sum()),
        "median_growth": float(np.median(ratio)) if len(ratio) else math.nan,
        "mean_growth": float(ratio.mean()) if len(ratio) else math.nan,
        "grew": int((ratio > 1 + 1e-6).sum()),
        "median_radius": float(np.median(r[both])) if both.any() else math.nan,
        "median_unconstrained_radius": float(np.median(f[both])) if both.any() else math.nan,
    }
