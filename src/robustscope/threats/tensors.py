"""Small tensor helpers shared by the threat modules (the lowest module of ``threats``)."""

from __future__ import annotations

import torch


def per_input(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``values`` (one per input, shape ``(n,)``) reshaped to ``(n, 1, ..., 1)`` so that it
    broadcasts against ``like`` (shape ``(n, ...)``), in ``like``'s dtype."""
    return values.reshape((-1,) + (1,) * (like.ndim - 1)).to(like.dtype)
