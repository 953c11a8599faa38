"""Coordinate moves of the gradient-free search under L2 / L1: build, sparsify, bisect.

A tree ensemble's nearest counterexample under L2 or L1 moves few features, each just past
one of the model's thresholds; the random searches that find counterexamples leave small
moves on many features that add to the norm without changing the decision. The functions here
act on one :class:`~robustscope.solvers.attacks.decision.scaled_oracle.ScaledOracle` (its
budget, its record of the best verified counterexample per input), batched over inputs:

* :func:`coordinate_steps` builds a counterexample that moves few features, from the input;
* :func:`shrink_coordinates` sends moved features back to the input's value, smallest first;
* :func:`bisect_coordinates` bisects each moved feature towards the input's value while the
  point still changes the decision, largest move first (:func:`bisect_moves`, which the
  crossing search uses on its own counterexamples too);
* :func:`polish` is the last two, the final stage of the gradient-free cascade under L2 / L1.

Every candidate goes through the oracle (valid points only, each query charged) and only ever
replaces the counterexample held when it is verified and smaller.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from robustscope.solvers.attacks.decision.scaled_oracle import ScaledOracle

#: Bisection steps per coordinate in :func:`polish` (a move pinned to 1/256 of its size).
POLISH_STEPS = 8


def coordinate_steps(oracle: ScaledOracle, generator: torch.Generator, step: float,
                     passes: int = 2) -> None:
    """L2 / L1: a coordinate search from the input (SimBA's, on the features): in a random
    order, each mutable feature is moved by ``+step`` then ``-step`` (scaled units) and the
    move kept when the margin falls, until the point changes the decision. Two queries per
    feature at most per pass; it builds a counterexample that moves few features, where the
    nearest one of a tree ensemble usually is, and the sweeps and steps down then shrink it."""
    n, d = oracle.n, oracle.d
    every = np.arange(n)
    dtype, device = oracle.flat.dtype, oracle.flat.device
    live = (oracle.best_r > 0).cpu().numpy() & (oracle.remaining(every) >= 2)
    idx = np.flatnonzero(live)
    if not len(idx):
        return
    u = torch.zeros(n, d, dtype=dtype, device=device)
    margin = torch.full((n,), math.inf, dtype=dtype, device=device)
    _, m0, _, asked = oracle.query(idx, u[torch.as_tensor(idx)].unsqueeze(1))
    margin[torch.as_tensor(idx)] = m0[:, 0]
    live[idx[~asked]] = False
    columns = torch.nonzero(oracle.mutable).reshape(-1)
    for _ in range(passes):
        order = columns[torch.randperm(len(columns), generator=generator).to(device)]
        for j in order.tolist():
            for sign in (1.0, -1.0):
                idx = np.flatnonzero(live & (oracle.remaining(every) >= 1))
                if not len(idx):
                    return
                ti = torch.as_tensor(idx, device=device)
                trial = u[ti].clone()
                trial[:, j] += sign * step
                adv, marg, u_valid, _ = oracle.query(idx, trial.unsqueeze(1))
                better = marg[:, 0] < margin[ti]
                u[ti] = torch.where(better.unsqueeze(1), u_valid[:, 0], u[ti])
                margin[ti] = torch.where(better, marg[:, 0], margin[ti])
                live[idx[adv[:, 0].cpu().numpy()]] = False


def shrink_coordinates(oracle: ScaledOracle, factors: tuple[float, ...] = (0.0, 0.5)) -> None:
    """L2 / L1: sweeps over each input's moved coordinates, smallest first, multiplying one
    coordinate at a time by ``factor`` (0: back to the input's value) and keeping the point
    when it still changes the decision. One query per coordinate and sweep; a tree
    ensemble's nearest counterexamples move few features, which a dense start hides."""
    n = oracle.n
    live = oracle.holding().cpu().numpy()
    for factor in factors:
        idx = np.flatnonzero(live)
        if not len(idx):
            return
        ti = torch.as_tensor(idx, device=oracle.flat.device)
        order = oracle.best_u[ti].abs().argsort(dim=1)  # smallest first
        moved = (oracle.best_u[ti] != 0).sum(1)
        for t in range(int(moved.max()) if len(moved) else 0):
            u = oracle.best_u[ti]
            nz = u.shape[1] - moved  # zeros come first in the order
            pos = (nz + t).clamp(max=u.shape[1] - 1)
            j = order.gather(1, pos.unsqueeze(1))
            go = (t < moved).cpu().numpy() & (oracle.remaining(idx) >= 1)
            if not go.any():
                break
            trial = u.scatter(1, j, u.gather(1, j) * factor)
            sel = np.flatnonzero(go)
            oracle.query(idx[sel], trial[torch.as_tensor(sel)].unsqueeze(1))
        live &= oracle.remaining(np.arange(n)) >= 1


def bisect_coordinates(oracle: ScaledOracle, steps: int = POLISH_STEPS) -> None:
    """One sweep over each input's moved coordinates, largest move first: the coordinate's
    move is bisected between zero (assumed not a counterexample: try
    :func:`shrink_coordinates` first) and its value, the others held, keeping the smallest
    move that still changes the decision. ``steps`` queries per coordinate at most; a
    piecewise-constant model's counterexample ends with each move just past a threshold."""
    live = oracle.holding().cpu().numpy()
    idx = np.flatnonzero(live)
    if len(idx):
        bisect_moves(oracle, idx, oracle.best_u[torch.as_tensor(idx, device=oracle.flat.device)],
                     steps)


def bisect_moves(oracle: ScaledOracle, idx: np.ndarray, u: torch.Tensor, steps: int) -> None:
    """Bisect each move of the counterexamples ``u`` ``(k, d)`` of the inputs ``idx``
    towards the input's value, largest first, the others held at the counterexample reached
    so far; ``steps`` queries per move at most. What the bisections find goes to the
    oracle's record (:func:`bisect_coordinates` on its best counterexamples)."""
    if steps < 1:
        return
    device = u.device
    order = u.abs().argsort(dim=1, descending=True)
    moved = (u != 0).sum(1).cpu().numpy()
    for t in range(int(moved.max()) if len(moved) else 0):
        j = order[:, t:t + 1]  # (k, 1): each input's t-th largest move
        start = u.gather(1, j)  # its size when its bisection starts
        _, best = oracle.bisect(idx, lambda pos, f, j=j, start=start, base=u: base[pos].scatter(
            1, j[pos], start[pos] * f.unsqueeze(1)), steps, active=t < moved)
        u = torch.where(torch.as_tensor(t < moved, device=device).unsqueeze(1), best, u)


def polish(oracle: ScaledOracle, steps: int = POLISH_STEPS) -> None:
    """Sparsify then pin each input's best counterexample: :func:`shrink_coordinates` back to
    the input's values, then :func:`bisect_coordinates`. At most ``d + steps · moved`` queries
    per input, within what the oracle's budget allows (a second round was measured to add
    nothing on the tune models)."""
    shrink_coordinates(oracle, (0.0,))
    bisect_coordinates(oracle, steps)


def polish_reserve(budget: int, share: float = 0.2, most: int = 300) -> int:
    """Queries of a per-input ``budget`` kept for :func:`polish`: ``share`` of it, at most
    ``most`` (chosen on the tune models of ``benchmarks/blackbox_budget.py``)."""
    return int(min(most, math.floor(budget * share)))
