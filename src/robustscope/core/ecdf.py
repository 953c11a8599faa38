"""Shares of values above or below thresholds, from one sort instead of an (eps × n) mask.

Curves of robust accuracy and flip rate evaluate a few hundred strengths over up to millions
of radii; comparing every pair would allocate ``len(eps) * n`` booleans (400 MB for 400
strengths and 10⁶ inputs). Sorting once and counting with :func:`numpy.searchsorted` takes
``O(n log n)`` time and ``O(n)`` memory.
"""

from __future__ import annotations

import numpy as np

from robustscope.core.statuses import CENSORED


def _sorted_valid(values: np.ndarray) -> np.ndarray:
    """``values`` as float64, NaN removed, sorted: ``(n_valid,)``."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    return np.sort(v[~np.isnan(v)])


def _thresholds(eps: np.ndarray | float) -> np.ndarray:
    return np.atleast_1d(np.asarray(eps, dtype=np.float64))


def count_at_most(values: np.ndarray, eps: np.ndarray | float) -> np.ndarray:
    """Number of ``values`` that are ``<= e`` for each ``e`` in ``eps``.

    values : ``(n,)`` floats; NaN never counts, ``inf`` only at ``e = inf``.
    eps : ``(m,)`` thresholds (or a scalar).
    Returns ``(m,)`` int64 counts.
    """
    s = _sorted_valid(values)
    return np.searchsorted(s, _thresholds(eps), side="right").astype(np.int64)


def count_above(values: np.ndarray, eps: np.ndarray | float) -> np.ndarray:
    """Number of ``values`` that are ``> e`` for each ``e`` in ``eps`` (NaN never counts).

    values : ``(n,)``; eps : ``(m,)`` or a scalar. Returns ``(m,)`` int64 counts.
    """
    s = _sorted_valid(values)
    return (len(s) - np.searchsorted(s, _thresholds(eps), side="right")).astype(np.int64)


def share_above(values: np.ndarray, eps: np.ndarray | float) -> np.ndarray:
    """Share of all ``n`` values (NaN included in the denominator) that are ``> e``:
    ``(m,)`` floats, NaN where ``n = 0``."""
    n = np.asarray(values).size
    counts = count_above(values, eps)
    return counts / n if n else np.full(counts.shape, np.nan)


def share_at_most(values: np.ndarray, eps: np.ndarray | float) -> np.ndarray:
    """Share of all ``n`` values (NaN included in the denominator) that are ``<= e``:
    ``(m,)`` floats, NaN where ``n = 0``."""
    n = np.asarray(values).size
    counts = count_at_most(values, eps)
    return counts / n if n else np.full(counts.shape, np.nan)


def robust_accuracy(radius: np.ndarray, status: np.ndarray, max_radius: float,
                    eps: np.ndarray | float) -> np.ndarray:
    """Robust accuracy at each strength: the share of inputs whose radius exceeds ``e``.

    radius, status : ``(n,)`` per input; censored inputs count as robust up to
    ``max_radius``, and the accuracy at strengths above it is unknown (NaN).
    eps : ``(m,)`` strengths (or a scalar). Returns ``(m,)`` floats.
    """
    eps = _thresholds(eps)
    r = np.where(np.asarray(status) == CENSORED, np.inf, radius)
    return np.where(eps <= max_radius * (1 + 1e-12), share_above(r, eps), np.nan)
