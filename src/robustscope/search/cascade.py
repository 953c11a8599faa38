"""The attack cascade on a batch's open inputs, in the order the plan gives its parts.

Black boxes under ``solver="auto"`` get the gradient-free cascade (the registry's
``gradient-free``: cube search, then HopSkipJump); models with gradients the parts planned
by :func:`~robustscope.search.plan.plan_attack` from the per-input budget: starts from other
inputs, aiming, minimum-norm runs (:mod:`.minnorm_runs`), projection, line search, PGD
bisection (:mod:`.refine`), the leftover runs. Each part's passes are counted under its name
(``meta["passes_by_part"]``).
"""

from __future__ import annotations

import math

import torch

from robustscope.search.lattice import lattice_search
from robustscope.search.minnorm_runs import (
    aim_untargeted,
    minnorm_runs,
    rank_targets,
    spend_leftover,
)
from robustscope.search.plan import plan_attack
from robustscope.search.refine import (
    bisect_with_pgd,
    line_search,
    project,
    project_round,
    project_what_is_left,
    with_counterexample,
)
from robustscope.search.state import BatchState, registered

#: The registry's black-box cascade, looked up at each call.
GRADIENT_FREE = registered("gradient-free")
#: Queries per input that ``solver="auto"`` gives a black-box model when no budget is set
#: (with ``budget=``, the gradient-free cascade gets that budget, less what earlier stages
#: spent and one query for the verification).
BLACKBOX_BUDGET = 5000
#: Gradient calls of each minimum-norm run of the lattice search (:mod:`.lattice`).
LATTICE_STEPS = 100
#: Under a budget, on a space with discrete features: the share of it the plan leaves to the
#: lattice stage, whose runs get ``share / LATTICE_RUNS`` of the budget each (at most
#: ``LATTICE_STEPS`` gradient calls).
LATTICE_SHARE = 0.5
LATTICE_RUNS = 4


