"""Threat models: which perturbations count as "the same input, perturbed"."""

from robustscope.threats.lp import L1, L2, LINF, LpThreat, get_threat

__all__ = ["L1", "L2", "LINF", "LpThreat", "get_threat"]
