"""Numerics shared by every layer: probabilities to logits, losses computed stably, the
rounding a margin must clear."""

from __future__ import annotations

import numpy as np
import torch

from robustscope.core.errors import InputError

#: Probabilities are clamped to this before a log is taken (log(0) = -inf breaks losses).
PROBA_FLOOR = 1e-12
#: Units of the last place, times the size of the logits, by which a point meant to lie past a
#: model's decision boundary should pass it: closer, the model's own rounding, which for a
#: float32 network depends on the batch the point is evaluated in, can put it on either side
#: (a line-search point 1e-6 past a digits MLP's boundary changed the decision in the
#: search's batch and not in a batch of six).
ROUNDING_ULPS = 16


def rounding_margin(logits: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``(n,)`` float64: ``ROUNDING_ULPS`` units of ``dtype``'s last place times
    ``1 + max |logit|`` of each row of ``logits`` ``(n, k)`` (the model computes in
    ``dtype``): how far past zero a margin should aim to stay a counterexample in any
    batch."""
    size = 1 + logits.detach().abs().amax(dim=1).to(torch.float64)
    return ROUNDING_ULPS * torch.finfo(dtype).eps * size


def cross_entropy(logits: np.ndarray, label: np.ndarray) -> np.ndarray:
    """Cross-entropy ``-log softmax(z)_y`` per row, accurate also when it is tiny.

    ``logits`` (n, K), ``label`` (n,) class indices. Computed as
    ``log(1 + sum_{j != y} exp(z_j - z_y))`` with ``log1p`` when ``y`` is the argmax, so that
    ``g(loss)`` keeps its relative precision for confident inputs (``-log p_y`` from a
    probability rounds ``p_y`` to 1 and loses it).
    """
    z = np.asarray(logits, dtype=np.float64)
    y = np.asarray(label, dtype=np.int64).reshape(-1)
    if z.ndim != 2 or z.shape[0] != len(y):
        raise InputError(f"logits: expected shape (n, K) with n = {len(y)}, got {z.shape}")
    rows = np.arange(len(y))
    d = z - z[rows, y][:, None]
    d[rows, y] = -np.inf
    top = d.max(axis=1)
    with np.errstate(over="ignore"):
        rest = np.exp(d - top[:, None]).sum(axis=1)  # >= 1, the top term
        return np.where(top <= 0, np.log1p(np.exp(d).sum(axis=1)),
                        top + np.log(np.exp(-top) + rest))
