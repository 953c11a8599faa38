"""Refinement of the counterexamples the minimum-norm runs found, and the PGD bisection.

- :func:`line_search`: each counterexample shrunk towards its input along the straight line
  (regula falsi, forward only);
- :func:`project_round`, :func:`project`, :func:`project_what_is_left`: FAB's projection onto
  the boundary linearised at the counterexample, one class per round;
- :func:`bisect_with_pgd`: double-then-bisect on the strength with fixed-strength PGD (the
  registry's ``pgd``), warm-started, until the bracket is within ``rtol``.

Every candidate goes through the batch's one verification
(:meth:`~robustscope.search.state.BatchState.check`).
"""

from __future__ import annotations

import numpy as np
import torch

from robustscope.core.statement import rounding_margin
from robustscope.search.metering import charged
from robustscope.search.plan import AttackPlan
from robustscope.search.state import BatchState, registered
from robustscope.solvers.attacks.gradient.boundary_projection import project_to_boundaries
from robustscope.solvers.attacks.gradient.targets import runner_ups

#: The registry's fixed-strength solver, looked up at each call.
PGD = registered("pgd")
#: Doublings from max_radius / 64 reach max_radius in 7 probes.
DOUBLINGS = 7
#: First PGD step of a warm-started probe, as a share of its strength (the start is close).
WARM_STEP = 0.25
#: First PGD step of a cold-started probe (spaces with discrete features, see _probe_start).
COLD_STEP = 0.5
#: The line search aims this far (relative) past the chord's zero, on the counterexample's
#: side of the boundary ...
LINE_AIM = 1e-6
#: ... and bisects where the chord's zero is within this share of the bracket's ends.
LINE_EDGE = 1e-9


def line_search(state: BatchState, sub: torch.Tensor, steps: int) -> None:
    """Shrink each counterexample towards its input along the straight line (forward only).

    Per input, ``t`` in ``[lo, hi] = [0, 1]`` scales the best counterexample's perturbation;
    the statement's margin is known at both ends (the clean logits, the best counterexample's
    logits), and for a ReLU network it is piecewise linear in ``t``. Each step queries the
    point where the chord between the ends crosses zero, a relative :data:`LINE_AIM` past it
    (regula falsi with the Illinois rule: an end kept twice in a row has its margin halved),
    and bisects where that point leaves the bracket or a margin is unknown. Bisection alone
    only reaches the boundary to ``2**-steps`` of the segment: on the peer suite at 50-200
    passes per input, regula falsi took the median ratio to the best known radius from
    1.0015 to 1.0001 (digits MLP, Linf, 50 passes) and lowered it on every network and
    Lp threat (``docs/budget.md``).
    """
    space = state.space
    sub = state.affordable(with_counterexample(state, sub), steps)
    if len(sub) == 0:
        return
    y, statement = state.y[sub], state.statement
    u = space.scaled_delta(state.best_x[sub], state.x[sub])
    lo = torch.zeros(len(sub), dtype=torch.float64, device=u.device)
    hi = torch.ones_like(lo)
    # margins shifted by the model's rounding: the chord aims that far past the boundary
    tol = rounding_margin(state.clean_logits[sub], state.model.dtype)
    m_lo = statement.margin(state.clean_logits[sub].to(torch.float64), y) + tol
    m_hi = (statement.margin(state.best_logits[sub], y) + tol).clamp_max(0.0)
    kept = torch.zeros_like(lo)  # +1: the last step kept lo, -1: it kept hi
    for _ in range(steps):
        width = hi - lo
        t = (hi - m_hi * width / (m_hi - m_lo).clamp_max(-1e-300)) * (1 + LINE_AIM)
        chord = (torch.isfinite(t) & (m_lo > 0) & (t > lo + LINE_EDGE * width)
                 & (t < hi - LINE_EDGE * width))
        t = torch.where(chord, t, lo + width / 2)
        cls, logits, _ = state.verify(
            sub, space.apply_delta(state.x[sub], u * t[:, None].to(u.dtype)))
        ok = cls >= 0
        m = statement.margin(logits, y) + tol  # NaN where not queried (a relation broke)
        m_lo = torch.where(ok, torch.where(kept > 0, m_lo / 2, m_lo), m)
        m_hi = torch.where(ok, m.clamp_max(0.0), torch.where(kept < 0, m_hi / 2, m_hi))
        m_lo = torch.nan_to_num(m_lo, nan=0.0)  # no margin known: bisect from here
        hi, lo = torch.where(ok, t, hi), torch.where(ok, lo, t)
        kept = torch.where(ok, torch.ones_like(kept), -torch.ones_like(kept))


def with_counterexample(state: BatchState, sub: torch.Tensor) -> torch.Tensor:
    """The inputs of ``sub`` with a counterexample of positive size."""
    return sub[torch.isfinite(state.best_r[sub]) & (state.best_r[sub] > 0)]


