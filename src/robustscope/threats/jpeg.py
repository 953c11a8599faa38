"""JPEG threats: perturbations of the quantised DCT coefficients of a JPEG encoding.

The encoding is baseline JPEG: RGB (0..255) to YCbCr (JFIF, full range), chroma
subsampled 4:2:0, 8 x 8 block DCT (orthonormal DCT-II), each coefficient divided by the
standard quantisation table (ITU T.81 Annex K, luminance for Y, chrominance for Cb/Cr). The
perturbation ``delta`` is added to those *quantised* coefficients without rounding and the
image is decoded back (multiply by the table, inverse DCT, nearest upsampling of chroma,
YCbCr to RGB, divide by 255) and clipped to [0, 1].

Decoding is linear, so ``decode(enc(x) + delta) - decode(enc(x)) = decode_linear(delta)``;
the threat returns ``clip(x + decode_linear(delta), 0, 1)``. This leaves the compression
loss of ``x`` itself out (strength 0 is the identity, as every threat here) and measures only
the adversarial change of the coefficients.

- :class:`JPEGLinfThreat`: every coefficient moved by at most ``eps / 2`` (grid 0.01 .. 0.2).
- :class:`JPEGL1Threat`: ``||delta||_1 <= eps`` (grid 1 .. 20).

For images whose sides are not multiples of 16 the coefficient grid covers the image padded
up to the next multiple of 16; the decoded change is cropped back to the image.
"""

from __future__ import annotations

import math

import torch

from robustscope.threats.image import ImageThreat
from robustscope.threats.lp import L1
from robustscope.threats.tensors import constant, per_input

LUMA_TABLE = [
    [16, 11, 10, 16, 24, 40, 51, 61],
    [12, 12, 14, 19, 26, 58, 60, 55],
    [14, 13, 16, 24, 40, 57, 69, 56],
    [14, 17, 22, 29, 51, 87, 80, 62],
    [18, 22, 37, 56, 68, 109, 103, 77],
    [24, 35, 55, 64, 81, 104, 113, 92],
    [49, 64, 78, 87, 103, 121, 120, 101],
    [72, 92, 95, 98, 112, 100, 103, 99],
]
CHROMA_TABLE = [
    [17, 18, 24, 47, 99, 99, 99, 99],
    [18, 21, 26, 66, 99, 99, 99, 99],
    [24, 26, 56, 99, 99, 99, 99, 99],
    [47, 66, 99, 99, 99, 99, 99, 99],
] + [[99] * 8 for _ in range(4)]


def _dct_rows() -> tuple[tuple[float, ...], ...]:
    rows = []
    for k in range(8):
        scale = math.sqrt(2 / 8) / (math.sqrt(2) if k == 0 else 1.0)
        rows.append(tuple(math.cos(math.pi * (2 * i + 1) * k / 16) * scale for i in range(8)))
    return tuple(rows)


#: The orthonormal 8-point DCT-II matrix as numbers (rows k, columns i).
DCT_ROWS = _dct_rows()


def dct_matrix(dtype=torch.float64, device=None) -> torch.Tensor:
    """Orthonormal 8-point DCT-II matrix ``D`` (coefficients = D @ block @ D.T), built once
    per device and dtype (shared: do not modify it in place)."""
    return constant(DCT_ROWS, torch.empty(0, dtype=dtype, device=device))


def _padded(h: int, w: int) -> tuple[int, int]:
    return 16 * math.ceil(h / 16), 16 * math.ceil(w / 16)


def blocks_idct(coef: torch.Tensor, table: torch.Tensor, dct: torch.Tensor) -> torch.Tensor:
    """Quantised coefficients (n, c, H, W) laid out as 8x8 blocks -> pixels (n, c, H, W)."""
    n, c, h, w = coef.shape
    b = coef.reshape(n, c, h // 8, 8, w // 8, 8).permute(0, 1, 2, 4, 3, 5)  # (..., 8, 8)
    pix = dct.T @ (b * table) @ dct
    return pix.permute(0, 1, 2, 4, 3, 5).reshape(n, c, h, w)


def blocks_dct(pix: torch.Tensor, table: torch.Tensor, dct: torch.Tensor) -> torch.Tensor:
    """Pixels (n, c, H, W) -> quantised (unrounded) coefficients, the inverse of
    :func:`blocks_idct`."""
    n, c, h, w = pix.shape
    b = pix.reshape(n, c, h // 8, 8, w // 8, 8).permute(0, 1, 2, 4, 3, 5)
    coef = (dct @ b @ dct.T) / table
    return coef.permute(0, 1, 2, 4, 3, 5).reshape(n, c, h, w)


class _JPEGThreat(ImageThreat):
    """Shared encoding; parameters are the flattened quantised-coefficient offsets, Y first
    (Hp x Wp), then Cb and Cr (Hp/2 x Wp/2 each)."""

    channels = 3

    def param_shape(self, x):
        hp, wp = _padded(x.shape[2], x.shape[3])
        return (hp * wp + 2 * (hp // 2) * (wp // 2),)

    def decode_delta(self, params: torch.Tensor, h: int, w: int) -> torch.Tensor:
        """The RGB change (n, 3, h, w), [0, 1] units, made by coefficient offsets ``params``."""
        n = params.shape[0]
        hp, wp = _padded(h, w)
        dct = dct_matrix(params.dtype, params.device)
        luma = constant(LUMA_TABLE, params)
        chroma = constant(CHROMA_TABLE, params)
        ny = hp * wp
        y = blocks_idct(params[:, :ny].reshape(n, 1, hp, wp), luma, dct)
        cbcr = blocks_idct(params[:, ny:].reshape(n, 2, hp // 2, wp // 2), chroma, dct)
        cbcr = cbcr.repeat_interleave(2, dim=2).repeat_interleave(2, dim=3)
        cb, cr = cbcr[:, 0:1], cbcr[:, 1:2]
        rgb = torch.cat([y + 1.402 * cr, y - 0.344136 * cb - 0.714136 * cr, y + 1.772 * cb], 1)
        return rgb[:, :, :h, :w] / 255.0

    def apply(self, x, params):
        return (x + self.decode_delta(params, x.shape[2], x.shape[3])).clamp(0.0, 1.0)


class JPEGLinfThreat(_JPEGThreat):
    """Each quantised coefficient moved by at most ``eps / 2`` (grid 0.01 .. 0.2)."""

    def project(self, x, params, eps):
        return super().project(x, params, eps / 2)

    def strength(self, x, params, x_adv=None):
        return 2 * params.abs().amax(dim=1)


class JPEGL1Threat(_JPEGThreat):
    """L1 budget ``||delta||_1 <= eps`` on the quantised coefficients (grid 1 .. 20)."""

    def project(self, x, params, eps):
        return L1.project(params, eps)

    def random_params(self, x, eps, generator):
        n, d = x.shape[0], self.param_shape(x)[0]
        return L1.random_in_ball(n, d, eps, generator, x.dtype, x.device)

    def step(self, x, params, grad, eps, size):
        return params + per_input(size, params) * L1.steepest_direction(-grad)

    def strength(self, x, params, x_adv=None):
        return params.abs().sum(dim=1)
