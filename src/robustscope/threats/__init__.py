"""Threat models: which perturbations count as "the same input, perturbed".

Every threat is declared once, in :mod:`robustscope.threats.registry`. The registry's names
are imported here at once (reading them imports no torch); the norm balls ``L1``, ``L2``,
``LINF`` and ``LpThreat`` on first use, since their module imports torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from robustscope.threats.registry import (
    THREATS,
    ThreatEntry,
    benchmark_name,
    canonical_threat,
    default_grid,
    get_image_threat,
    get_threat,
    implemented_threat,
    threat_entry,
    threat_names,
)

#: Names imported from ``robustscope.threats.lp`` on first use.
_LAZY = ("L1", "L2", "LINF", "LpThreat")

__all__ = ["L1", "L2", "LINF", "THREATS", "LpThreat", "ThreatEntry", "benchmark_name",
           "canonical_threat", "default_grid", "get_image_threat", "get_threat",
           "implemented_threat", "threat_entry", "threat_names"]


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module 'robustscope.threats' has no attribute '{name}'")
    value = getattr(importlib.import_module("robustscope.threats.lp"), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # static tools see the real names
    from robustscope.threats.lp import L1, L2, LINF, LpThreat