def ceiling_left(state: BatchState, sub: torch.Tensor, plan: AttackPlan) -> torch.Tensor:
    """``(len(sub),)`` passes each input of ``sub`` may still spend: its budget's remainder,
    and without a budget what is left of the plan's passes."""
    owners = state.owners[sub.cpu().numpy()]
    left = np.minimum(state.ledger.remaining(owners), plan.passes - state.ledger.used(owners))
    return torch.as_tensor(left, device=sub.device)


def project(state: BatchState, sub: torch.Tensor, plan: AttackPlan, grad_cost: int,
             improved: torch.Tensor) -> None:
    """FAB's projection as a refinement
    (:func:`~robustscope.solvers.attacks.gradient.boundary_projection.project_to_boundaries`),
    after the line search: each input of ``sub`` with a counterexample is moved onto the
    boundary of each of the classes of rank 1 to
    ``plan.project - 1`` (by logit at its best counterexample, after the counterexample's
    own class, rank 0, which :func:`run_attacks` projected onto before the line search),
    linearised at that counterexample: first-order jumps to a nearer class. Then
    ``plan.project_rounds`` rounds linearise in the best counterexample's class again, each
    for the inputs the round before improved (``improved``: those the first class did, for
    inputs the line search could not move). Paid from what each input has left under its
    ceiling (:func:`project_round`)."""
    again = project_round(state, improved, plan, grad_cost, range(1, plan.project))
    todo = torch.unique(torch.cat([again, improved]))
    for _ in range(plan.project_rounds):
        todo = project_round(state, todo, plan, grad_cost, [0])


def project_what_is_left(state: BatchState, sub: torch.Tensor, plan: AttackPlan,
                          grad_cost: int) -> None:
    """The passes an input has left under its ceiling once every other part is done (too
    few for a minimum-norm run) go to projections onto the boundaries of the classes the
    planned projection did not reach, next largest logit at the best counterexample first,
    one class per round, and to a round in the best counterexample's class after each one
    that improved it (under a targeted statement, the target's boundary alone)."""
    todo = with_counterexample(state, sub)
    # a targeted statement has one boundary: the target's (its margin ignores the class)
    classes = 1 if state.statement.target is not None else state.model.n_classes - 1
    for rank in range(plan.project, classes):
        improved = project_round(state, todo, plan, grad_cost, [rank])
        if len(improved):
            project_round(state, improved, plan, grad_cost, [0])
        todo = todo[ceiling_left(state, todo, plan) >= grad_cost + 1]
        if len(todo) == 0:
            return


def project_round(state: BatchState, todo: torch.Tensor, plan: AttackPlan, grad_cost: int,
                   ranks, keep: int = 0) -> torch.Tensor:
    """One round of projections for the open inputs of ``todo`` whose ceiling pays for it:
    onto the boundary of the class of each rank in ``ranks`` (0: the largest logit other
    than the label at the counterexample the round starts from, that is its own class),
    linearised at that counterexample. A projected point is checked only where it is
    shorter than the best counterexample; where it is no counterexample (the model bent
    between the two points), the margin is linearised again at the projected point and the
    input projected once more: FAB's iteration, which on the digits MLP under L1 reached the
    radius within a 1e-7 relative in two steps where the first missed (``docs/budget.md``,
    "Projection"). Each class costs a gradient and a check, and where the first misses a
    second of each, which the input's ceiling must pay for. Returns the inputs whose best
    counterexample the round improved."""
    ranks = list(ranks)
    todo = todo[state.still_open(todo)]
    todo = todo[ceiling_left(state, todo, plan) >= len(ranks) * (grad_cost + 1)]
    if len(todo) == 0 or not ranks:
        return todo[:0]
    start, base = state.best_r[todo].clone(), state.best_x[todo].clone()
    classes = runner_ups(state.best_logits[todo], state.y[todo], max(ranks) + 1)
    for rank in ranks:
        missed, cand = _project_and_check(state, todo, base, classes[:, rank], plan, grad_cost)
        # where the model bent between the counterexample and the projected point: once
        # more, linearised at the projected point (paid from what the input has left)
        _project_and_check(state, todo[missed], cand[missed], classes[missed, rank], plan,
                           grad_cost, keep)
    return todo[state.best_r[todo] < start]


