"""Query-efficient random search that shrinks a counterexample (Cube / Square-attack family).

For each input, starting from a verified counterexample of size ``hi`` (see
:func:`~robustscope.solvers.attacks.decision.starts.find_starts`), the search bisects on the
radius: it tries
to find a counterexample of size ``r = (lo + hi) / 2`` with a random search *inside* the ball
of radius ``r``, warm-started from the best counterexample clipped into that ball. On success
``hi`` falls to the size found; after ``stage_queries`` fruitless queries ``lo`` rises to ``r``
(a heuristic bound, not a certificate). The search ends when ``hi - lo <= rtol · hi`` or the
budget is spent.

Inside a ball (Linf) each proposal moves a random subset of the coordinates (each mutable
coordinate with probability ``p``, at least one) to a vertex value ``±r`` — the Cube attack of
Andriushchenko & Hein (2019), which suits tree ensembles whose splits are axis-aligned. For L2
/ L1 the chosen coordinates get Gaussian noise and the proposal is rescaled onto the sphere of
radius ``r``. A proposal replaces the current point when the statement's margin does not
increase (``accept_ties``: plateaus of piecewise-constant models are walked, not stalled on).
Models that return only a label give margins of ±const, and the search becomes a pure random
search on the decision.

Every proposal is clamped to the allowed box and projected with ``space.project`` before it is
queried, and its size is measured after projection; one query per input per step, batched
over inputs.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from robustscope.core.checks import make_generator
from robustscope.core.space import FeatureSpace
from robustscope.core.statement import DECISION_CHANGE, Statement
from robustscope.models.base import Classifier, QueryLedger
from robustscope.solvers.attacks.decision.scaled_oracle import ScaledOracle
from robustscope.solvers.attacks.decision.starts import find_starts
from robustscope.solvers.output import SolverOutput
from robustscope.solvers.problem import SolverProblem
from robustscope.threats import LpThreat, get_threat


def _clip_into_ball(threat: LpThreat, u: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """Linf: clip each coordinate to ``[-r, r]``; otherwise the norm projection."""
    return threat.project(u, r)


def propose_lp(threat: LpThreat, cur: torch.Tensor, r: torch.Tensor, p: torch.Tensor,
               mutable: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One proposal per row of ``cur`` (k, d) inside the ball of radius ``r`` (k,): each
    mutable coordinate moves with probability ``p`` (k,), at least one per row; Linf to a
    vertex ``±r``, L2 / L1 by Gaussian noise, the result rescaled onto the sphere."""
    k, d = cur.shape
    dtype, device = cur.dtype, cur.device
    pick = torch.rand(k, d, generator=generator, dtype=dtype).to(device) < p.unsqueeze(1)
    # at least one mutable coordinate per proposal
    weights = mutable.to(dtype).expand(k, d)
    forced = torch.multinomial(weights.cpu(), 1, generator=generator).to(device)
    pick.scatter_(1, forced, True)
    pick &= mutable
    if threat.p == math.inf:
        sign = torch.randint(0, 2, (k, d), generator=generator).to(device=device, dtype=dtype)
        return torch.where(pick, (sign * 2 - 1) * r.unsqueeze(1), cur)
    noise = torch.randn(k, d, generator=generator, dtype=dtype).to(device)
    frac = pick.to(dtype).sum(1, keepdim=True) / mutable.to(dtype).sum().clamp_min(1)
    w = cur + torch.where(pick, noise, torch.zeros_like(noise)) * r.unsqueeze(1) * frac.sqrt()
    norm = threat.norm(w).clamp_min(1e-30)
    return w * (r / norm).unsqueeze(1)


