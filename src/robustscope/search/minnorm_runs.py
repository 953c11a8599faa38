"""The minimum-norm runs of the cascade: aiming, ranking of the targets, untargeted,
long-step, refining and targeted runs (the registry's ``minnorm``), and the runs the passes
left over after the plan's parts pay for.

Each run is verified through the batch's one verification, once per run (an input appears
once per call).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from robustscope.search.metering import charged
from robustscope.search.plan import AttackPlan
from robustscope.search.refine import ceiling_left, line_search
from robustscope.search.state import BatchState, registered
from robustscope.solvers.attacks.gradient.targets import (
    first_order_distances,
    rank_by_distance,
    runner_ups,
)

#: The registry's minimum-norm solver, looked up at each call.
MINNORM = registered("minnorm")
#: Most rounds of :func:`spend_leftover` (further runs with the passes the plan left).
LEFTOVER_ROUNDS = 3


def rank_targets(state: BatchState, sub: torch.Tensor, plan: AttackPlan,
                  grad_cost: int) -> torch.Tensor | None:
    """``(len(state.x), plan.ranked)`` classes per input, nearest boundary first by the
    first-order estimate at the clean input (:func:`~robustscope.solvers.attacks.gradient.targets.
    rank_by_distance`), for the open inputs of ``sub`` that can pay for it and their targeted
    runs; ``None`` when the plan ranks nothing. Rows of other inputs are left at -1. The
    distances the aiming computed (:func:`aim_untargeted`, the first ``plan.aimed``
    candidates) are not computed, nor charged, again."""
    if not plan.ranked:
        return None
    model, ledger = state.model, state.ledger
    ranking = torch.full((len(state.x), plan.ranked), -1, dtype=torch.long,
                         device=state.x.device)
    runs_cost = plan.targets * (plan.target_steps * grad_cost + 1)
    sub = sub[state.still_open(sub)]
    sub = state.affordable(sub, plan.ranked * grad_cost + runs_cost)
    if len(sub) == 0:
        return ranking
    # where the aiming already has the distances of the first candidates, only the rest
    j = state.aim_classes.shape[1]
    candidates = runner_ups(state.clean_logits[sub], state.y[sub], plan.ranked)
    reuse = torch.zeros(len(sub), dtype=torch.bool, device=sub.device)
    if 0 < j <= plan.ranked:
        reuse = (candidates[:, :j] == state.aim_classes[sub]).all(dim=1)
    for group, known in ((sub[reuse], True), (sub[~reuse], False)):
        if len(group) == 0:
            continue
        paid = plan.ranked - (j if known else 0)
        view = charged(model, ledger, np.repeat(state.owners[group.cpu().numpy()], paid))
        ranking[group] = rank_by_distance(
            view, state.x[group], state.y[group], state.clean_logits[group], state.space,
            state.threat, state.statement, plan.ranked,
            known=state.aim_distance[group] if known else None)
    return ranking


def aim_untargeted(state: BatchState, sub: torch.Tensor, plan: AttackPlan,
                    grad_cost: int) -> torch.Tensor | None:
    """``(len(state.x),)`` the class each input's untargeted run is aimed at, -1 where it stays
    untargeted; ``None`` when no input of ``sub`` is open and can pay for the ranking and the
    run. An input is aimed at the nearest of its ``plan.aimed`` runner-ups by the first-order
    distance at the clean input
    (:func:`~robustscope.solvers.attacks.gradient.targets.first_order_distances`)
    where that estimate is below ``config.aim_ratio`` times the logit runner-up's: an
    untargeted run follows the steepest class, and with no targeted run to correct it (small
    budgets) a wrong class is the whole excess. Measured in ``docs/budget.md``."""
    model, ledger = state.model, state.ledger
    sub = sub[state.still_open(sub)]
    sub = state.affordable(sub, plan.aimed * grad_cost + plan.minnorm_steps * grad_cost + 1)
    if len(sub) == 0:
        return None
    view = charged(model, ledger, np.repeat(state.owners[sub.cpu().numpy()], plan.aimed))
    classes, distance = first_order_distances(
        view, state.x[sub], state.y[sub], state.clean_logits[sub], state.space,
        state.threat, state.statement, plan.aimed)
    state.keep_aim(sub, classes, distance)
    nearest = distance.argmin(dim=1, keepdim=True)
    clear = distance.gather(1, nearest)[:, 0] < state.config.aim_ratio * distance[:, 0]
    aim = torch.full((len(state.x),), -1, dtype=torch.long, device=state.x.device)
    aim[sub] = torch.where(clear, classes.gather(1, nearest)[:, 0], -1)
    return aim


def minnorm_runs(state: BatchState, sub: torch.Tensor, steps: int, targets: int,
                  grad_cost: int, ranking: torch.Tensor | None = None,
                  refine: bool = False, aim: torch.Tensor | None = None,
                  step_start: float | None = None) -> None:
    """Minimum-norm runs of ``steps`` gradient calls per input of ``sub``: one untargeted
    (``targets=0``), else one per class aimed at — the first of ``ranking`` (nearest boundary
    first, see :func:`rank_targets`), else the runner-ups by clean logit — skipping the
    class the best counterexample already reached, all in one batch; with ``refine`` (and
    ``targets=1``) the run refines the class reached instead, from its best counterexample
    (:func:`refine_best_class`). ``aim`` ``(len(state.x),)`` aims the untargeted run of each
    input at a class (-1: untargeted; see :func:`aim_untargeted`). ``step_start`` (Linf /
    L2; ``None``: the solver's) is the run's first step relative to its strength. Inputs
    whose bracket is closed (certified, or within ``rtol``), or whose budget cannot pay
    every run, are skipped."""
    runs = max(1, targets)
    sub = sub[state.still_open(sub)]
    sub = state.affordable(sub, runs * (steps * grad_cost + 1))
    if len(sub) == 0:
        return
    towards = init = None
    if targets:
        order = targets_beyond_best(state, sub, targets, ranking)
        if refine:
            order, init = refine_best_class(state, sub, order)
        sub = sub.repeat(targets)
        towards = order.T.reshape(-1)  # target k of every input, then target k + 1, ...
    elif aim is not None:
        towards = aim[sub]
    scale = {} if step_start is None else {"step_start": step_start}
    out = MINNORM(state.problem(sub), steps=steps, towards=towards, init=init, **scale)
    m = len(sub) // runs
    for k in range(runs):  # one verification per run: an input appears once per call
        rows = slice(k * m, (k + 1) * m)
        state.check(sub[rows], out.x_adv[rows])


def refine_best_class(state: BatchState, sub: torch.Tensor,
                       order: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The plan's refining L1 run (``plan.refine_steps``): aimed at the class of each input's
    best counterexample, warm-started from that counterexample (inputs without one keep their
    target ``order`` ``(len(sub), 1)`` and start at the input). Returns the classes and the
    starts ``(len(sub), *shape)``.

    A targeted L1 run takes dense steps (see
    :func:`~robustscope.solvers.attacks.gradient.minnorm_l1.minnorm_l1`), a second step scale
    beside the untargeted run's; where the untargeted run
    stalls far above the radius (a counterexample spread over many coordinates), that scale
    brings it down in the same class (measured in ``docs/budget.md``). Used in place of the
    single targeted run of a plan of about 100 passes, it lowered the tiny CNN's p90 (2.26 ->
    1.56) but raised the digits MLP's (1.02 -> 1.27), whose untargeted runs reach the wrong
    one of 10 classes more often: there the other class is worth more."""
    has = torch.isfinite(state.best_r[sub])
    reached = state.best_logits[sub].argmax(dim=1, keepdim=True)
    order = torch.where(has[:, None], reached, order)
    shape = (-1,) + (1,) * (state.x.dim() - 1)
    init = torch.where(has.reshape(shape), state.best_x[sub], state.x[sub])
    return order, init


def targets_beyond_best(state: BatchState, sub: torch.Tensor, count: int,
                         ranking: torch.Tensor | None = None) -> torch.Tensor:
    """``(len(sub), count)`` classes to aim at, without the label and without the class of
    each input's best counterexample (already searched): in the order of ``ranking`` where an
    input has one (classes it does not rank come after, by clean logit), else by clean
    logit."""
    logits = state.clean_logits[sub]
    k = logits.shape[1]
    classes = torch.arange(k, device=logits.device)
    # priority (smaller first): the position in the ranking, else k + the logit order
    by_logit = logits.argsort(dim=1, descending=True).argsort(dim=1).to(torch.float64)
    priority = k + by_logit
    if ranking is not None:
        ranks = ranking[sub]
        position = torch.arange(ranks.shape[1], device=logits.device, dtype=torch.float64)
        placed = torch.full_like(priority, math.inf).scatter(
            1, ranks.clamp_min(0), torch.where(ranks >= 0, position, math.inf))
        priority = torch.minimum(priority, placed)
    reached = state.best_logits[sub].argmax(dim=1)
    has = torch.isfinite(state.best_r[sub])
    excluded = (classes == state.y[sub][:, None]) | (has[:, None] & (classes == reached[:, None]))
    priority = priority.masked_fill(excluded, math.inf)
    return priority.argsort(dim=1)[:, :count]


def spend_leftover(state: BatchState, sub: torch.Tensor, grad_cost: int,
                    plan: AttackPlan) -> None:
    """Passes an input still has under its ceiling once the plan's parts are done (the
    bisection stops when its bracket is within ``rtol`` of a failed probe, or after
    ``config.max_probes``) go to up to :data:`LEFTOVER_ROUNDS` further minimum-norm runs,
    each with a line search, for the inputs of ``sub`` still open: under an explicit budget
    against their certified lower bound alone (a failed probe proves nothing: the nearer
    counterexample may lie in another class's basin), without one as elsewhere. Round
    ``r`` aims at the class of priority ``plan.targets + r`` beyond the best counterexample's
    (:func:`targets_beyond_best`: the classes the targeted runs did not aim at), or, where
    the network has no such class, at the reached class again from its best counterexample.
    A round's run gets the steps that the smallest leftover among its inputs pays for (at
    least ``config.min_run_steps``); inputs with less stop. Certified brackets are never
    charged."""
    config = state.config
    line = plan.line_steps
    k = state.model.n_classes
    probes = state.ledger.budget is None
    for r in range(LEFTOVER_ROUNDS):
        sub = sub[state.still_open(sub, probes=probes)]
        if len(sub) == 0:
            return
        steps = (ceiling_left(state, sub, plan) - 1 - line) // grad_cost
        sub, steps = sub[steps >= config.min_run_steps], steps[steps >= config.min_run_steps]
        if len(sub) == 0:
            return
        steps = int(steps.min())
        rank = plan.targets + r
        init = None
        if rank < k - 2:  # a class beyond the best one's and the targeted runs'
            towards = targets_beyond_best(state, sub, rank + 1)[:, rank]
        else:  # no other class left: the reached class again, from its counterexample
            towards, init = refine_best_class(
                state, sub, targets_beyond_best(state, sub, 1))
            towards = towards[:, 0]
        out = MINNORM(state.problem(sub), steps=steps, towards=towards, init=init)
        state.check(sub, out.x_adv)
        if line:
            line_search(state, sub, line)
