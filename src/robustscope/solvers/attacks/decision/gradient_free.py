"""Gradient-free cascade: boundary projection, the step-down random search (restarted from
further starts under Linf), (Linf) the line descent, the decision-based boundary search, then
(L2 / L1) the crossing search on scored plateau models and a polish.

On a smooth black box the first stage
(:mod:`~robustscope.solvers.attacks.decision.linear_steps`) linearises the margin from
finite differences of the scores and jumps to the nearest point of that linear boundary (on
trees, whose margin does not move under small differences, it stops after one estimate; on a
space with discrete features or relations it does not run).
All stages share one :class:`~robustscope.solvers.attacks.decision.scaled_oracle.ScaledOracle`,
hence one per-input budget and one record of the best verified counterexample: the step-down
search (:mod:`~robustscope.solvers.attacks.decision.step_down`) follows the model's scores to
shrink a counterexample in few queries and stops an input when its explorations keep failing
(converged); under Linf the line descent
(:mod:`~robustscope.solvers.attacks.decision.line_descent`) then looks inside smaller balls
with line searches along each feature and each relation, for the narrow pieces between a
tree's thresholds that the random corners overshoot (measured on the mixed-type credit
table's gradient-boosted model, tune seeds, default ceiling: p90 radius / exact 1.095 ->
1.009), on a share of the budget the step-down searches leave it on plateau models
(:func:`descent_share`); under L2, on a
smooth model and from a budget of :data:`PROJECT_AGAIN_FROM`, two more rounds of the boundary
projection settle the counterexample the step-down search ended with (:data:`PROJECT_AGAIN`);
HopSkipJump
(:mod:`~robustscope.solvers.attacks.decision.hop_skip_jump`) then spends what is left of
each input's budget from that counterexample (on a label-only model the better of the two).
Under L2 / L1, on a model whose scores move without the decision
(:attr:`~robustscope.solvers.attacks.decision.scaled_oracle.ScaledOracle.scored`) and whose
margin the boundary projection found flat (a tree's plateaus), 40% of the budget goes to the
crossing search (:mod:`~robustscope.solvers.attacks.decision.crossings`), after HopSkipJump:
it profiles each feature's thresholds and builds counterexamples that cross many of them by
a little, where a tree ensemble's nearest one under L2 lies (measured on the tune tree
ensembles at the default ceiling, 20 inputs each: p90 radius / exact 1.14-1.33 -> 1.06-1.14).
Under L2 / L1 a share of the budget is kept for the last stage,
:func:`~robustscope.solvers.attacks.decision.coordinates.polish`: the random moves of the
searches before it leave small moves on many features, which it sends back to the input's
values before bisecting each remaining move (measured on the tune tree ensembles at the
default ceiling: median radius / exact 1.16 -> 1.05). What the polish leaves of its share
goes back to the crossing search (:data:`SPEND_LEFTOVER`).

An input counts as converged only where the step-down search stopped on evidence and the
stages after it lowered the radius by less than ``rtol`` over the last
:data:`LAST_STRETCH` of the budget (the oracle notes the radius when an input's queries reach
that mark): under L2 on a tree ensemble the crossing search, after the step-down search, still
lowered the median radius by 10-26% (tune trees, default ceiling).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from robustscope.core.checks import make_generator
from robustscope.core.space import FeatureSpace
from robustscope.core.statement import DECISION_CHANGE, Statement
from robustscope.models.base import Classifier, QueryLedger
from robustscope.solvers.attacks.decision.coordinates import polish, polish_reserve
from robustscope.solvers.attacks.decision.crossings import (
    construct_more,
    crossing_search,
    search_plan,
)
from robustscope.solvers.attacks.decision.hop_skip_jump import hop_skip_jump
from robustscope.solvers.attacks.decision.line_descent import (
    MIN_LEFT,
    grid_pass_cost,
    line_descent,
    sweep_cost,
)
from robustscope.solvers.attacks.decision.linear_steps import boundary_steps, round_cost
from robustscope.solvers.attacks.decision.scaled_oracle import ScaledOracle
from robustscope.solvers.attacks.decision.starts import find_starts
from robustscope.solvers.attacks.decision.step_down import step_down_search
from robustscope.solvers.output import SolverOutput
from robustscope.solvers.problem import SolverProblem
from robustscope.threats import LpThreat, get_threat

#: Step-down searches from further starts under Linf, while an input has ``restart_min``
#: queries left (:func:`restart_from_other_start`, from :func:`further_starts`).
RESTARTS = 3
#: Under Linf on a model whose margin the boundary projection found flat (a tree ensemble,
#: a label-only model) and from a budget of :data:`DESCENT_FROM` per input, the restarts stop
#: short of what the line descent needs for :data:`DESCENT_SWEEPS` sweeps over its lines, at
#: most :data:`DESCENT_MOST` of the budget (:func:`descent_share`). Chosen on the tune models
#: of ``benchmarks/blackbox_budget.py`` and a random forest on 30 features added to them: on
#: that forest the three restarts spent the whole budget and the descent never ran (p90
#: 1.127 -> 1.053 at the default ceiling, 2 seeds); on the 30-feature boosted models the p90
#: rose by 0.003-0.004 (to 1.005-1.008); at 1,000 queries the 10-feature models lost. Held
#: out, forests and deep XGBoost gained and LightGBM lost (``docs/budget.md``).
DESCENT_SWEEPS = 10
DESCENT_MOST = 0.75
DESCENT_FROM = 3000
#: Below :data:`DESCENT_FROM` (no restarts run there) and from :data:`DESCENT_LOW_FROM`
#: queries, on the same models, the first step-down search leaves the line descent
#: :data:`DESCENT_LOW` of the budget where that pays for one grid pass over its lines, and
#: the descent starts an attempt with :data:`DESCENT_LOW_MIN_LEFT` queries left
#: (``line_descent.MIN_LEFT`` elsewhere).
#: Chosen with the descent's small levels (``line_descent.SHRINKS``) on the tune models,
#: Linf, seeds 0-1, 1,000 queries: p90 XGBoost 1.010-1.015 -> 1.005, LightGBM 1.045-1.047 ->
#: 1.007-1.010, XGBoost of depth 10 1.178-1.213 -> 1.092-1.097, the forests 1.085-1.108 ->
#: 1.060-1.062 (10 features) and 1.163-1.183 -> 1.108-1.110 (30); at 500 on 10 features
#: (on 30 a share of 250 pays for no grid pass) XGBoost of depth 10 1.256-1.287 ->
#: 1.104-1.136. At 250 queries (a share of 0.4) both 10-feature trees lost (p90 1.13-1.29 ->
#: 1.18-1.39), hence the floor, between 250 and 500 (``radius()`` keeps one query of a
#: budget for its own check, so 500 arrives here as 499). Shares of 0.3, 0.4 and 0.6:
#: ``docs/budget.md``.
DESCENT_LOW = 0.5
DESCENT_LOW_FROM = 400
DESCENT_LOW_MIN_LEFT = 100
#: Under L2 / L1, the queries the polish leaves go to more constructions of the crossing
#: search, from its profile (the polish's share is kept whole but rarely all spent). Tune
#: trees at 1,000 queries, 3 seeds: median 1.06-1.11 -> 1.05-1.10; the held-out models of
#: ``benchmarks/blackbox_budget.py``, with ``hop_skip_jump.SCORE_RANKS``: ``docs/budget.md``.
SPEND_LEFTOVER = True
#: Under L2, on a model none of whose inputs' margin the boundary projection found flat (a
#: smooth model) and from a budget of :data:`PROJECT_AGAIN_FROM` per input, the step-down
#: search stops short of :data:`PROJECT_AGAIN` more rounds of the projection, run from the
#: counterexample it ends with (:func:`project_again_share`). The step-down search's
#: explorations are what take an input off a local optimum of a curved boundary, where the
#: first projection stops, but a random search ends near its new basin's optimum, not on it;
#: the projection settles it there. Chosen on the tune MLPs of
#: ``benchmarks/blackbox_budget.py`` (40 inputs, seeds 0-3, p90 radius / reference, mean of
#: the seeds): at 500 queries 1.090 -> 1.071 (3 classes), 1.097 -> 1.052 (4 classes), 1.064
#: -> 1.071 (10 features: two seeds better, two worse), 1.039 -> 1.039 (30 features); at
#: 1,000 1.055 -> 1.046, 1.047 -> 1.039, 1.039 -> 1.021, 1.038 -> 1.036; medians 0.1-0.5%
#: lower. At 250 queries the queries kept cost more than the rounds gave (the 4-class MLP's
#: p90 1.32 -> 1.42), hence the floor; under Linf the tails lost at 250 and were within the
#: seeds' spread at 500 (``docs/budget.md``, "The projection again").
PROJECT_AGAIN = 2
PROJECT_AGAIN_FROM = 400
#: The last stretch of an input's budget, as a share of it: an input whose radius fell by
#: more than ``rtol`` over it was still moving at the ceiling, whatever the step-down search
#: (an early stage) concluded (:func:`still_moving`).
LAST_STRETCH = 0.2


def gradient_free(
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
    ledger: QueryLedger | None = None,
    step_opts: dict | None = None,
    boundary_opts: dict | None = None,
    linear_steps: bool = True,
    restarts: int | None = None,
    restart_min: int = 300,
    polish_share: float | None = None,
    descent: bool | None = None,
    crossings: bool | None = None,
    rtol: float = 0.01,
) -> SolverOutput:
    """Boundary projection (``linear_steps``), the step-down search, (Linf, ``descent``) the
    line descent, HopSkipJump with the rest of the per-input ``budget``, then (L2 / L1) the
    crossing search (``crossings``) and the polish.

    Under Linf, inputs with at least ``restart_min`` queries left after the step-down search
    get up to ``restarts`` more step-down searches (default :data:`RESTARTS`; none under L2 /
    L1), each from the next nearest pool input of another class: a tree ensemble's nearest
    counterexample can lie in a region the first start's steps never reach.

    ``polish_share`` of the budget (default 0.2 under L2 / L1, at most 300 queries; 0 under
    Linf, whose norm the small moves do not change) is kept for
    :func:`~robustscope.solvers.attacks.decision.coordinates.polish`.

    ``crossings`` (default: on a model whose scores were seen to move and the margin of one of
    whose inputs the boundary projection found flat; never under Linf) keeps
    :func:`~robustscope.solvers.attacks.decision.crossings.search_plan` of the budget for
    :func:`~robustscope.solvers.attacks.decision.crossings.crossing_search`, run after
    HopSkipJump and before the polish; with :data:`SPEND_LEFTOVER`, what the polish leaves
    goes to :func:`~robustscope.solvers.attacks.decision.crossings.construct_more`.

    Under L2, on a model none of whose inputs' margin the first boundary projection found
    flat and from a budget of :data:`PROJECT_AGAIN_FROM`, the step-down search stops short of
    :func:`project_again_share` of the budget, and :data:`PROJECT_AGAIN` more rounds of the
    projection run after it (and after the line descent, which does not run under L2).

    ``descent`` (default: under Linf only) runs
    :func:`~robustscope.solvers.attacks.decision.line_descent.line_descent` after the
    restarts, for the inputs with at least ``line_descent.MIN_LEFT`` queries left
    (:data:`DESCENT_LOW_MIN_LEFT` where the first search left it its share, below a budget
    of :data:`DESCENT_FROM`) and one grid pass over its lines (never on images); the
    step-down searches leave it :func:`descent_share` of the budget.

    ``x`` ``(n, *shape)`` original units, ``y`` ``(n,)`` labels; ``step_opts`` and
    ``boundary_opts`` are passed to
    :func:`~robustscope.solvers.attacks.decision.step_down.step_down_search` and
    :func:`~robustscope.solvers.attacks.decision.hop_skip_jump.hop_skip_jump`. Returns a
    :class:`~robustscope.solvers.output.SolverOutput` (its candidates were each confirmed by a
    query; the search verifies them again) whose ``meta["converged"]`` is 1 where the
    step-down search converged and the radius then fell by less than ``rtol`` over the last
    :data:`LAST_STRETCH` of the budget, -1 where either failed (the budget ran out first, or
    a later stage was still lowering the radius at the end: :func:`still_moving`), 0 where
    no counterexample was found. ``rtol`` is also the step-down search's (unless
    ``step_opts`` sets its own).
    """
    threat = get_threat(threat)
    generator = generator or make_generator(0)  # draws are made on the CPU, then moved
    oracle = ScaledOracle(model, x, y, space, threat, statement, budget, ledger)
    oracle.mark = math.ceil((1 - LAST_STRETCH) * budget)
    step_opts = {"rtol": rtol, **(step_opts or {})}
    if polish_share is None:
        polish_share = 0.0 if threat.p == math.inf else 0.2
    reserve = min(polish_reserve(budget, polish_share), budget - 1)
    oracle.budget = budget - reserve  # the stages before the polish see the rest
    common = dict(x_init=x_init, X_pool=X_pool, y_pool=y_pool, oracle=oracle)
    # the linearised step assumes a continuous neighbourhood: with discrete features or
    # relations its projection is not the linear optimum (measured: worse tails on the
    # mixed-type credit table, benchmarks/mixed_types.py), so it is left out there
    projected = linear_steps and not space.has_discrete and not space.has_relations
    if projected:
        largest = None if eps is None else float(torch.as_tensor(eps).max())
        find_starts(oracle, generator, x_init, X_pool, y_pool, max_radius=largest)
        boundary_steps(oracle)
    if crossings is None:  # a smooth margin is the boundary steps' and HopSkipJump's
        crossings = bool(oracle.plateau.any() and oracle.scored.any())
    crossings = crossings and threat.p != math.inf  # under Linf a move's cost is its size
    scan, levels = search_plan(oracle, budget) if crossings else (0, ())
    stages = budget - reserve - scan
    if descent is None:  # its line searches move one coordinate inside a box: a Linf ball
        descent = threat.p == math.inf
    share = descent_share(oracle, budget) if descent else 0
    again = project_again_share(oracle, budget) if projected else 0
    searches = stages - again  # the searches and the descent stop short of the projection
    # below DESCENT_FROM the share is kept from the first search too (no restarts run there)
    oracle.budget = searches - (share if budget < DESCENT_FROM else 0)
    stepped = step_down_search(model, x, y, space, threat, eps, statement, generator,
                               budget=budget, **common, **step_opts)
    if restarts is None:  # chosen on the tune models: under L2 / L1 HopSkipJump does better
        restarts = RESTARTS if threat.p == math.inf else 0
    further = further_starts(oracle, x, X_pool, y_pool, restarts) if restarts else []
    oracle.budget = searches - share
    for k in range(restarts):
        start = further[k] if k < len(further) else None
        if not restart_from_other_start(oracle, model, x, y, space, threat, eps, statement,
                                        generator, budget, ledger, start, restart_min,
                                        step_opts):
            break
    oracle.budget = searches
    if descent:  # the smaller floor only where the first search left the descent its share
        low = share > 0 and budget < DESCENT_FROM
        line_descent(oracle, generator, min_left=DESCENT_LOW_MIN_LEFT if low else MIN_LEFT)
    oracle.budget = stages
    if again:
        boundary_steps(oracle, rounds=PROJECT_AGAIN)
    hop_skip_jump(model, x, y, space, threat, eps, statement, generator, **common,
                  **(boundary_opts or {}))
    profile = None
    if scan > 0:
        oracle.budget = budget - reserve
        profile = crossing_search(oracle, generator, levels)
    if reserve > 0:
        oracle.budget = budget
        polish(oracle)
    if profile is not None and SPEND_LEFTOVER:
        construct_more(oracle, profile, generator)
    out = oracle.output()
    verdict = np.where(still_moving(oracle, rtol), -1, stepped.meta["converged"])
    found = oracle.holding().cpu().numpy()
    out.meta["converged"] = np.where(found, verdict, 0).astype(np.int8)
    return out


def still_moving(oracle: ScaledOracle, rtol: float) -> np.ndarray:
    """Inputs ``(n,)`` bool whose best radius fell by more than ``rtol`` of itself since their
    queries reached ``oracle.mark``: the last stretch of the search still paid, so the
    radius had not settled when the budget ended. An input that held no counterexample at
    the mark, or never reached it, is not counted here."""
    before = oracle.radius_at_mark  # NaN (not reached) and inf (none held) are not finite
    fell = before - oracle.best_r > rtol * before
    return (torch.isfinite(before) & fell).cpu().numpy()


def project_again_share(oracle: ScaledOracle, budget: int) -> int:
    """Queries per input the step-down search leaves to :data:`PROJECT_AGAIN` more rounds of
    the boundary projection, each of
    :func:`~robustscope.solvers.attacks.decision.linear_steps.round_cost`: under L2, from a
    ``budget`` of :data:`PROJECT_AGAIN_FROM`, on a model none of whose inputs' margin the
    first projection found flat (a tree ensemble's plateaus, a label-only model: one
    estimate each, which says nothing). 0 otherwise."""
    if oracle.threat.p != 2.0 or budget < PROJECT_AGAIN_FROM or oracle.plateau.any():
        return 0
    return PROJECT_AGAIN * round_cost(oracle)


def descent_share(oracle: ScaledOracle, budget: int) -> int:
    """Queries per input the step-down searches leave to the line descent, on a model whose
    margin the boundary projection found flat for some input (a tree ensemble's plateaus;
    every label-only model): from a ``budget`` of :data:`DESCENT_FROM`, ``min(DESCENT_MOST ·
    budget, DESCENT_SWEEPS · sweep_cost)`` (the restarts stop short of it); from
    :data:`DESCENT_LOW_FROM`, :data:`DESCENT_LOW` of the budget where that pays for one grid
    pass over the descent's lines (the first search stops short of it). 0 otherwise: a smooth
    model, whose step-down searches pay more than the descent; a typed table, where the
    projection does not run; a budget too small."""
    if budget < DESCENT_LOW_FROM or not oracle.plateau.any():
        return 0
    if budget >= DESCENT_FROM:
        return int(min(DESCENT_MOST * budget, DESCENT_SWEEPS * sweep_cost(oracle)))
    share = int(DESCENT_LOW * budget)
    return share if share >= grid_pass_cost(oracle) else 0


def further_starts(oracle: ScaledOracle, x: torch.Tensor, X_pool: torch.Tensor | None,
                   y_pool: torch.Tensor | None, count: int) -> list[torch.Tensor]:
    """The 2nd, 3rd, ... nearest pool inputs of another class per input, up to ``count``
    of them, each ``(n, *shape)`` in original units; none without a pool."""
    if X_pool is None or not len(X_pool):
        return []
    pool = torch.as_tensor(X_pool, dtype=oracle.flat.dtype, device=oracle.flat.device)
    labels = None if y_pool is None else torch.as_tensor(y_pool, device=pool.device)
    offsets = oracle.nearest_in_pool(pool, labels, count + 1)
    return [(oracle.flat + offsets[:, k] * oracle.scale).reshape(x.shape)
            for k in range(1, offsets.shape[1])]


def restart_from_other_start(oracle: ScaledOracle, model: Classifier, x: torch.Tensor,
                             y: torch.Tensor, space: FeatureSpace, threat: LpThreat,
                             eps: torch.Tensor | float | None, statement: Statement,
                             generator: torch.Generator, budget: int,
                             ledger: QueryLedger | None, x_init: torch.Tensor | None,
                             restart_min: int, step_opts: dict | None) -> bool:
    """Another step-down search from ``x_init`` (a further start from
    :func:`further_starts`; without one, a random start) for the inputs with at least
    ``restart_min`` queries left; its smaller counterexamples replace the ones held. Returns
    whether any input ran."""
    left = oracle.remaining(np.arange(oracle.n))
    go = (left >= restart_min) & (oracle.best_r > 0).cpu().numpy()
    if not go.any():
        return False
    fresh = ScaledOracle(model, x, y, space, threat, statement, oracle.budget, ledger)
    fresh.used = oracle.used.copy()
    fresh.used[~go] = oracle.budget  # the others are not searched again
    fresh.mark = oracle.mark
    step_down_search(model, x, y, space, threat, eps, statement, generator, budget=budget,
                     x_init=x_init, oracle=fresh, **(step_opts or {}))
    # where the mark fell inside this search, the radius held then: the better of the one
    # held before it and the one it had reached
    reached = ~torch.isnan(fresh.radius_at_mark) & torch.isnan(oracle.radius_at_mark)
    oracle.radius_at_mark = torch.where(
        reached, torch.minimum(oracle.best_r, fresh.radius_at_mark), oracle.radius_at_mark)
    better = fresh.best_r < oracle.best_r
    oracle.best_r = torch.where(better, fresh.best_r, oracle.best_r)
    oracle.best_u = torch.where(better.unsqueeze(1), fresh.best_u, oracle.best_u)
    oracle.used[go] = fresh.used[go]
    return True


def solve(problem: SolverProblem, **options) -> SolverOutput:
    """:func:`gradient_free` on ``problem`` (the registry's calling convention), its model calls
    charged to ``problem.budget`` through ``problem.model``, the view the search built."""
    return gradient_free(problem.model, problem.x, problem.y, problem.space,
                         problem.threat, problem.eps, problem.statement,
                         problem.generator, **options)
