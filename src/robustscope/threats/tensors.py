"""Small tensor helpers shared by the threat modules (the lowest module of ``threats``)."""

from __future__ import annotations

import torch


def per_input(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``values`` (one per input, shape ``(n,)``) reshaped to ``(n, 1, ..., 1)`` so that it
    broadcasts against ``like`` (shape ``(n, ...)``), in ``like``'s dtype."""
    return values.reshape((-1,) + (1,) * (like.ndim - 1)).to(like.dtype)


#: Constant tensors already built, per (values, device, dtype); see :func:`constant`.
_CONSTANTS: dict[tuple, torch.Tensor] = {}


def _frozen(values) -> tuple | float:
    if isinstance(values, (list, tuple)):
        return tuple(_frozen(v) for v in values)
    return float(values)


def constant(values, like: torch.Tensor) -> torch.Tensor:
    """``values`` (numbers, or nested lists / tuples of them) as a tensor on ``like``'s
    device and dtype, built once per (values, device, dtype) and then reused, so that a
    threat applied at every solver step does not copy a table from the host each time.
    The tensor is shared: callers must not modify it in place."""
    key = (_frozen(values), str(like.device), like.dtype)
    out = _CONSTANTS.get(key)
    if out is None:
        out = torch.tensor(key[0], dtype=like.dtype, device=like.device)
        _CONSTANTS[key] = out
    return out
