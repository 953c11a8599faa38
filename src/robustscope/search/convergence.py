"""Stop on evidence (issue #39): rounds of attacks that try to beat each input's radius, until
attacks from independent starts fail or a ceiling is reached.

After the planned cascade (and the certificates), every input whose bracket is still open
gets rounds. A round is one fixed-strength attack at ``eps = r · (1 - m)`` below the input's
best radius ``r``, from a start the cascade did not use; an input takes the kinds of
:func:`cycle` in turn:

- ``targeted``: PGD from a uniform point of the ball towards one class (under L1 a
  minimum-norm run from the input towards it), the classes in the order of the first-order
  distance to their boundaries at the input (computed once, one gradient per class): the
  nearest boundary is often neither the steepest class's nor the second logit's (on the tune
  half of the zoo, the misses of the planned cascade were classes 4th to 6th by logit);
- ``random``: PGD from a uniform point of the ball, towards any other class;
- ``minnorm``: a minimum-norm run from the input itself with another step scale.

A round that wins (a counterexample at ``eps`` or below) lowers the radius (a line search
shrinks the new counterexample towards its input), and the input's next round descends in
the class it reached (a minimum-norm run from that counterexample); its margin ``m`` doubles
(from ``rtol`` up to :data:`MAX_MARGIN`), so that a radius far too large falls geometrically
rather than by ``rtol`` a round. A round that fails at the margin ``rtol`` is one piece of
evidence (:func:`weigh_round`). An input whose last ``len(cycle)`` rounds all failed at
``rtol`` (one of every kind, each targeted class included) has *converged*: attacks from that
many independent starts could not find a counterexample ``rtol`` closer than its radius. A
failed bisection probe within ``rtol`` below the radius counts as the first failure.

An input stops when it has converged, when its certified bracket closes, or when the next
round would take it past its ceiling: the budget where one is given, else
``converge_ceiling`` passes. An input stopped by its ceiling is reported as not converged
(``RadiusResult.converged == -1``). ``converge_ceiling=None`` turns the rounds off (the
planned cascade alone, as before issue #39).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from robustscope.search.metering import charged
from robustscope.search.minnorm_runs import MINNORM, refine_best_class, targets_beyond_best
from robustscope.search.plan import AttackPlan
from robustscope.search.refine import PGD, line_search
from robustscope.search.state import BatchState
from robustscope.solvers.attacks.gradient.targets import rank_by_distance, runner_ups

#: Largest margin below the radius a round aims at after successes in a row.
MAX_MARGIN = 0.5
#: Step scales (``minnorm``'s ``step_start``) of the minimum-norm rounds, in turn.
STEP_SCALES = (2.5, 0.4, 6.0, 1.0)


def cycle(n_classes: int, targets: int) -> tuple[str, ...]:
    """The kinds of round an input takes in turn: a targeted round at each of its
    ``min(targets, n_classes - 1)`` nearest classes, a random start, a minimum-norm run."""
    return ("targeted",) * max(1, min(targets, n_classes - 1)) + ("random", "minnorm")


def converge(state: BatchState, sub: torch.Tensor, plan: AttackPlan, grad_cost: int) -> None:
    """Rounds for the inputs ``sub`` (see the module's docstring); records per input whether
    its radius converged in ``state.converged``."""
    config = state.config
    if config.converge_ceiling is None or len(sub) == 0:
        return
    # a budget is the ceiling (the ledger enforces it); without one, converge_ceiling
    ceiling = config.converge_ceiling if state.budget is None else state.budget
    n, device, rtol = len(state.x), sub.device, state.rtol
    targets_wanted = (min(config.converge_targets, config.converge_l1_targets)
                      if state.threat.p == 1 else config.converge_targets)
    kinds = cycle(state.model.n_classes, targets_wanted)
    patience = len(kinds)  # one failed round of every kind in a row
    r0 = state.best_r
    # a bisection probe that failed within rtol below the radius is the first piece of evidence
    fails = (torch.isfinite(r0) & (state.attack_lo >= r0 * (1 - rtol) * (1 - 1e-9))).long()
    margin = torch.full((n,), rtol, dtype=torch.float64, device=device)
    done = torch.zeros(n, dtype=torch.bool, device=device)
    turn = torch.zeros(n, dtype=torch.long, device=device)  # rounds taken, per input
    refine = torch.zeros(n, dtype=torch.bool, device=device)  # the last round won
    steps, long_steps = config.converge_steps, config.converge_minnorm_steps
    cost = max(steps, long_steps) * grad_cost + 1 + plan.line_steps
    # the ranking only for the inputs that can pay for it and a round after it
    first = sub[state.still_open(sub, probes=False) & torch.isfinite(state.best_r[sub])]
    left = _left(state, first, ceiling)
    ranking_cost = (state.model.n_classes - 1) * grad_cost
    targets = _ranking(state, first[torch.as_tensor(left >= cost + ranking_cost,
                                                    device=device)], grad_cost)
    for _ in range(config.converge_max_rounds):
        if config.deadline is not None and time.perf_counter() > config.deadline:
            break
        done = done | (fails >= patience)
        open_ = sub[state.still_open(sub, probes=False) & ~done[sub]
                    & torch.isfinite(state.best_r[sub])]
        open_ = open_[torch.as_tensor(_left(state, open_, ceiling) >= cost, device=device)]
        if len(open_) == 0:
            break
        before = state.best_r[open_].clone()
        eps = before * (1 - margin[open_])
        # an input whose last round won descends in the class it reached first
        descend = refine[open_]
        if descend.any():
            _descend(state, open_[descend], long_steps)
        # the others take the kinds in turn; inputs at the same kind share a solver call
        position = torch.where(descend, -1, turn[open_] % len(kinds))
        for kind in set(kinds):
            rows = torch.isin(position, torch.as_tensor(
                [j for j, k in enumerate(kinds) if k == kind], device=device))
            if rows.any():
                _attack(state, open_[rows], eps[rows], kind, position[rows], targets,
                        long_steps if kind == "minnorm" else steps, turn[open_[rows]])
        after = state.best_r[open_]
        won = after <= eps * (1 + 1e-12)
        if plan.line_steps and won.any():
            line_search(state, open_[won], plan.line_steps)
        margin[open_], fails[open_] = weigh_round(won, descend, margin[open_], fails[open_],
                                                  rtol)
        refine[open_] = won
        turn[open_] += (~descend).long()
    done = done | (fails >= patience)
    state.converged[sub] = done[sub] | ~state.still_open(sub, probes=False)


def _left(state: BatchState, rows: torch.Tensor, ceiling: int) -> np.ndarray:
    """``(len(rows),)`` passes each input may still spend: under the ceiling and its budget."""
    owners = state.owners[rows.cpu().numpy()]
    return np.minimum(ceiling - state.ledger.used(owners), state.ledger.remaining(owners))


def weigh_round(won: torch.Tensor, descend: torch.Tensor, margin: torch.Tensor,
                fails: torch.Tensor, rtol: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The evidence after one round, per input (all ``(m,)``): whether the round ``won``
    (found a counterexample at ``r · (1 - margin)`` or below), whether it was a descent in the
    class just reached (``descend``: no evidence either way), the ``margin`` it aimed at and
    the failed rounds in a row at ``rtol`` so far (``fails``). Returns the next ``(margin,
    fails)``: a win clears the count and doubles the margin (up to :data:`MAX_MARGIN`); a
    failure at ``rtol`` adds one; a failure at a larger margin or a descent adds nothing; the
    margin is ``rtol`` again after anything but a win."""
    at_rtol = (margin <= rtol * (1 + 1e-12)) & ~descend
    fails = torch.where(won, torch.zeros_like(fails),
                        torch.where(at_rtol & ~won, fails + 1, fails))
    margin = torch.where(won, (2 * margin).clamp_max(MAX_MARGIN), torch.full_like(margin, rtol))
    return margin, fails


def _ranking(state: BatchState, sub: torch.Tensor, grad_cost: int) -> torch.Tensor:
    """``(len(state.x), k - 1)`` the other classes per input, nearest boundary first by the
    first-order estimate at the clean input for the inputs ``sub`` that can pay for it
    (``k - 1`` gradients each, charged), by clean logit for the others."""
    k = state.model.n_classes
    ranking = runner_ups(state.clean_logits, state.y, k - 1)
    if k <= 2:
        return ranking
    sub = state.affordable(sub, (k - 1) * grad_cost)
    if len(sub):
        view = charged(state.model, state.ledger,
                       np.repeat(state.owners[sub.cpu().numpy()], k - 1))
        ranking[sub] = rank_by_distance(view, state.x[sub], state.y[sub],
                                        state.clean_logits[sub], state.space, state.threat,
                                        state.statement, k - 1)
    return ranking


def _descend(state: BatchState, rows: torch.Tensor, steps: int) -> None:
    """A minimum-norm run towards the class of each input's best counterexample, from that
    counterexample: down to the boundary's nearest point in the class a round just reached."""
    towards, init = refine_best_class(state, rows, targets_beyond_best(state, rows, 1))
    out = MINNORM(state.problem(rows), steps=steps, towards=towards[:, 0], init=init)
    state.verify(rows, out.x_adv)


def _attack(state: BatchState, rows: torch.Tensor, eps: torch.Tensor, kind: str,
            position: torch.Tensor, targets: torch.Tensor, steps: int,
            turn: torch.Tensor) -> None:
    """One round of ``kind`` on the batch inputs ``rows`` at strengths ``eps`` (a targeted
    round aims at the class ranked ``position`` in ``targets``); every candidate goes through
    the state's verification."""
    if kind == "minnorm":
        scale = STEP_SCALES[int(turn[0]) % len(STEP_SCALES)]
        out = MINNORM(state.problem(rows), steps=steps, step_start=scale)
        state.verify(rows, out.x_adv)
        return
    towards = None
    if kind == "targeted":
        rank = position.clamp_max(targets.shape[1] - 1)
        towards = [targets[rows].gather(1, rank[:, None]).reshape(-1)]
        if state.threat.p == 1:
            # under L1 a fixed-strength PGD step moves few coordinates: a targeted
            # minimum-norm run from the input finds the far classes' boundaries
            out = MINNORM(state.problem(rows), steps=state.config.converge_minnorm_steps,
                          towards=towards[0])
            state.verify(rows, out.x_adv)
            return
    init = state.threat.random_in_ball(len(rows), state.space.n_features, eps,
                                       state.generator, state.x.dtype, state.x.device)
    out = PGD(state.problem(rows, eps), steps=steps, restarts=1, towards=towards, init=init)
    state.check(rows, out.x_adv)
