"""Lp threats (Linf, L2, L1) on images, wrapped into the :class:`ImageThreat` interface.

The parameters are the additive perturbation ``delta`` (n, C, H, W) in pixel units of the
[0, 1] scale; ``x' = clip(x + delta, 0, 1)``. Clipping moves every coordinate of the effective
perturbation towards 0, so ``||x' - x||_p <= ||delta||_p <= eps``. Geometry (norm, projection,
steepest direction, random start) comes from :mod:`robustscope.threats.lp`.
"""

from __future__ import annotations

import torch

from robustscope.threats.image import ImageThreat
from robustscope.threats.lp import L1, LpThreat


class LpImageThreat(ImageThreat):
    """Additive perturbation with ``||delta||_p <= eps`` (p in {inf, 2, 1}); ``lp`` gives the
    geometry (:data:`robustscope.threats.lp.LINF`, ``L2`` or ``L1``)."""

    def __init__(self, lp: LpThreat) -> None:
        self.lp = lp
        self.name = lp.name

    def param_shape(self, x: torch.Tensor) -> tuple[int, ...]:
        return tuple(x.shape[1:])

    def apply(self, x: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
        return (x + params).clamp(0.0, 1.0)

    def strength(self, x, params, x_adv=None):
        x_adv = self.apply(x, params) if x_adv is None else x_adv
        return self.lp.norm((x_adv - x).flatten(1))

    def project(self, x, params, eps):
        # project onto the ball, then onto the box [0,1] - x; for Linf and L2/L1 the box
        # clip keeps the point inside the ball, so the result satisfies both constraints.
        flat = self.lp.project(params.flatten(1), eps).reshape(params.shape)
        return (x + flat).clamp(0.0, 1.0) - x

    def random_params(self, x, eps, generator):
        d = x[0].numel()
        u = self.lp.random_in_ball(x.shape[0], d, eps, generator, x.dtype, x.device)
        return self.project(x, u.reshape(x.shape), eps)

    def step(self, x, params, grad, eps, size):
        g = -grad
        if self.lp is L1:
            # sparse steps go only to pixels that can still move in the ascent direction
            # (a pixel at 0 or 1 cannot), else they are lost to the box clip
            x_adv = x + params
            g = torch.where(((x_adv >= 1) & (g > 0)) | ((x_adv <= 0) & (g < 0)),
                            torch.zeros_like(g), g)
        direction = self.lp.steepest_direction(g.flatten(1)).reshape(params.shape)
        scale = size.reshape(-1, *([1] * (params.ndim - 1))).to(params.dtype)
        return params + scale * direction

