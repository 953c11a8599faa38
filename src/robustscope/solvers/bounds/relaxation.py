"""The linear relaxation of a ReLU shared by backward (CROWN) and forward bounds."""

from __future__ import annotations

import torch


def relu_relaxation(zl: torch.Tensor, u: torch.Tensor):
    """Per neuron: ``(upper slope, upper intercept, default lower slope, unstable mask)``."""
    active, unstable = zl >= 0, (zl < 0) & (u > 0)
    width = (u - zl).clamp_min(1e-300)
    up_slope = torch.where(active, torch.ones_like(zl),
                           torch.where(unstable, u / width, torch.zeros_like(zl)))
    up_int = relaxation_gap(zl, u)
    low_slope = torch.where(active, torch.ones_like(zl),
                            torch.where(unstable & (u >= -zl), torch.ones_like(zl),
                                        torch.zeros_like(zl)))
    return up_slope, up_int, low_slope, unstable


def relaxation_gap(zl: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Per neuron: how far the relaxation's upper line can lie above the ReLU, ``-l u / (u -
    l)`` (at ``z = 0``) for an unstable neuron, 0 for a stable one. Where a node cannot
    bound all its unstable neurons by CROWN, those with the largest gap go first: their
    relaxation costs the bound most."""
    unstable = (zl < 0) & (u > 0)
    return torch.where(unstable, -zl * u / (u - zl).clamp_min(1e-300), torch.zeros_like(zl))
