"""Spatial threats: images resampled along a perturbed sampling grid.

All of them sample ``x`` with bilinear interpolation (``torch.nn.functional.grid_sample``,
``align_corners=True``, border padding) at a grid that equals the pixel centres at strength
0, so strength 0 is the identity (up to float rounding, ~1e-7).

- :class:`ElasticThreat`: per-pixel 2-D flow in *pixels*, ``||flow||_inf <= eps``, smoothed by
  a normalised Gaussian kernel (a convex combination, so the smoothed flow keeps the bound).
- :class:`StAdvThreat`: per-pixel flow in *normalised coordinates* ([-1, 1] spans the image),
  ``||flow||_inf <= eps``, with the flow-smoothness penalty of Xiao et al. (2018).
- :class:`AffineWarpThreat`: the 2x3 affine matrix (normalised coordinates) = identity +
  offsets, ``||offsets||_inf <= eps``.
- :class:`PerspectiveWarpThreat`: the 3x3 homography (pixel coordinates, origin at the top-left
  pixel, ``h33 = 1``) = identity + offsets on its 8 free entries, ``||offsets||_inf <= eps``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from robustscope.core.errors import InputError
from robustscope.threats.image import ImageThreat
from robustscope.threats.tensors import constant


def identity_grid(n: int, h: int, w: int, dtype, device) -> torch.Tensor:
    """Sampling grid of the pixel centres, normalised to [-1, 1]: ``(n, h, w, 2)`` as (x, y)."""
    ys = torch.linspace(-1.0, 1.0, h, dtype=dtype, device=device) if h > 1 else \
        torch.zeros(1, dtype=dtype, device=device)
    xs = torch.linspace(-1.0, 1.0, w, dtype=dtype, device=device) if w > 1 else \
        torch.zeros(1, dtype=dtype, device=device)
    gy, gx = torch.meshgrid(ys, xs, indexing="ij")
    return torch.stack([gx, gy], dim=-1).unsqueeze(0).expand(n, h, w, 2)


def sample(x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    """Bilinear sampling of ``x`` (n, C, H, W) at ``grid`` (n, H, W, 2), clipped to [0, 1]."""
    out = F.grid_sample(x, grid.to(x.dtype), mode="bilinear", padding_mode="border",
                        align_corners=True)
    return out.clamp(0.0, 1.0)


def _linf(params: torch.Tensor) -> torch.Tensor:
    return params.flatten(1).abs().amax(dim=1)


def gaussian_kernel(size: int, sigma: float, dtype, device) -> torch.Tensor:
    """Normalised 1-D Gaussian kernel of odd ``size`` (sums to 1)."""
    r = torch.arange(size, dtype=dtype, device=device) - (size - 1) / 2
    k = torch.exp(-0.5 * (r / sigma) ** 2)
    return k / k.sum()


class ElasticThreat(ImageThreat):
    """Gaussian-smoothed per-pixel flow, ``||flow||_inf <= eps`` pixels (grid 0.05 .. 1.0)."""

    def __init__(self, kernel_size: int = 5, sigma: float = 1.0) -> None:
        if kernel_size < 1 or kernel_size % 2 == 0:
            raise InputError(f"kernel_size must be a positive odd integer, got {kernel_size}")
        if not sigma > 0:
            raise InputError(f"sigma must be > 0, got {sigma}")
        self.kernel_size = int(kernel_size)
        self.sigma = float(sigma)

    def param_shape(self, x):
        return (2, x.shape[2], x.shape[3])

    def smooth(self, flow: torch.Tensor) -> torch.Tensor:
        """Separable Gaussian smoothing with replicate padding, ``(n, 2, H, W)``."""
        k = gaussian_kernel(self.kernel_size, self.sigma, flow.dtype, flow.device)
        pad = self.kernel_size // 2
        out = F.pad(flow, (pad, pad, 0, 0), mode="replicate")
        out = F.conv2d(out, k.reshape(1, 1, 1, -1).expand(2, 1, 1, -1), groups=2)
        out = F.pad(out, (0, 0, pad, pad), mode="replicate")
        return F.conv2d(out, k.reshape(1, 1, -1, 1).expand(2, 1, -1, 1), groups=2)

    def apply(self, x, params):
        n, _, h, w = x.shape
        flow = self.smooth(params)  # pixels, (n, 2, H, W): channel 0 = x, 1 = y
        to_norm = constant((2.0 / max(w - 1, 1), 2.0 / max(h - 1, 1)), x)
        grid = identity_grid(n, h, w, x.dtype, x.device) + flow.permute(0, 2, 3, 1) * to_norm
        return sample(x, grid)

    def strength(self, x, params, x_adv=None):
        return _linf(params)


class StAdvThreat(ImageThreat):
    """Per-pixel flow in normalised coordinates, ``||flow||_inf <= eps`` (grid 0.005 .. 0.1),
    with the flow-smoothness penalty (weight ``penalty_weight``)."""

    def __init__(self, penalty_weight: float = 0.05) -> None:
        if penalty_weight < 0:
            raise InputError(f"penalty_weight must be >= 0, got {penalty_weight}")
        self.penalty_weight = float(penalty_weight)

    def param_shape(self, x):
        return (2, x.shape[2], x.shape[3])

    def apply(self, x, params):
        n, _, h, w = x.shape
        grid = identity_grid(n, h, w, x.dtype, x.device) + params.permute(0, 2, 3, 1)
        return sample(x, grid)

    def strength(self, x, params, x_adv=None):
        return _linf(params)

    def penalty(self, params):
        """Flow smoothness (Xiao et al.): mean over pixels of the summed distances to the
        4 neighbours, ``sqrt(du^2 + dv^2 + 1e-8)``; shape ``(n,)``."""
        p = F.pad(params, (1, 1, 1, 1), mode="replicate")
        centre = p[:, :, 1:-1, 1:-1]
        total = torch.zeros_like(params[:, 0])
        for dy, dx in ((0, 1), (2, 1), (1, 0), (1, 2)):
            nb = p[:, :, dy:dy + params.shape[2], dx:dx + params.shape[3]]
            total = total + torch.sqrt(((nb - centre) ** 2).sum(dim=1) + 1e-8)
        return total.flatten(1).mean(dim=1)


class AffineWarpThreat(ImageThreat):
    """Affine warp: identity 2x3 matrix + offsets, ``||offsets||_inf <= eps`` (0.005 .. 0.1)."""

    def param_shape(self, x):
        return (6,)

    def apply(self, x, params):
        n, c, h, w = x.shape
        eye = constant(((1.0, 0.0, 0.0), (0.0, 1.0, 0.0)), x)
        theta = eye + params.reshape(n, 2, 3)
        grid = F.affine_grid(theta, [n, c, h, w], align_corners=True)
        return sample(x, grid)

    def strength(self, x, params, x_adv=None):
        return _linf(params)


class PerspectiveWarpThreat(ImageThreat):
    """Perspective warp: identity homography + offsets on its 8 free entries, in pixel
    coordinates, ``||offsets||_inf <= eps`` (grid 0.0001 .. 0.002)."""

    def param_shape(self, x):
        return (8,)

    def apply(self, x, params):
        n, _, h, w = x.shape
        hom = torch.cat([params, torch.zeros(n, 1, dtype=params.dtype, device=params.device)], 1)
        hom = hom.reshape(n, 3, 3) + torch.eye(3, dtype=params.dtype, device=params.device)
        ys, xs = torch.meshgrid(torch.arange(h, dtype=x.dtype, device=x.device),
                                torch.arange(w, dtype=x.dtype, device=x.device), indexing="ij")
        pts = torch.stack([xs, ys, torch.ones_like(xs)], dim=0).reshape(3, -1)  # (3, HW)
        src = hom @ pts  # (n, 3, HW)
        denom = src[:, 2]
        # keep the denominator away from 0 (only reachable for strengths far above the grid)
        denom = torch.where(denom.abs() < 1e-3, torch.full_like(denom, 1e-3), denom)
        sx = src[:, 0] / denom
        sy = src[:, 1] / denom
        gx = 2.0 * sx / max(w - 1, 1) - 1.0
        gy = 2.0 * sy / max(h - 1, 1) - 1.0
        grid = torch.stack([gx, gy], dim=-1).reshape(n, h, w, 2)
        return sample(x, grid)

    def strength(self, x, params, x_adv=None):
        return _linf(params)


__all__ = ["AffineWarpThreat", "ElasticThreat", "PerspectiveWarpThreat", "StAdvThreat",
           "gaussian_kernel", "identity_grid", "sample"]
