"""Strength grids in the MultiRobustBench format: 20 levels, keys rounded to 5 decimals.

Every threat is evaluated at 20 strengths ``step, 2·step, ..., 20·step`` (Dai et al., ICML 2023,
"MultiRobustBench"). Strengths are in the threat's own units (image pixels in [0, 1] for the Lp
threats, pixels of displacement for Elastic, ...). Accuracy files key a strength by
``str(float(round(eps, 5)))``: ``"0.005"``, ``"1.0"``, ``"30.0"``.

This module holds only the arithmetic of grids and keys; each threat's step, its names and
its benchmark (accuracy-file) name are declared in :mod:`robustscope.threats.registry`
(``registry.default_grid(name)`` gives a threat's grid).
"""

from __future__ import annotations

import math

import numpy as np

from robustscope.core.errors import InputError

#: Number of strength levels per threat.
N_LEVELS = 20

#: Key of the clean (unattacked) accuracy in accuracy files.
CLEAN = "NoAttack"


def level_grid(step: float) -> np.ndarray:
    """The 20 strengths ``step * (1, ..., 20)``, shape ``(20,)``, float64, increasing, each
    rounded to 5 decimals (so that ``eps_key`` of each equals the benchmark's key)."""
    if not (math.isfinite(step) and step > 0):
        raise InputError(f"grid step must be finite and > 0, got {step!r}")
    return np.array([round(step * k, 5) for k in range(1, N_LEVELS + 1)], dtype=np.float64)


def canonical_eps(eps: float | str) -> float:
    """A strength rounded as the benchmark rounds it (5 decimals), as a float."""
    try:
        value = float(eps)
    except (TypeError, ValueError) as err:
        raise InputError(f"strength {eps!r}: not a number") from err
    if not math.isfinite(value) or value < 0:
        raise InputError(f"strength {eps!r}: must be finite and >= 0")
    return float(round(value, 5))


def eps_key(eps: float | str) -> str:
    """The benchmark's key of a strength: ``str(float(round(eps, 5)))``."""
    return str(canonical_eps(eps))
