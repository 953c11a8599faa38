"""LPIPS threat: an additive perturbation whose perceptual distance stays within ``eps``.

The distance is LPIPS without learned weights (Zhang et al., 2018, the "lin = 1" variant):
the user's feature network maps an image batch to one or more feature maps ``(n, C_l, H_l,
W_l)``; each is normalised to unit length along channels at every position, and

    d(x, x') = sum_l mean_{h,w} || f_l(x)[:, :, h, w] - f_l(x')[:, :, h, w] ||_2^2 .

robustscope ships no feature network (no weights can be downloaded here): pass one
(``features=``), e.g. the convolutional trunk of an ImageNet AlexNet as the benchmark does.

The constraint ``d(x, clip(x + delta)) <= eps`` is enforced by a projection that bisects the
scale ``t`` in [0, 1] of ``delta`` (``t = 0`` is always feasible), keeping the largest feasible
``t`` found; so every iterate, and the final counterexample, has its LPIPS distance checked
``<= eps``. Grid 0.025 .. 0.5.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from robustscope.core.errors import InputError, ModelError
from robustscope.threats.image import ImageThreat
from robustscope.threats.tensors import per_input

Features = Callable[[torch.Tensor], "torch.Tensor | Sequence[torch.Tensor]"]


class LPIPSThreat(ImageThreat):
    """Additive perturbation with ``LPIPS(x, x') <= eps`` under a user-supplied feature net.

    Parameters
    ----------
    features : callable
        Maps images ``(n, C, H, W)`` in [0, 1] to a feature map ``(n, C_l, H_l, W_l)`` or a
        list of them. Required.
    pixel_step : float
        Size of one solver step on each pixel (sign steps), [0, 1] units.
    bisection_steps : int
        Halvings of the scale interval in the projection.
    """

    def __init__(self, features: Features | None = None, pixel_step: float = 2.0 / 255,
                 bisection_steps: int = 10) -> None:
        if features is None:
            raise InputError("the LPIPS threat needs a feature network: pass features=<callable "
                             "mapping images (n, C, H, W) to feature maps>; robustscope ships "
                             "none")
        if not callable(features):
            raise InputError(f"features must be callable, got {type(features).__name__}")
        if not pixel_step > 0:
            raise InputError(f"pixel_step must be > 0, got {pixel_step}")
        if bisection_steps < 1:
            raise InputError(f"bisection_steps must be >= 1, got {bisection_steps}")
        self.features = features
        self.pixel_step = float(pixel_step)
        self.bisection_steps = int(bisection_steps)

    def _feature_list(self, x: torch.Tensor) -> list[torch.Tensor]:
        out = self.features(x)
        maps = [out] if torch.is_tensor(out) else list(out)
        for i, f in enumerate(maps):
            if not torch.is_tensor(f) or f.ndim < 2 or f.shape[0] != x.shape[0]:
                raise ModelError(f"LPIPS feature network output {i} must be a tensor "
                                 f"(n, C, ...) with n = {x.shape[0]}")
        return maps

    def distance(self, x: torch.Tensor, x_adv: torch.Tensor) -> torch.Tensor:
        """LPIPS distance (no learned weights) between matching rows, shape ``(n,)``."""
        total = torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
        for a, b in zip(self._feature_list(x), self._feature_list(x_adv), strict=True):
            a = a / a.norm(dim=1, keepdim=True).clamp_min(1e-10)
            b = b / b.norm(dim=1, keepdim=True).clamp_min(1e-10)
            diff = ((a - b) ** 2).sum(dim=1)
            total = total + diff.reshape(diff.shape[0], -1).mean(dim=1).to(x.dtype)
        return total

    def param_shape(self, x):
        return tuple(x.shape[1:])

    def apply(self, x, params):
        return (x + params).clamp(0.0, 1.0)

    def strength(self, x, params, x_adv=None):
        with torch.no_grad():
            return self.distance(x, self.apply(x, params) if x_adv is None else x_adv)

    def random_params(self, x, eps, generator):
        r = torch.rand(x.shape, generator=generator, dtype=x.dtype, device=x.device)
        return self.project(x, (2 * r - 1) * self.pixel_step, eps)

    def step(self, x, params, grad, eps, size):
        return params - self.pixel_step * torch.sign(grad)

    @torch.no_grad()
    def project(self, x, params, eps):
        params = (x + params).clamp(0.0, 1.0) - x
        over = self.distance(x, x + params) > eps
        if not over.any():
            return params
        idx = torch.nonzero(over).flatten()
        xs, ps, es = x[idx], params[idx], eps[idx]
        lo = torch.zeros(len(idx), dtype=x.dtype, device=x.device)
        hi = torch.ones_like(lo)
        for _ in range(self.bisection_steps):
            mid = (lo + hi) / 2
            ok = self.distance(xs, self.apply(xs, per_input(mid, ps) * ps)) <= es
            lo = torch.where(ok, mid, lo)
            hi = torch.where(ok, hi, mid)
        out = params.clone()
        out[idx] = per_input(lo, ps) * ps
        return out
