"""Score-based minimum-norm random search that steps the radius down (the black-box default).

For each input, from a verified counterexample of scaled norm ``R`` (see
:func:`~robustscope.solvers.attacks.decision.starts.find_starts`: the input's nearest inputs of
another class first), the search asks for a counterexample inside the smaller ball of radius
``r = R·(1 - m)``:

1. its first query is the best counterexample pulled into that ball (Linf: clipped to
   ``[-r, r]``; L2 / L1: scaled towards the input), which on piecewise-constant models (trees)
   often still changes the decision;
2. otherwise a random search inside the ball follows the statement's margin (the model's
   scores: a proposal replaces the current point when the margin does not grow; on a
   label-only model every margin ties and the search is a random walk): each proposal moves a
   few coordinates, under Linf to ``±r`` (a Cube / Square-attack vertex), to a value drawn
   uniformly from ``[-r, r]`` or back to the input's own value (a tree's split may lie inside
   the ball, and the nearest counterexample of a tree ensemble rarely moves every feature),
   under L2 / L1 by Gaussian noise on the moved coordinates, rescaled onto the sphere;
3. a counterexample inside the ball lowers ``R`` and doubles ``m`` (up to ``m_max``): a radius
   far above the true one falls geometrically; ``stage`` fruitless queries halve ``m``.

Under L2 / L1 the search first runs a coordinate search from the input
(:func:`coordinate_steps`) and sweeps the moved coordinates back towards the input
(:func:`shrink_coordinates`): a tree ensemble's nearest counterexample moves few features.

When ``m`` falls below ``rtol / 2`` the search has stalled around its best point; it then
*explores*: a random-search stage of ``explore_len · stage`` queries at ``R·(1 - e)`` from a
random point of that sphere, which can reach another region of the counterexample set. The
``k``-th exploration in a row that fails uses ``e = explore_steps[k]`` (by default just below
the radius, at half of it, just below again, at a fifth of it: a nearest counterexample far
from the one held, which the steps down from it cannot reach, is looked for from the input's
side too).
An input whose ``patience`` explorations in a row all fail has *converged* and stops; an input
stops too when its budget is spent (``meta["converged"]`` says which, per input).

Every proposal is made valid before it is queried
(:meth:`~robustscope.solvers.attacks.decision.scaled_oracle.ScaledOracle.project`: the box,
integer and binary features rounded towards the input, one-hot groups, immutable features,
relations), and a proposal that projects onto the point already held is not queried at all.
Queries are batched over inputs, one per input per step, each charged to its input.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from robustscope.core.checks import make_generator
from robustscope.core.errors import InputError
from robustscope.core.space import FeatureSpace
from robustscope.core.statement import DECISION_CHANGE, Statement
from robustscope.models.base import Classifier, QueryLedger
from robustscope.solvers.attacks.decision.coordinates import coordinate_steps, shrink_coordinates
from robustscope.solvers.attacks.decision.cube_search import propose_lp
from robustscope.solvers.attacks.decision.scaled_oracle import ScaledOracle
from robustscope.solvers.attacks.decision.starts import find_starts
from robustscope.solvers.output import SolverOutput
from robustscope.solvers.problem import SolverProblem
from robustscope.threats import LpThreat, get_threat


def default_stage(mutable_features: int) -> int:
    """Queries spent at one radius before it is given up: two thirds of the mutable features,
    clipped to ``[10, 50]`` (chosen on the tune models of ``benchmarks/blackbox_budget.py``)."""
    return int(np.clip(round(2 * mutable_features / 3), 10, 50))


def pull_into_ball(threat: LpThreat, u: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """The point of ``u`` ``(k, d)`` pulled into the ball of radius ``r`` ``(k,)`` along the
    path to the input: Linf clips each coordinate to ``[-r, r]``, L2 / L1 scale ``u`` down."""
    if threat.p == math.inf:
        return torch.maximum(torch.minimum(u, r.unsqueeze(1)), -r.unsqueeze(1))
    norm = threat.norm(u).clamp_min(1e-30)
    return u * (r / norm).clamp(max=1.0).unsqueeze(1)


def random_on_sphere(threat: LpThreat, k: int, r: torch.Tensor, mutable: torch.Tensor,
                     generator: torch.Generator) -> torch.Tensor:
    """``k`` random points ``(k, d)`` of norm ``r`` on the mutable coordinates: Linf a random
    vertex, L2 / L1 a Gaussian direction rescaled."""
    d = mutable.shape[0]
    dtype, device = r.dtype, r.device
    if threat.p == math.inf:
        v = torch.randint(0, 2, (k, d), generator=generator).to(dtype) * 2 - 1
    else:
        v = torch.randn(k, d, generator=generator, dtype=dtype)
    v = v.to(device) * mutable.to(dtype)
    return v * (r / threat.norm(v).clamp_min(1e-30)).unsqueeze(1)


def propose(threat: LpThreat, cur: torch.Tensor, r: torch.Tensor, p: torch.Tensor,
            mutable: torch.Tensor, generator: torch.Generator, f_vertex: float,
            f_input: float) -> torch.Tensor:
    """One proposal per row of ``cur`` ``(k, d)`` inside the ball of radius ``r`` ``(k,)``:
    each mutable coordinate moves with probability ``p`` ``(k,)`` (at least one per row).
    Under Linf a moved coordinate goes to a vertex ``±r`` (share ``f_vertex``), back to the
    input's value (share ``f_input``) or to a uniform value in ``[-r, r]``; under L2 / L1
    see :func:`~robustscope.solvers.attacks.decision.cube_search.propose_lp`."""
    if threat.p != math.inf:
        return propose_lp(threat, cur, r, p, mutable, generator)
    k, d = cur.shape
    dtype, device = cur.dtype, cur.device

    def uniform() -> torch.Tensor:
        return torch.rand(k, d, generator=generator, dtype=dtype).to(device)

    pick = uniform() < p.unsqueeze(1)
    forced = torch.multinomial(mutable.to(dtype).expand(k, d).cpu(), 1, generator=generator)
    pick.scatter_(1, forced.to(device), True)
    pick &= mutable
    sign = torch.randint(0, 2, (k, d), generator=generator).to(device=device, dtype=dtype) * 2 - 1
    kind = uniform()
    size = torch.where(kind < f_vertex, torch.ones_like(kind),
                       torch.where(kind < f_vertex + f_input, torch.zeros_like(kind), uniform()))
    return torch.where(pick, sign * size * r.unsqueeze(1), cur)


def step_down_search(
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
    stage: int | None = None,
    m_init: float = 0.2,
    m_max: float = 0.5,
    rtol: float = 0.01,
    explore_steps: tuple[float, ...] = (0.02, 0.5, 0.02, 0.8),
    explore_len: int = 6,
    patience: int = 4,
    p_init: float = 0.1,
    f_vertex: float = 0.7,
    f_input: float = 0.1,
    shrink_sweeps: tuple[float, ...] = (0.0, 0.5),
    coordinate_step: float = 0.15,
    ledger: QueryLedger | None = None,
    oracle: ScaledOracle | None = None,
) -> SolverOutput:
    """Step each input's radius down with a score-guided random search in shrinking balls.

    Parameters
    ----------
    x : inputs ``(n, *shape)`` in original units; ``y`` their labels ``(n,)``.
    eps : largest radius of interest (caps the random search for a starting point).
    budget : model calls allowed per input (starting points included); required.
    x_init, X_pool, y_pool : starting points (see
        :func:`~robustscope.solvers.attacks.decision.starts.find_starts`).
    stage : queries spent at one radius before it is given up (default
        :func:`default_stage` of the mutable features).
    m_init, m_max : first and largest step of the radius, as a share of it.
    rtol : an input stalls when the step falls below ``rtol / 2``.
    explore_steps, explore_len : the steps (shares of the radius) of the explorations that
        follow one another without success, and their length (multiples of ``stage``).
    patience : failed explorations in a row after which an input has converged.
    p_init : share of the coordinates a proposal moves at the start of a stage (halved at
        each quarter of it).
    f_vertex, f_input : Linf: shares of moved coordinates sent to ``±r`` and back to the
        input's value (the rest: uniform in ``[-r, r]``).
    coordinate_step, shrink_sweeps : L2 / L1 only: the step of :func:`coordinate_steps`
        (scaled units; 0: none) and the factors of :func:`shrink_coordinates`' sweeps.

    Returns a :class:`~robustscope.solvers.output.SolverOutput`; ``meta["converged"]`` is an
    int8 ``(n,)`` array: 1 stopped by ``patience``, -1 stopped by the budget while its search
    was still running, 0 no counterexample (or the input itself is one).
    """
    if budget is None or budget < 1:
        raise InputError(f"budget must be a positive number of queries, got {budget}")
    threat = get_threat(threat)
    generator = generator or make_generator(0)  # draws are made on the CPU, then moved
    if oracle is None:
        oracle = ScaledOracle(model, x, y, space, threat, statement, budget, ledger)
    largest = None if eps is None else float(torch.as_tensor(eps).max())
    find_starts(oracle, generator, x_init, X_pool, y_pool, max_radius=largest)
    if threat.p != math.inf and coordinate_step:
        coordinate_steps(oracle, generator, coordinate_step)
    if threat.p != math.inf and shrink_sweeps:
        shrink_coordinates(oracle, shrink_sweeps)
    n, d = oracle.n, oracle.d
    dtype, device = oracle.flat.dtype, oracle.flat.device
    mutable = oracle.mutable
    if stage is None:
        stage = default_stage(int(mutable.sum()))
    quarter = max(1, stage // 4)

    def full(value, kind=dtype) -> torch.Tensor:
        return torch.full((n,), value, dtype=kind, device=device)

    m = full(m_init)
    r = oracle.best_r * (1 - m)
    cur = torch.zeros(n, d, dtype=dtype, device=device)
    cur_m = full(math.inf)
    fresh = full(True, torch.bool)
    exploring = full(False, torch.bool)
    spent = full(0, torch.long)
    failed_explores = full(0, torch.long)
    converged = full(False, torch.bool)
    active = oracle.holding()
    explore_m = torch.as_tensor(explore_steps, dtype=dtype, device=device)
    while True:
        idx_t = torch.nonzero(active).reshape(-1)
        if not len(idx_t):
            break
        idx = idx_t.cpu().numpy()
        broke = torch.as_tensor(oracle.remaining(idx) < 1, device=device)
        active[idx_t[broke]] = False
        idx_t, idx = idx_t[~broke], idx[~broke.cpu().numpy()]
        if not len(idx):
            break
        rr, ex, fr = r[idx_t], exploring[idx_t], fresh[idx_t]
        start = pull_into_ball(threat, oracle.best_u[idx_t], rr)
        if ex.any():
            start = torch.where(ex.unsqueeze(1),
                                random_on_sphere(threat, len(idx), rr, mutable, generator), start)
        p = p_init * 0.5 ** torch.div(spent[idx_t], quarter, rounding_mode="floor").to(dtype)
        moved = propose(threat, cur[idx_t], rr, p.clamp_min(1.0 / d), mutable, generator,
                        f_vertex, f_input)
        prop = torch.where(fr.unsqueeze(1), start, moved)
        u_valid, _ = oracle.project(idx, prop.unsqueeze(1))
        u_valid = u_valid[:, 0]
        # a proposal that projects onto the point held is not worth a query
        ask = fr | (u_valid != cur[idx_t]).any(dim=1)
        adv = torch.zeros(len(idx), dtype=torch.bool, device=device)
        marg = torch.full((len(idx),), math.inf, dtype=dtype, device=device)
        if ask.any():
            sel = torch.nonzero(ask).reshape(-1)
            a, mg, _, _ = oracle.query(idx[sel.cpu().numpy()], u_valid[sel].unsqueeze(1))
            adv[sel], marg[sel] = a[:, 0], mg[:, 0]
        inside = threat.norm(u_valid) <= rr * (1 + 1e-9)
        take = ask & inside & (fr | (marg <= cur_m[idx_t]))
        cur[idx_t] = torch.where(take.unsqueeze(1), u_valid,
                                 torch.where(fr.unsqueeze(1), start, cur[idx_t]))
        cur_m[idx_t] = torch.where(take, marg, cur_m[idx_t])
        fresh[idx_t] = False
        spent[idx_t] += 1
        success = adv & inside
        limit = torch.where(ex, stage * explore_len, stage)
        failure = ~success & (spent[idx_t] >= limit)
        mm = m[idx_t]
        mm = torch.where(success, (mm * 2).clamp(max=m_max),
                         torch.where(failure & ~ex, mm / 2, mm))
        mm = torch.where(failure & ex, torch.full_like(mm, m_init), mm)
        fails = torch.where(success, 0, failed_explores[idx_t] + (failure & ex).long())
        stalled = mm < rtol / 2
        failed_explores[idx_t] = fails
        exploring[idx_t] = torch.where(success | failure, stalled, ex)
        m[idx_t] = torch.where(stalled, explore_m[fails.clamp(max=len(explore_m) - 1)], mm)
        settled = fails >= patience
        converged[idx_t] |= settled
        active[idx_t] &= ~settled
        done = success | failure
        if done.any():
            td = idx_t[done]
            r[td] = oracle.best_r[td] * (1 - m[td])
            fresh[td], spent[td], cur_m[td] = True, 0, math.inf
    out = oracle.output()
    found = oracle.holding()
    out.meta["converged"] = torch.where(
        found, torch.where(converged, 1, -1), 0).to(torch.int8).cpu().numpy()
    return out


def solve(problem: SolverProblem, **options) -> SolverOutput:
    """:func:`step_down_search` on ``problem`` (the registry's calling convention), its model
    calls charged to ``problem.budget`` through ``problem.model``, the view the search
    built."""
    return step_down_search(problem.model, problem.x, problem.y, problem.space,
                            problem.threat, problem.eps, problem.statement,
                            problem.generator, **options)
