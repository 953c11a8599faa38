"""Score-based boundary projection: the minimum-norm step of a linearised margin
(a black-box DeepFool), for smooth black boxes.

From each input's best counterexample ``u*`` the stage

1. bisects along the path towards the input to a point ``b`` just on the counterexample side
   of the decision boundary (:func:`~robustscope.solvers.attacks.decision.hop_skip_jump.
   bisect_to_boundary`);
2. estimates the gradient ``g`` of the statement's margin ``M`` at ``b`` by forward
   differences, one query per mutable coordinate (step ``h`` in scaled units);
3. solves the linearised problem ``min ||u|| s.t. M(b) + g·(u - b) <= 0``: with
   ``c = g·b - M(b)``, L2 ``u = c·g / ||g||²``, Linf ``u = c·sign(g) / ||g||_1``, L1 all on
   the coordinate of largest ``|g_j|``; and tries ``u`` stretched by ``1 + overshoot``, then, if
   that is not a counterexample, points between it and ``u*``.

A margin that does not move under the differences (a tree ensemble's plateaus, a label-only
model) ends the stage for that input after one estimate, which costs ``d`` queries and the
bisection's few. Each round costs about ``d + 10`` queries; the stage repeats while a round
shrinks the radius by more than ``min_gain`` and budget remains (at most ``rounds``
rounds). Every query goes through the
oracle (valid points only, charged, within the budget).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from robustscope.solvers.attacks.decision.hop_skip_jump import bisect_to_boundary
from robustscope.solvers.attacks.decision.scaled_oracle import ScaledOracle


def linearised_step(threat_p: float, b: torch.Tensor, g: torch.Tensor,
                    m_b: torch.Tensor) -> torch.Tensor:
    """Minimum-norm point ``(k, d)`` of ``{u : m_b + g·(u - b) <= 0}`` for rows of ``b``,
    ``g`` ``(k, d)`` and margins ``m_b`` ``(k,)``."""
    c = (g * b).sum(1) - m_b
    if threat_p == math.inf:
        return c.unsqueeze(1) * torch.sign(g) / g.abs().sum(1).clamp_min(1e-30).unsqueeze(1)
    if threat_p == 2.0:
        return c.unsqueeze(1) * g / (g * g).sum(1).clamp_min(1e-30).unsqueeze(1)
    j = g.abs().argmax(1, keepdim=True)
    u = torch.zeros_like(g)
    return u.scatter(1, j, (c.unsqueeze(1) / g.gather(1, j).where(
        g.gather(1, j) != 0, torch.ones_like(c.unsqueeze(1)))))


def boundary_steps(oracle: ScaledOracle, rounds: int = 6, h: float = 1e-3,
                   overshoot: float = 0.02, min_gain: float = 0.005,
                   bisect_rtol: float = 0.02) -> None:
    """Run the stage on every input holding a counterexample (its counterexamples are kept
    in ``oracle``)."""
    n, d = oracle.n, oracle.d
    mutable = oracle.mutable
    cols = torch.nonzero(mutable).reshape(-1)
    live = (torch.isfinite(oracle.best_r) & (oracle.best_r > 0)).cpu().numpy()
    live &= oracle.remaining(np.arange(n)) >= len(cols) + 8
    for _ in range(rounds):
        idx = np.flatnonzero(live)
        if not len(idx) or not len(cols):
            break
        ti = torch.as_tensor(idx, device=oracle.flat.device)
        before = oracle.best_r[ti].clone()
        b = bisect_to_boundary(oracle, idx, oracle.best_u[ti].clone(), rtol=bisect_rtol,
                               max_steps=8)
        # the margin at b and at b + h e_j for every mutable j, in one request per input
        probes = b.unsqueeze(1).repeat(1, 1 + len(cols), 1)
        steps = (h * before).clamp_min(1e-9).unsqueeze(1)
        rows = torch.arange(len(cols), device=cols.device)
        probes[:, 1 + rows, cols] += steps
        ok = oracle.remaining(idx) >= probes.shape[1]
        if not ok.any():
            break
        sel = np.flatnonzero(ok)
        _, marg, u_valid, _ = oracle.query(idx[sel], probes[torch.as_tensor(sel)])
        base = marg[:, :1]
        moved = (u_valid[:, 1:, :] - u_valid[:, :1, :])[:, rows, cols]
        diff = marg[:, 1:] - base
        g = torch.zeros(len(sel), d, dtype=b.dtype, device=b.device)
        g[:, cols] = torch.where(moved.abs() > 0, diff / moved.abs().clamp_min(1e-30) *
                                 torch.sign(moved), torch.zeros_like(diff))
        flat = ~torch.isfinite(g).all(1) | (g.abs().sum(1) == 0)
        g = torch.where(torch.isfinite(g), g, torch.zeros_like(g))
        bs = u_valid[:, 0, :]
        target = linearised_step(oracle.threat.p, bs, g, base[:, 0])
        tries = [target * (1 + overshoot)]
        anchor = oracle.best_u[ti[torch.as_tensor(sel)]]
        tries += [target + s * (anchor - target) for s in (0.25, 0.5)]
        cand = torch.stack(tries, dim=1)  # (k, 3, d)
        keep = (~flat).cpu().numpy() & (oracle.remaining(idx[sel]) >= cand.shape[1])
        if keep.any():
            ks = np.flatnonzero(keep)
            oracle.query(idx[sel][ks], cand[torch.as_tensor(ks)])
        after = oracle.best_r[ti]
        gain = (before - after) / before
        stop = np.ones(len(idx), dtype=bool)
        stop[sel[keep]] = (gain[torch.as_tensor(sel[keep])] < min_gain).cpu().numpy()
        live[idx[stop]] = False
        live &= oracle.remaining(np.arange(n)) >= len(cols) + 8