def run_attacks(state: BatchState, solver: str, active: torch.Tensor) -> None:
    """The attack cascade on the inputs ``active``: gradient-free for black boxes under
    ``auto``, else the parts planned by :func:`~robustscope.search.plan.plan_attack` from the
    per-input budget (minimum-norm runs, line search, PGD bisection)."""
    model = state.model
    grad_cost = model.gradient_cost(state.space.n_features)
    sub = torch.nonzero(active).reshape(-1)
    if solver == "auto" and not model.differentiable:
        with state.stage("gradient-free"):
            _run_gradient_free(state, sub)
        return
    # planned from the whole budget, which keeps plan.ALONE_PASSES aside itself; under
    # solver="auto" with convergence rounds, a budget above the default plan's passes is the
    # rounds' ceiling: the cascade is the default's and the rounds spend the rest
    config = state.config
    discrete = state.space.has_discrete and solver in ("auto", "minnorm")
    planned, lattice_steps = state.budget, LATTICE_STEPS
    if (solver == "auto" and config.converge_ceiling is not None and planned is not None
            and planned > config.default_gradients * grad_cost):
        planned = None
    if discrete and planned is not None:  # a share of a budget for the lattice stage
        aside = int(planned * LATTICE_SHARE)
        planned = planned - aside
        lattice_steps = max(1, min(LATTICE_STEPS, aside // (LATTICE_RUNS * grad_cost)))
    plan = plan_attack(planned, grad_cost, model.n_classes, config, solver,
                       l1=state.threat.p == 1, aim=state.statement.target is None)
    state.use_plan(plan)
    with state.stage("starts"):
        _start_from_other_inputs(state, sub)
    aim = None
    if plan.aimed:
        with state.stage("aiming"):
            aim = aim_untargeted(state, sub, plan, grad_cost)
    if plan.minnorm_steps:
        with state.stage("minnorm"):
            minnorm_runs(state, sub, plan.minnorm_steps, 0, grad_cost, aim=aim)
    if plan.wide_steps:  # Linf / L2: a second step scale, from the input, aimed alike
        with state.stage("minnorm, long steps"):
            minnorm_runs(state, sub, plan.wide_steps, 0, grad_cost, aim=aim,
                          step_start=state.config.wide_step)
    if plan.refine_steps:  # L1: a dense run in the class reached, from its counterexample
        with state.stage("refine"):
            minnorm_runs(state, sub, plan.refine_steps, 1, grad_cost, refine=True)
    if plan.targets:
        with state.stage("targeted minnorm"):
            ranking = rank_targets(state, sub, plan, grad_cost)
            minnorm_runs(state, sub, plan.target_steps, plan.targets, grad_cost, ranking)
    own = sub[:0]
    if plan.project:  # the counterexample's own class first: on the boundary, no line search
        with state.stage("projection"):
            own = project_round(state, with_counterexample(state, sub), plan, grad_cost, [0],
                                 keep=plan.line_steps)
    if plan.line_steps:
        with state.stage("line search"):
            line_search(state, sub[~torch.isin(sub, own)], plan.line_steps)
    if plan.project:
        with state.stage("projection"):
            project(state, sub, plan, grad_cost, own)
    if plan.probe_steps:
        with state.stage("bisection"):
            bisect_with_pgd(state, sub, grad_cost, plan)
    if discrete:
        # the gradient runs move integers and one-hot arms by fractions that the projection
        # rounds away: real features by gradients, discrete ones on their lattice (before
        # the leftover runs, which a budget may leave nothing after)
        with state.stage("lattice"):
            lattice_search(state, sub, lattice_steps, grad_cost)
    if solver == "auto":
        with state.stage("leftover"):
            spend_leftover(state, sub, grad_cost, plan)
    if plan.project_left:
        with state.stage("projection"):
            project_what_is_left(state, sub, plan, grad_cost)
    if discrete and solver == "auto":  # proposals made on the valid inputs themselves
        with state.stage("gradient-free"):
            _run_gradient_free(state, sub)


def _run_gradient_free(state: BatchState, sub: torch.Tensor) -> None:
    """Black boxes: the step-down search then HopSkipJump on one per-input budget, seeded by
    the batch's inputs of other predicted classes; the cascade's verdict on convergence
    (the step-down search's, and the radius's fall over the last stretch of the budget) is
    kept in ``state.converged`` / ``state.still_falling``."""
    left = state.ledger.remaining(state.owners[sub.cpu().numpy()]).min()
    # the user's budget is the ceiling where there is one (it was capped at the default,
    # so raising it above 5,000 bought nothing); one query is kept for the verification
    ceiling = BLACKBOX_BUDGET if state.ledger.budget is None else state.ledger.budget
    budget = int(min(ceiling, left - 1))
    if budget < 2:
        return
    pool_y = state.clean_logits.argmax(dim=1)
    # the user's rtol is the step below which the step-down search counts an input as
    # stalled, and the fall over the budget's last stretch that counts as still falling:
    # the evidence behind the converged column
    run = GRADIENT_FREE(state.problem(sub, state.max_radius), budget=budget, X_pool=state.x,
                        y_pool=pool_y, rtol=state.rtol)
    found = torch.as_tensor(run.found, device=sub.device)
    if found.any():
        state.check(sub[found], run.x_adv.to(state.x.device)[found])
    verdict = torch.as_tensor(run.meta["converged"], device=sub.device)
    state.converged[sub] |= verdict == 1
    state.still_falling[sub] = verdict == -1


def _start_from_other_inputs(state: BatchState, sub: torch.Tensor) -> None:
    """Seed each input with the nearest other input of the batch that the model assigns to
    another class: a valid counterexample (once verified) for any model, gradients or not."""
    model, space, threat = state.model, state.space, state.threat
    if not space.has_discrete and model.differentiable:
        return  # gradient solvers find better seeds themselves; skip the extra query
    sub = state.affordable(sub, 1)
    pred = state.clean_logits.argmax(dim=1)
    if len(sub) == 0 or len(torch.unique(pred)) < 2:
        return
    xs = state.x.reshape(len(state.x), -1)
    scale = torch.as_tensor(space.scale, dtype=xs.dtype, device=xs.device)
    dist = torch.stack([threat.norm((xs - xs[i]) / scale) for i in sub.tolist()])  # (m, n)
    dist = torch.where(pred[None, :] == state.y[sub][:, None], math.inf, dist)
    nearest = dist.argmin(dim=1)
    has = torch.isfinite(dist.gather(1, nearest[:, None]).reshape(-1))
    if has.any():
        state.check(sub[has], state.x[nearest[has]])