def cube_search(
    model: Classifier,
    x: torch.Tensor,
    y: torch.Tensor,
    space: FeatureSpace,
    threat: LpThreat | str = "linf",
    eps: torch.Tensor | float | None = None,
    statement: Statement = DECISION_CHANGE,
    generator: torch.Generator | None = None,
    *,
    budget: int = 5000,
    x_init: torch.Tensor | None = None,
    X_pool: torch.Tensor | None = None,
    y_pool: torch.Tensor | None = None,
    stage_queries: int | None = None,
    p_init: float = 0.1,
    rtol: float = 0.01,
    accept_ties: bool = True,
    restarts: int = 0,
    restart_factor: float = 0.5,
    ledger: QueryLedger | None = None,
    oracle: ScaledOracle | None = None,
) -> SolverOutput:
    """Shrink counterexamples by radius bisection with a random search in each ball.

    Parameters
    ----------
    x : inputs ``(n, *shape)`` in original units; ``y`` their labels ``(n,)``.
    eps : largest radius of interest (a number or per-input ``(n,)``; its maximum caps the
        random search for a starting point); the solver minimises the norm regardless.
    budget : model calls allowed per input (starting points included).
    stage_queries : queries spent at one radius before it is given up; default
        ``30·m`` clipped to ``[100, 300]``, ``m`` = number of mutable features.
    p_init : share of the coordinates a proposal moves at the start of a stage (halved at
        each quarter of the stage).
    rtol : relative width of the radius bracket at which an input is done.
    restarts, restart_factor : times a converged bracket is reopened (its lower end
        multiplied by ``restart_factor``) while budget remains.

    Returns a :class:`~robustscope.solvers.output.SolverOutput` (``forward_queries``: the
    calls made per input).
    """
    threat = get_threat(threat)
    generator = generator or make_generator(0)  # draws are made on the CPU, then moved
    if oracle is None:
        oracle = ScaledOracle(model, x, y, space, threat, statement, budget, ledger)
    largest = None if eps is None else float(torch.as_tensor(eps).max())
    find_starts(oracle, generator, x_init, X_pool, y_pool, max_radius=largest)
    n, d = oracle.n, oracle.d
    dtype, device = oracle.flat.dtype, oracle.flat.device
    found = oracle.holding()
    lo = torch.zeros(n, dtype=dtype, device=device)
    r = oracle.best_r.clone() / 2
    cur = torch.zeros(n, d, dtype=dtype, device=device)
    cur_m = torch.full((n,), float("inf"), dtype=dtype, device=device)
    fresh = torch.ones(n, dtype=torch.bool, device=device)
    spent = torch.zeros(n, dtype=torch.long, device=device)
    active = found.clone()
    if stage_queries is None:
        stage_queries = int(np.clip(30 * int(oracle.mutable.sum()), 100, 300))
    quarter = max(1, stage_queries // 4)
    restarted = torch.zeros(n, dtype=torch.long, device=device)
    while True:
        hi = oracle.best_r
        converged = active & ((hi - lo) <= rtol * hi)
        again = converged & (restarted < restarts)
        if again.any():
            # the bracket's lower end is a heuristic: reopen it while budget remains
            lo[again] = lo[again] * restart_factor
            r[again] = (lo[again] + hi[again]) / 2
            restarted[again] += 1
            fresh[again], spent[again], cur_m[again] = True, 0, float("inf")
        active &= (hi - lo) > rtol * hi
        idx_t = torch.nonzero(active).reshape(-1)
        if not len(idx_t):
            break
        idx = idx_t.cpu().numpy()
        has_budget = oracle.remaining(idx) >= 1
        if not has_budget.any():
            break
        active[idx_t[torch.as_tensor(~has_budget, device=device)]] = False
        idx_t = idx_t[torch.as_tensor(has_budget, device=device)]
        idx = idx[has_budget]
        rr = r[idx_t]
        start = _clip_into_ball(threat, oracle.best_u[idx_t], rr)
        p = p_init * 0.5 ** torch.div(spent[idx_t], quarter, rounding_mode="floor").to(dtype)
        p = p.clamp_min(1.0 / d)
        moved = propose_lp(threat, cur[idx_t], rr, p, oracle.mutable, generator)
        prop = torch.where(fresh[idx_t].unsqueeze(1), start, moved)
        adv, marg, u_valid, _ = oracle.query(idx, prop.unsqueeze(1))
        adv, marg, u_valid = adv[:, 0], marg[:, 0], u_valid[:, 0]
        inside = threat.norm(u_valid) <= rr * (1 + 1e-9)
        better = (marg < cur_m[idx_t]) | (accept_ties & (marg == cur_m[idx_t]))
        take = (fresh[idx_t] | better) & inside
        cur[idx_t] = torch.where(take.unsqueeze(1), u_valid,
                                 torch.where(fresh[idx_t].unsqueeze(1), start, cur[idx_t]))
        cur_m[idx_t] = torch.where(take, marg, cur_m[idx_t])
        fresh[idx_t] = False
        spent[idx_t] += 1
        success = adv & inside
        failure = ~success & (spent[idx_t] >= stage_queries)
        lo[idx_t] = torch.where(failure, rr, lo[idx_t])
        done = success | failure
        if done.any():
            td = idx_t[done]
            r[td] = (lo[td] + oracle.best_r[td]) / 2
            fresh[td] = True
            spent[td] = 0
            cur_m[td] = float("inf")
    return oracle.output()


def solve(problem: SolverProblem, **options) -> SolverOutput:
    """:func:`cube_search` on ``problem`` (the registry's calling convention), its model calls
    charged to ``problem.budget`` through ``problem.model``, the view the search built."""
    return cube_search(problem.model, problem.x, problem.y, problem.space,
                       problem.threat, problem.eps, problem.statement,
                       problem.generator, **options)
