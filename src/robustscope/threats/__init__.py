"""Threat models: which perturbations count as "the same input, perturbed".

Every threat is declared once, in :mod:`robustscope.threats.registry`.
"""

from robustscope.threats.lp import L1, L2, LINF, LpThreat
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

__all__ = ["L1", "L2", "LINF", "THREATS", "LpThreat", "ThreatEntry", "benchmark_name",
           "canonical_threat", "default_grid", "get_image_threat", "get_threat",
           "implemented_threat", "threat_entry", "threat_names"]
