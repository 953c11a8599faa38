"""Default strength grids of the MultiRobustBench threat models, and their names.

Every threat is evaluated at 20 strengths ``step, 2·step, ..., 20·step`` (Dai et al., ICML 2023,
"MultiRobustBench"). Strengths are in the threat's own units (image pixels in [0, 1] for the Lp
threats, pixels of displacement for Elastic, ...). Accuracy files key a strength by
``str(float(round(eps, 5)))``: ``"0.005"``, ``"1.0"``, ``"30.0"``.

Threats have a short name (``"linf"``) used by robustscope and a benchmark name
(``"AutoLinfAttack"``) used in the benchmark's accuracy files; both are accepted everywhere.
"""

from __future__ import annotations

import math

import numpy as np

from robustscope.core.errors import InputError

#: Number of strength levels per threat.
N_LEVELS = 20

#: Short name -> benchmark (accuracy-file) name.
ATTACK_NAMES: dict[str, str] = {
    "linf": "AutoLinfAttack",
    "l2": "AutoL2Attack",
    "l1": "AutoL1Attack",
    "elastic": "ElasticAttack",
    "jpeg_linf": "JPEGLinfAttack",
    "jpeg_l1": "JPEGL1Attack",
    "recolor": "ReColorAdvAttack",
    "stadv": "StAdvAttack",
    "lpips": "LPIPSAttack",
    "hue": "Hue",
    "saturation": "Saturation",
    "brightness": "Brightness",
    "contrast": "Contrast",
    "affine": "AffineWarp",
    "perspective": "PerspectiveWarp",
    "snow": "SnowAttack",
    "fog": "FogAttack",
    "gabor": "GaborAttack",
}

#: Benchmark name -> short name.
SHORT_NAMES: dict[str, str] = {v: k for k, v in ATTACK_NAMES.items()}

#: Grid step per short name: the grid is ``step * (1..20)``.
GRID_STEPS: dict[str, float] = {
    "linf": 0.005,
    "l2": 0.125,
    "l1": 1.5,
    "elastic": 0.05,
    "jpeg_linf": 0.01,
    "jpeg_l1": 1.0,
    "recolor": 0.005,
    "stadv": 0.005,
    "lpips": 0.025,
    "hue": 0.025,
    "saturation": 0.025,
    "brightness": 0.015,
    "contrast": 0.025,
    "affine": 0.005,
    "perspective": 0.0001,
    "snow": 0.005,
    "fog": 2.5,
    "gabor": 0.5,
}

#: The 9 attacks the MultiRobustBench leaderboard ranks by, in benchmark names.
RANKED_ATTACKS: tuple[str, ...] = (
    "AutoLinfAttack", "AutoL2Attack", "AutoL1Attack", "ElasticAttack", "JPEGLinfAttack",
    "JPEGL1Attack", "ReColorAdvAttack", "StAdvAttack", "LPIPSAttack",
)

#: Key of the clean (unattacked) accuracy in accuracy files.
CLEAN = "NoAttack"


def benchmark_name(name: str) -> str:
    """The benchmark name of a threat given either of its names (``"linf"`` or
    ``"AutoLinfAttack"``). Unknown names are returned unchanged, so that attacks outside the
    default list (e.g. CIFAR-10-C corruptions) can still be used with explicit grids."""
    if name in ATTACK_NAMES:
        return ATTACK_NAMES[name]
    lowered = name.lower()
    if lowered in ATTACK_NAMES:
        return ATTACK_NAMES[lowered]
    return name


def short_name(name: str) -> str:
    """The short name of a known threat (``"AutoL2Attack"`` -> ``"l2"``)."""
    full = benchmark_name(name)
    if full not in SHORT_NAMES:
        raise InputError(f"threat '{name}': unknown; known threats are "
                         f"{', '.join(sorted(ATTACK_NAMES))}")
    return SHORT_NAMES[full]


def default_grid(name: str) -> np.ndarray:
    """The 20 default strengths of a threat, shape ``(20,)``, float64, increasing, each
    rounded to 5 decimals (so that ``eps_key`` of each equals the benchmark's key)."""
    step = GRID_STEPS[short_name(name)]
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