def _project_and_check(state: BatchState, rows: torch.Tensor, at: torch.Tensor,
                       classes: torch.Tensor, plan: AttackPlan, grad_cost: int, keep: int = 0
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Project the inputs ``rows`` onto the boundary of ``classes`` ``(len(rows),)``
    linearised at ``at`` ``(len(rows), *shape)``, for the rows whose ceiling pays a gradient
    and a check and still leaves ``keep`` passes, and check the projected points shorter
    than the best counterexample.
    Returns, per row, whether a projected point was checked and missed (no counterexample),
    and the projected points ``(len(rows), *shape)`` (``at`` where none was made)."""
    missed = torch.zeros(len(rows), dtype=torch.bool, device=rows.device)
    out = at.clone()
    can = ceiling_left(state, rows, plan) >= grad_cost + 1 + keep
    if not can.any():
        return missed, out
    sub = rows[can]
    view = charged(state.model, state.ledger, state.owners[sub.cpu().numpy()])
    cand, length = project_to_boundaries(
        view, state.x[sub], state.y[sub], at[can], classes[can], state.space,
        state.threat, state.statement)
    out[can] = cand.to(out.dtype)
    shorter = length < state.best_r[sub]
    tried = torch.nonzero(can).reshape(-1)[shorter]
    missed[tried] = ~state.check(sub[shorter], cand[shorter])
    return missed, out


def bisect_with_pgd(state: BatchState, sub: torch.Tensor, grad_cost: int,
                     plan: AttackPlan) -> None:
    """Double-then-bisect on the strength with fixed-strength PGD, per input, until the
    bracket ``[attack_lo, best_r]`` is within ``rtol`` or the budget is spent.

    Each probe is warm-started (cold on spaces with discrete features, see
    :func:`_probe_start`): towards a smaller strength from the best counterexample shrunk
    into the ball, towards a larger one from the last failed probe's iterate (which lies
    inside the larger ball), with a smaller first step (the start is already close).
    A probe that could not narrow the bracket (closed bracket, certified input) is not run.
    """
    ledger, max_radius, config = state.ledger, state.max_radius, state.config
    restarts = plan.probe_restarts
    run_cost = restarts * (plan.probe_steps * grad_cost + 1) + 1
    doubling_eps = torch.full((len(state.best_r),), max_radius / 64, dtype=torch.float64,
                              device=state.x.device)
    for _ in range(config.max_probes + DOUBLINGS):
        hi = state.best_r[sub]
        doubling = ~torch.isfinite(hi) & (doubling_eps[sub] <= max_radius)
        todo = sub[state.still_open(sub) & (torch.isfinite(hi) | doubling)]
        todo = state.affordable(todo, run_cost)
        # without a budget, the plan's passes are the ceiling of the bisection
        within = ledger.used(state.owners[todo.cpu().numpy()]) + run_cost <= plan.passes
        todo = todo[torch.as_tensor(within, device=todo.device)]
        if len(todo) == 0:
            return
        hi = state.best_r[todo]
        lo = torch.maximum(state.attack_lo[todo], state.lower[todo])
        # the first probe checks the warm start's radius is nearly tight (0.9 r); if the
        # attack still succeeds there, the warm start was far off: halve from then on
        first = torch.isfinite(hi) & (lo == 0) & (state.probes[todo] == 0)
        eps = torch.where(first, hi * config.first_probe, (lo + hi) / 2)
        eps = torch.where(torch.isfinite(hi), eps, doubling_eps[todo])
        init_u, first_step = _probe_start(state, todo, eps)
        # restart 0 is warm-started and untargeted; the others aim at the runner-up classes
        towards = [None, *runner_ups(state.clean_logits[todo], state.y[todo], restarts - 1).T]
        out = PGD(state.problem(todo, eps), steps=plan.probe_steps, restarts=restarts,
                  towards=towards, init=init_u, step_start=first_step)
        ok = state.check(todo, out.x_adv)
        state.record_probes(todo, eps, ok, out.x_adv, torch.isfinite(hi))
        doubling_eps[todo] = torch.where(~ok & ~torch.isfinite(state.best_r[todo]),
                                         doubling_eps[todo] * 2, doubling_eps[todo])


def _probe_start(state: BatchState, todo: torch.Tensor,
                 eps: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Start ``(len(todo), d)`` of a probe at strength ``eps`` and its first step (a share of
    the strength). Warm, with :data:`WARM_STEP`: the last failed probe's iterate where one
    exists at a smaller strength (it lies inside the ball of ``eps``), else the best
    counterexample shrunk into the ball, else 0. On a space with discrete features (integers,
    one-hot groups) every probe starts cold, at 0 with :data:`COLD_STEP`: there a shrunk or
    earlier iterate rounds into a local trap (measured on the credit tutorial's logistic
    model: warm starts left radii up to 2.2x above the cold-started probes)."""
    space = state.space
    if space.has_discrete:
        return torch.zeros_like(state.near_u[todo]), COLD_STEP
    hi = state.best_r[todo]
    best_u = space.scaled_delta(state.best_x[todo], state.x[todo])
    shrunk = best_u * (eps / hi.clamp_min(1e-300)).clamp(max=1.0)[:, None]
    start = torch.where(torch.isfinite(hi)[:, None], shrunk, torch.zeros_like(best_u))
    grow = state.near_ok[todo] & (state.attack_lo[todo] < eps)
    return torch.where(grow[:, None], state.near_u[todo], start), WARM_STEP
