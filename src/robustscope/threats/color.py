"""Colour threats: a smooth colour look-up table (ReColor) and four parametric transforms.

- :class:`ReColorThreat`: one colour mapping per image, a look-up table of offsets over
  CIELUV (normalised to [0, 1] per channel) on 16 x 32 x 32 control points (L x u x v),
  interpolated trilinearly; every entry within ``eps`` of the identity (L-infinity), plus a
  smoothness penalty between neighbouring control points (after Laidlaw & Feizi, 2019).
- :class:`HueThreat`: rotation of the chroma plane of YIQ by an angle ``theta`` in radians,
  ``|theta| <= eps``.
- :class:`SaturationThreat`: ``gray + (1 + theta) (x - gray)``, ``|theta| <= eps``.
- :class:`BrightnessThreat`: ``x + theta``, ``|theta| <= eps``.
- :class:`ContrastThreat`: ``m + (1 + theta) (x - m)`` with ``m`` the image's mean gray level,
  ``|theta| <= eps``.

All results are clipped to [0, 1]. The colour conversion RGB <-> CIELUV (sRGB, D65 white) is
implemented here in torch (differentiable, any device). To make strength 0 the identity
exactly, ReColor and Hue add the *change* of the colour mapping to ``x`` rather than
round-tripping ``x`` through another colour space.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from robustscope.core.errors import InputError
from robustscope.threats.image import ImageThreat
from robustscope.threats.tensors import constant, per_input

# -- sRGB <-> CIELUV ---------------------------------------------------------------------
_RGB_TO_XYZ = [[0.4124564, 0.3575761, 0.1804375],
               [0.2126729, 0.7151522, 0.0721750],
               [0.0193339, 0.1191920, 0.9503041]]
#: Its inverse, computed once in float64 (torch's inverse on a GPU would wait for the host).
_XYZ_TO_RGB = np.linalg.inv(np.array(_RGB_TO_XYZ)).tolist()
_WHITE = (0.95047, 1.0, 1.08883)  # D65
_UN = 4 * _WHITE[0] / (_WHITE[0] + 15 * _WHITE[1] + 3 * _WHITE[2])
_VN = 9 * _WHITE[1] / (_WHITE[0] + 15 * _WHITE[1] + 3 * _WHITE[2])
_KAPPA = (29.0 / 3.0) ** 3
_EPSILON = (6.0 / 29.0) ** 3
#: Per-channel range used to normalise CIELUV to [0, 1]; it contains the sRGB gamut
#: (L in [0, 100], u in [-83.1, 175.0], v in [-134.1, 107.4]).
LUV_MIN = (0.0, -84.0, -135.0)
LUV_MAX = (100.0, 176.0, 108.0)


def _mat(rows, like: torch.Tensor) -> torch.Tensor:
    return constant(rows, like)


def _apply_matrix(m: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``m`` (3, 3) or (n, 3, 3) applied to the channels of ``x`` (n, 3, H, W)."""
    if m.ndim == 2:
        return torch.einsum("ij,njhw->nihw", m, x)
    return torch.einsum("nij,njhw->nihw", m, x)


def srgb_to_linear(c: torch.Tensor) -> torch.Tensor:
    """sRGB gamma expansion of values in [0, 1]."""
    high = ((c.clamp_min(0.04045) + 0.055) / 1.055) ** 2.4
    return torch.where(c <= 0.04045, c / 12.92, high)


def linear_to_srgb(c: torch.Tensor) -> torch.Tensor:
    """sRGB gamma compression; input clipped to [0, 1] first."""
    c = c.clamp(0.0, 1.0)
    high = 1.055 * c.clamp_min(0.0031308) ** (1 / 2.4) - 0.055
    return torch.where(c <= 0.0031308, 12.92 * c, high)


def rgb_to_luv(x: torch.Tensor) -> torch.Tensor:
    """sRGB images (n, 3, H, W) in [0, 1] to CIELUV (L in [0, 100]), D65 white."""
    xyz = _apply_matrix(_mat(_RGB_TO_XYZ, x), srgb_to_linear(x))
    big_x, big_y, big_z = xyz[:, 0], xyz[:, 1], xyz[:, 2]
    y = big_y / _WHITE[1]
    ell = torch.where(y > _EPSILON, 116 * y.clamp_min(_EPSILON) ** (1 / 3) - 16, _KAPPA * y)
    denom = big_x + 15 * big_y + 3 * big_z
    safe = denom > 1e-8
    d = torch.where(safe, denom, torch.ones_like(denom))
    up = torch.where(safe, 4 * big_x / d, torch.full_like(d, _UN))
    vp = torch.where(safe, 9 * big_y / d, torch.full_like(d, _VN))
    return torch.stack([ell, 13 * ell * (up - _UN), 13 * ell * (vp - _VN)], dim=1)


def luv_to_rgb(luv: torch.Tensor) -> torch.Tensor:
    """CIELUV (n, 3, H, W) to sRGB in [0, 1] (out-of-gamut colours are clipped)."""
    ell, u, v = luv[:, 0], luv[:, 1], luv[:, 2]
    ell = ell.clamp(0.0, 100.0)
    pos = ell > 1e-6
    ell_safe = torch.where(pos, ell, torch.ones_like(ell))
    up = u / (13 * ell_safe) + _UN
    vp = (v / (13 * ell_safe) + _VN).clamp_min(1e-4)
    big_y = torch.where(ell > 8, ((ell + 16) / 116) ** 3, ell / _KAPPA) * _WHITE[1]
    big_x = big_y * 9 * up / (4 * vp)
    big_z = big_y * (12 - 3 * up - 20 * vp) / (4 * vp)
    xyz = torch.stack([big_x, big_y, big_z], dim=1) * pos.unsqueeze(1)
    lin = _apply_matrix(_mat(_XYZ_TO_RGB, luv), xyz)
    return linear_to_srgb(lin)


