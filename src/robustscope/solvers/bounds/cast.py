"""A copy of a bound graph in another floating point type, for passes whose results need
not be sound.

Branch and bound spends most of its time in the Adam steps that choose each subdomain's
slopes and multipliers; only the bound computed from the chosen values must be sound (and
is computed in float64). The steps themselves can run in float32, which on CPU does the
same matrix products in about 0.6 of the time (benchmarked in :mod:`.branch`).

A node's maps (``fn``, ``transpose``, ``abs_fn``) are modules, or functions holding the
parameters they apply as default arguments or closure cells (see :mod:`.graph`); the copy
rebuilds each with those parameters cast, sharing one cast per original object (a
parameter reached any other way, such as a module-level global, stays as it is).
:func:`cast_network` checks the copy's logits and each node's transposed and absolute maps
against the original's on random inputs and returns ``None`` where they disagree or come out
in another type (a map it could not cast), so a caller falls back to the original.
"""

from __future__ import annotations

import copy
import functools
import types
from dataclasses import replace

import torch
from torch import nn

from robustscope.solvers.bounds.graph import Network

#: Largest ``|cast - original|`` of the logits, relative to ``1 + max |logit|``, on random
#: inputs for the copy to be used (float32 rounding through a deep network is ~1e-6).
AGREEMENT = 1e-3


def cast_network(net: Network, dtype: torch.dtype, seed: int = 0) -> Network | None:
    """``net`` with every parameter its nodes' maps hold cast to ``dtype`` (a floating
    type), or ``None`` where the copy cannot be made or disagrees with ``net`` by more than
    :data:`AGREEMENT`: its logits on 4 random inputs in ``[-1, 1]``, and each node's
    ``transpose`` and ``abs_fn`` on random coefficients, must match and come out in
    ``dtype``."""
    if dtype == net.dtype:
        return net
    memo: dict[int, object] = {}
    try:
        nodes = [replace(nd, fn=_cast(nd.fn, dtype, memo), bias=_cast(nd.bias, dtype, memo),
                         transpose=_cast(nd.transpose, dtype, memo),
                         abs_fn=_cast(nd.abs_fn, dtype, memo)) for nd in net.nodes]
    except Exception:  # a map holding something that cannot be copied
        return None
    out = Network(nodes, net.device, dtype)
    gen = torch.Generator(device="cpu").manual_seed(seed)

    def sample(*shape: int) -> torch.Tensor:
        return (torch.rand(4, *shape, generator=gen, dtype=torch.float64) * 2 - 1).to(
            net.device)

    checks = [(net.logits, out.logits, sample(*net.input_shape))]
    for old, new in zip(net.nodes, out.nodes, strict=True):
        if old.transpose is not None:
            checks.append((old.transpose, new.transpose, sample(*old.shape)))
        if old.abs_fn is not None:
            parent = net.nodes[old.parents[0]].shape
            checks.append((old.abs_fn, new.abs_fn, sample(*parent).abs()))
    with torch.no_grad():
        for want_fn, got_fn, x in checks:
            try:
                want, got = want_fn(x), got_fn(x.to(dtype))
            except (RuntimeError, TypeError):  # a map that still mixes types
                return None
            if got.dtype != dtype or not bool(torch.isfinite(got).all()):
                return None  # (a map holding a constant it could not reach)
            err = float((got.to(want.dtype) - want).abs().max())
            if err > AGREEMENT * (1 + float(want.abs().max())):
                return None
    return out


def _cast(value, dtype: torch.dtype, memo: dict[int, object]):
    """``value`` with its floating tensors cast to ``dtype``: tensors, modules, containers,
    functions (their defaults and closure cells) and partials; anything else as is."""
    if value is None or isinstance(value, (int, float, bool, str, torch.dtype)):
        return value
    key = id(value)
    if key in memo:
        return memo[key]
    if isinstance(value, torch.Tensor):
        out = value.to(dtype) if value.is_floating_point() else value
    elif isinstance(value, nn.Module):
        out = copy.deepcopy(value).to(dtype)
    elif isinstance(value, (tuple, list)):
        out = type(value)(_cast(v, dtype, memo) for v in value)
    elif isinstance(value, dict):
        out = {k: _cast(v, dtype, memo) for k, v in value.items()}
    elif isinstance(value, functools.partial):
        out = functools.partial(_cast(value.func, dtype, memo),
                                *_cast(value.args, dtype, memo),
                                **_cast(value.keywords, dtype, memo))
    elif isinstance(value, types.FunctionType):
        memo[key] = value  # a function that refers to itself keeps the original
        cells = None if value.__closure__ is None else tuple(
            _cast_cell(c, dtype, memo) for c in value.__closure__)
        out = types.FunctionType(value.__code__, value.__globals__, value.__name__,
                                 _cast(value.__defaults__, dtype, memo), cells)
        out.__kwdefaults__ = _cast(value.__kwdefaults__, dtype, memo)
    else:  # builtins (operator.neg), slices, sizes
        out = value
    memo[key] = out
    return out


def _cast_cell(cell: types.CellType, dtype: torch.dtype, memo: dict[int, object]
               ) -> types.CellType:
    try:
        contents = cell.cell_contents
    except ValueError:  # an empty cell (a name bound after the function was made)
        return types.CellType()
    return types.CellType(_cast(contents, dtype, memo))
