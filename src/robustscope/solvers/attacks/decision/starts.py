"""Adversarial starting points for gradient-free minimum-norm solvers.

Decision-based solvers shrink a counterexample they already hold. :func:`find_starts` gives
each input one, cheapest source first: the input itself (already misclassified), a given warm
start (another solver's counterexample), the nearest points of another class in a pool (e.g.
the training data), then random points of growing size. Every start is verified by a query
and recorded as the oracle's best counterexample.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from robustscope.solvers.attacks.decision.scaled_oracle import ScaledOracle


def _random_directions(threat, k: int, m: int, d: int, mutable: torch.Tensor,
                       generator: torch.Generator, dtype, device) -> torch.Tensor:
    """Unit-norm directions ``(k, m, d)``: Linf vertices (random signs), else Gaussian."""
    if threat.p == math.inf:
        v = torch.randint(0, 2, (k, m, d), generator=generator).to(dtype) * 2 - 1
    else:
        v = torch.randn(k, m, d, generator=generator, dtype=dtype)
    v = v.to(device) * mutable.to(dtype)
    norms = threat.norm(v.reshape(k * m, d)).reshape(k, m, 1).clamp_min(1e-30)
    return v / norms


def find_starts(oracle: ScaledOracle, generator: torch.Generator,
                x_init: torch.Tensor | None = None, X_pool: torch.Tensor | None = None,
                y_pool: torch.Tensor | None = None, pool_k: int = 5,
                max_radius: float | None = None, random_rounds: int = 8,
                random_samples: int = 10) -> np.ndarray:
    """Give every input a verified counterexample where one can be found cheaply.

    Parameters
    ----------
    x_init : optional warm starts ``(n, *shape)`` in original units.
    X_pool, y_pool : optional pool of real inputs ``(P, *shape)`` and their labels ``(P,)``;
        the ``pool_k`` nearest pool points of another class are tried.
    max_radius : largest scaled norm tried by the random search (default: 1 for Linf,
        ``sqrt(d)`` for L2, ``d`` for L1, i.e. the whole range-scaled box).

    Returns the boolean ``(n,)`` mask of inputs that now hold a counterexample.
    """
    d = oracle.d
    dtype, device = oracle.flat.dtype, oracle.flat.device
    todo = _missing(oracle)  # a shared oracle may already hold counterexamples
    if len(todo):
        oracle.query(todo, torch.zeros(len(todo), 1, d, dtype=dtype, device=device))
    if x_init is not None:
        u0 = oracle.space.scaled_delta(x_init.to(dtype).reshape(oracle.x.shape), oracle.x)
        todo = _missing(oracle)
        if len(todo):
            oracle.query(todo, u0[torch.as_tensor(todo)].unsqueeze(1))
    if X_pool is not None and len(X_pool):
        todo = _missing(oracle)
        if len(todo):
            pool = torch.as_tensor(X_pool, dtype=dtype, device=device)
            labels = None if y_pool is None else torch.as_tensor(y_pool, device=device)
            offsets = oracle.nearest_in_pool(pool, labels, pool_k)
            oracle.query(todo, offsets[torch.as_tensor(todo)])
    if max_radius is None:
        max_radius = {math.inf: 1.0, 2.0: math.sqrt(d)}.get(oracle.threat.p, float(d))
    for j in range(random_rounds):
        todo = _missing(oracle)
        if not len(todo):
            break
        r = max_radius * 2.0 ** (j - random_rounds + 1)
        v = _random_directions(oracle.threat, len(todo), random_samples, d, oracle.mutable,
                               generator, dtype, device)
        oracle.query(todo, v * r)
    return torch.isfinite(oracle.best_r).cpu().numpy()


def _missing(oracle: ScaledOracle) -> np.ndarray:
    return np.flatnonzero(~torch.isfinite(oracle.best_r).cpu().numpy())