def normalize_luv(luv: torch.Tensor) -> torch.Tensor:
    lo = _mat(LUV_MIN, luv).reshape(1, 3, 1, 1)
    hi = _mat(LUV_MAX, luv).reshape(1, 3, 1, 1)
    return (luv - lo) / (hi - lo)


def denormalize_luv(z: torch.Tensor) -> torch.Tensor:
    lo = _mat(LUV_MIN, z).reshape(1, 3, 1, 1)
    hi = _mat(LUV_MAX, z).reshape(1, 3, 1, 1)
    return z * (hi - lo) + lo


def _linf(params: torch.Tensor) -> torch.Tensor:
    return params.flatten(1).abs().amax(dim=1)


class ReColorThreat(ImageThreat):
    """Colour look-up table over normalised CIELUV (16 x 32 x 32 control points), offsets
    ``||lut||_inf <= eps`` (grid 0.005 .. 0.1), smoothness penalty weight ``penalty_weight``."""

    channels = 3

    def __init__(self, resolution: tuple[int, int, int] = (16, 32, 32),
                 penalty_weight: float = 0.05) -> None:
        if len(resolution) != 3 or min(resolution) < 2:
            raise InputError(f"resolution must be 3 sizes >= 2, got {resolution}")
        if penalty_weight < 0:
            raise InputError(f"penalty_weight must be >= 0, got {penalty_weight}")
        self.resolution = tuple(int(r) for r in resolution)
        self.penalty_weight = float(penalty_weight)

    def param_shape(self, x):
        return (3, *self.resolution)

    def apply(self, x, params):
        n, _, h, w = x.shape
        z = normalize_luv(rgb_to_luv(x))  # (n, 3, H, W), in [0, 1]
        # grid_sample's 3-D grid is (x, y, z) = (W, H, D) axes = (v, u, L) channels
        coords = torch.stack([z[:, 2], z[:, 1], z[:, 0]], dim=-1) * 2 - 1  # (n, H, W, 3)
        offsets = F.grid_sample(params, coords.reshape(n, 1, h, w, 3), mode="bilinear",
                                padding_mode="border", align_corners=True)  # (n, 3, 1, H, W)
        moved = luv_to_rgb(denormalize_luv(z + offsets[:, :, 0]))
        same = luv_to_rgb(denormalize_luv(z))
        return (x + (moved - same)).clamp(0.0, 1.0)

    def strength(self, x, params, x_adv=None):
        return _linf(params)

    def penalty(self, params):
        """Mean squared difference between neighbouring control points, ``(n,)``."""
        total = torch.zeros(params.shape[0], dtype=params.dtype, device=params.device)
        for dim in (2, 3, 4):
            total = total + params.diff(dim=dim).pow(2).flatten(1).mean(dim=1)
        return total


class _ScalarColorThreat(ImageThreat):
    """One parameter ``theta`` per image, ``|theta| <= eps``; RGB images."""

    channels = 3

    def param_shape(self, x):
        return (1,)

    def strength(self, x, params, x_adv=None):
        return params.abs().reshape(-1)


def _gray(x: torch.Tensor) -> torch.Tensor:
    """ITU-R 601 luma, (n, 1, H, W)."""
    w = constant((0.299, 0.587, 0.114), x)
    return (x * w.reshape(1, 3, 1, 1)).sum(dim=1, keepdim=True)


_RGB_TO_YIQ = [[0.299, 0.587, 0.114],
               [0.595716, -0.274453, -0.321263],
               [0.211456, -0.522591, 0.311135]]


class HueThreat(_ScalarColorThreat):
    """Hue rotation by ``theta`` radians in the YIQ chroma plane (grid 0.025 .. 0.5)."""

    def apply(self, x, params):
        t = _mat(_RGB_TO_YIQ, x)
        t_inv = torch.linalg.inv(t)
        theta = params.reshape(-1)
        c, s = torch.cos(theta), torch.sin(theta)
        zero = torch.zeros_like(theta)
        # R - I, so that theta = 0 adds exactly nothing
        r_minus_i = torch.stack([
            torch.stack([zero, zero, zero], -1),
            torch.stack([zero, c - 1, -s], -1),
            torch.stack([zero, s, c - 1], -1)], dim=1)  # (n, 3, 3)
        m = t_inv @ r_minus_i @ t
        return (x + _apply_matrix(m, x)).clamp(0.0, 1.0)


class SaturationThreat(_ScalarColorThreat):
    """Saturation scaled by ``1 + theta`` around the gray level (grid 0.025 .. 0.5)."""

    def apply(self, x, params):
        return (x + per_input(params.reshape(-1), x) * (x - _gray(x))).clamp(0.0, 1.0)


class BrightnessThreat(_ScalarColorThreat):
    """Brightness shift ``x + theta`` (grid 0.015 .. 0.3), on any number of channels."""

    channels = None

    def apply(self, x, params):
        return (x + per_input(params.reshape(-1), x)).clamp(0.0, 1.0)


class ContrastThreat(_ScalarColorThreat):
    """Contrast scaled by ``1 + theta`` around the image's mean gray (grid 0.025 .. 0.5)."""

    def apply(self, x, params):
        mean = _gray(x).mean(dim=(1, 2, 3), keepdim=True)
        return (x + per_input(params.reshape(-1), x) * (x - mean)).clamp(0.0, 1.0)
