"""Numerics shared by every layer: probabilities to logits, losses computed stably."""

from __future__ import annotations

import numpy as np

from robustscope.core.errors import InputError

#: Probabilities are clamped to this before a log is taken (log(0) = -inf breaks losses).
PROBA_FLOOR = 1e-12


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
