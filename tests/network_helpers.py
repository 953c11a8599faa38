"""Small random ReLU networks shared by the bound propagation and branch and bound tests."""

from __future__ import annotations

import torch
from torch import nn


def random_mlp(seed: int, d: int, widths: tuple[int, ...], k: int) -> nn.Module:
    """``Sequential(Linear, ReLU, ..., Linear)``: ``d`` inputs, hidden ``widths``, ``k``
    classes, weights from torch's default initialisation under ``seed`` (float32, eval)."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for w_in, w_out in zip((d, *widths), widths, strict=False):
        layers += [nn.Linear(w_in, w_out), nn.ReLU()]
    layers.append(nn.Linear((d, *widths)[-1], k))
    return nn.Sequential(*layers).eval()
