"""Minimum-norm white-box solver for the L1 threat (FMN's L1 variant, Pintor et al. 2021,
made aware of the box).

L1 is its own problem: the smallest L1 counterexample touches few coordinates, and in a
bounded input space (images in [0, 1]) most of those sit at their bound. The generic
steepest-descent step of :mod:`robustscope.solvers.attacks.gradient.minnorm` (the signs of the top
1% of the
gradient, spread evenly) and a projection onto the ball followed by a clip waste both facts.
Here, per input:

* the step follows the gradient normalised in L2 (dense, so the L1 projection that follows
  chooses the support), with a cosine-annealed length relative to the current strength;
* the projection is the exact Euclidean projection onto ``L1 ball ∩ box``
  (:func:`~robustscope.threats.lp.project_l1_box`), so coordinates pinned at their bound
  keep their share of the budget instead of losing it to a clip after the projection;
* until a first counterexample is found, the strength jumps to the L1 distance to the
  linearised boundary *inside the box* (fill the coordinates with the largest ``|g_i|`` up
  to their bound, in order), and the iterate moves by that greedy step as long as the model
  behaves linearly along it; where the last jump removed less than
  :data:`LINEAR_SHARE` of the margin it predicted, the model is curved at that scale and the
  run moves by dense gradient steps instead (from its start, if the first jump was the
  one), which the projection onto the ball of the grown strength makes sparse; after a first
  counterexample the strength shrinks while the iterate is a counterexample and grows while
  it is not;
* the smallest counterexample seen is kept.

Bookkeeping stays in tensors on the input's device: no host synchronisation inside the loop.
"""

from __future__ import annotations

import torch

from robustscope.core.space import FeatureSpace
from robustscope.core.statement import Statement
from robustscope.models.base import Classifier
from robustscope.solvers.attacks.gradient.scaled_problem import ScaledProblem, cosine_schedule
from robustscope.solvers.output import SolverOutput
from robustscope.threats.lp import LpThreat, project_l1_box

#: Share of the first steps that follow the smooth margin (log-sum-exp of the other logits).
#: Kept at 0 under L1: on a 5-class linear model it left the untargeted run 4-5% above the exact
#: radius on 2 of 15 inputs (a class the log-sum-exp direction favours but the L1 geometry
#: does not), although on LeNet-5 it lowered the median and p90 at 50-1,000 passes.
SMOOTH_SHARE = 0.0

#: A greedy (linearised, box-aware) jump towards the boundary is kept while it removes at
#: least this share of the margin the linearisation predicted. On the networks of
#: ``benchmarks/peers``: on the digits MLP the check changed no radius; on the tiny colour CNN
#: (3,072 features) a first greedy jump removed 17-37% of the margin it predicted on four of
#: five inputs traced, and greedy jumps alone left 90% of the inputs within 2.81x of the best
#: known radius at 50 passes per input, against 1.79x with the check (120 inputs; see
#: ``docs/minnorm-l1.md``).
LINEAR_SHARE = 0.7
#: L2 length of a dense jump at the run's first step, in scaled units (1: a whole feature's
#: range), cosine-annealed to a hundredth of it over the run (Foolbox FMN's schedule).
DENSE_JUMP = 1.0


def exclusive_cumsum(v: torch.Tensor) -> torch.Tensor:
    """``out[:, k] = sum_{j < k} v[:, j]``, by shifting rather than ``cumsum - v``: an
    unbounded coordinate's ``inf`` would give ``inf - inf`` in the rows after it."""
    return torch.cat([torch.zeros_like(v[:, :1]), v[:, :-1].cumsum(dim=1)], dim=1)


def linear_l1_step(margin: torch.Tensor, grad: torch.Tensor, u: torch.Tensor,
                   lo: torch.Tensor, hi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The L1-smallest move ``s`` (n, d) with ``margin + <grad, s> <= 0`` and
    ``lo <= u + s <= hi`` (the boundary of the linearised margin, reached inside the box),
    and its L1 length (n,).

    Coordinates are filled in decreasing ``|grad_i|`` up to their room in the descent
    direction; the last one partly. Rows whose margin the box cannot cover get the full fill
    and an infinite length. ``margin`` (n,) <= 0 gives ``s = 0``.
    """
    need = margin.clamp_min(0.0)
    room = torch.where(grad > 0, u - lo, hi - u).clamp_min(0.0)
    room = torch.where(grad == 0, torch.zeros_like(room), room)
    g = grad.abs()
    g_sorted, order = g.sort(dim=1, descending=True)
    room_sorted = room.gather(1, order)
    gain = g_sorted * room_sorted  # margin removed by filling each coordinate
    before = exclusive_cumsum(gain)  # removed by the coordinates ahead of each one
    left = (need[:, None] - before).clamp_min(0.0)
    take = torch.minimum(room_sorted, left / g_sorted.clamp_min(1e-30))
    take = torch.where(g_sorted > 0, take, torch.zeros_like(take))
    amount = torch.zeros_like(take).scatter_(1, order, take)
    step = -torch.sign(grad) * amount
    covered = gain.sum(dim=1) >= need
    length = torch.where(covered, amount.sum(dim=1), torch.full_like(need, float("inf")))
    return step, length


def minnorm_l1(
    model: Classifier,
    x: torch.Tensor,
    y: torch.Tensor,
    space: FeatureSpace,
    threat: LpThreat,
    eps: torch.Tensor | None,
    statement: Statement,
    generator: torch.Generator,
    steps: int = 100,
    towards: torch.Tensor | None = None,
    init: torch.Tensor | None = None,
    gamma_start: float = 0.3,
    gamma_end: float = 1e-4,
    step_start: float = 1.0,
    step_end: float = 0.01,
    overshoot: float = 1.05,
    free_after: float = 0.5,
    refine: float = 0.05,
    ray_tol: float = 1e-6,
    smooth_share: float = SMOOTH_SHARE,
    dense_steps: bool | None = None,
) -> SolverOutput:
    """Per input the smallest-L1 counterexample seen (the last iterate, not counted as found,
    where none was), for ``threat`` with ``p = 1``.

    ``x`` (n, *shape) inputs, ``y`` (n,) labels; ``eps`` is ignored (kept for the solver
    signature); ``init`` an optional starting point ``(n, *shape)`` (warm start);
    ``towards`` (n,) optionally a class per input to push to. Options (all measured in
    ``benchmarks/minnorm_l1.py``): ``gamma_start`` / ``gamma_end``: the largest relative
    change of the strength per step, cosine-annealed, and the smallest; ``step_start`` /
    ``step_end``: the step's L2 length relative to the strength, cosine-annealed;
    ``overshoot``: factor on the linearised jump to the boundary; ``free_after``: share of
    the steps after which the gradient components that push a coordinate out of its box are
    kept (they then hold coordinates at their bound against the L1 threshold); ``refine``:
    share of the steps (none below 10 steps) spent on the ray from ``x`` through the best
    counterexample, by Newton steps on the margin aimed ``ray_tol`` past the boundary;
    ``smooth_share``: share of the first steps whose direction follows the statement's
    smooth margin (see :func:`~robustscope.solvers.attacks.gradient.minnorm.minnorm`; 0 by default
    under L1,
    see :data:`SMOOTH_SHARE`); ``dense_steps``: a
    step's L2 length is the strength times the L2 / L1 ratio of the point the run stands on
    (its best counterexample, else its iterate) instead of the strength itself — the right
    scale when the counterexample spreads over many coordinates (``None``: for targeted runs
    only, which makes the targeted runs of a search a second step scale; on the tiny CNN of
    ``benchmarks/peers`` at 500 passes per input, ratio to the best known radius p90 1.51 ->
    1.23, median 1.008 -> 1.012). Costs ``steps`` gradient calls per input.
    """
    del eps, generator
    if threat.p != 1.0:
        raise ValueError(f"attacks.gradient.minnorm_l1: threat must be L1, got {threat.name}")
    if steps < 1:
        raise ValueError(f"attacks.gradient.minnorm_l1: steps must be at least 1, got {steps}")
    dense = towards is not None if dense_steps is None else dense_steps
    n = x.shape[0]
    problem = ScaledProblem(model, x, y, space, statement, towards)
    lo, hi = problem.lo, problem.hi
    zeros = torch.zeros(n, dtype=x.dtype, device=x.device)
    u = torch.zeros(n, problem.n_features, dtype=x.dtype, device=x.device)
    if init is not None:
        u = problem.clip(space.scaled_delta(init.to(x.dtype), x))
    best_u, best_norm, radius = u.clone(), zeros + float("inf"), zeros + float("inf")
    best_margin, best_slope = zeros.clone(), zeros.clone()
    gamma_in, prev_ok = zeros + gamma_start, torch.zeros_like(zeros, dtype=torch.bool)
    main = steps - (int(round(refine * steps)) if steps >= 10 else 0)
    base, refining = best_u, torch.zeros_like(prev_ok)
    t_lo, t_hi, t_k = zeros.clone(), zeros + 1, zeros + 1
    start = u.clone()
    # per input: greedy jumps while the last jump (greedy or dense) behaved linearly (see
    # LINEAR_SHARE); the margin the last step started from and the margin it predicted
    greedy, jumped = torch.ones_like(prev_ok), torch.zeros_like(prev_ok)
    m_before, m_predicted = zeros.clone(), zeros.clone()
    for k in range(steps):
        logits, margin, raw = problem.margin_and_grad(u, smooth=k < smooth_share * steps)
        linear = m_before - margin >= LINEAR_SHARE * (m_before - m_predicted)
        greedy = torch.where(jumped, linear, greedy)
        grad = problem.descent_gradient(u, raw) if k < free_after * steps else raw
        ok = problem.success(logits)
        norm = u.abs().sum(dim=1)
        improved = ok & (norm < best_norm)
        best_u = torch.where(improved[:, None], u, best_u)
        best_norm = torch.where(improved, norm, best_norm)
        best_margin = torch.where(improved, margin, best_margin)
        best_slope = torch.where(improved, (raw * u).sum(dim=1), best_slope)
        found = torch.isfinite(best_norm)

        if k >= main - 1:  # propose the next point on the ray t -> t * base
            if k == main - 1:
                base, refining = best_u.clone(), found
                t_lo, t_hi = zeros.clone(), zeros + 1
                t_k, m_k, slope = zeros + 1, best_margin, best_slope
            else:  # u = t_k * base was just evaluated
                t_hi = torch.where(ok, torch.minimum(t_hi, t_k), t_hi)
                t_lo = torch.where(ok, t_lo, torch.maximum(t_lo, t_k))
                m_k, slope = margin, (raw * base).sum(dim=1)
            # margin(t * base) is piecewise linear in t for a ReLU network: Newton, with a
            # bisection of the bracket where Newton leaves it
            t_next = (t_k - m_k / slope.clamp_max(-1e-30)) * (1 + ray_tol)
            bad = ~torch.isfinite(t_next) | (slope >= 0) | (t_next <= t_lo) | (t_next >= t_hi)
            t_k = torch.where(bad, (t_lo + t_hi) / 2, t_next)

        jump, jump_len = linear_l1_step(margin, grad, u, lo, hi)
        # where the box cannot cover the linearised margin: twice the unboxed estimate
        unboxed = 2 * margin.clamp_min(0) / grad.abs().amax(dim=1).clamp_min(1e-30)
        estimate = torch.where(torch.isfinite(jump_len), jump_len, unboxed)
        # per input: the strength moves faster while the iterate stays on one side of the
        # boundary and slower once it crosses, under the cosine schedule's ceiling
        gamma_in = torch.where(ok == prev_ok, gamma_in * 1.5, gamma_in * 0.5)
        gamma_in = gamma_in.clamp(gamma_end, gamma_start)
        prev_ok = ok
        gamma = gamma_in.clamp_max(cosine_schedule(k, steps, gamma_start, gamma_end))
        grow = torch.where(found, radius * (1 + gamma), norm + overshoot * estimate)
        shrink = torch.minimum(radius * (1 - gamma), best_norm)
        shrink = torch.where(torch.isfinite(radius), shrink, norm * (1 - gamma))
        radius = torch.where(ok, shrink, grow)

        alpha = cosine_schedule(k, steps, step_start, step_end)
        length = alpha * torch.minimum(radius, best_norm)
        if dense:  # the strength's L2 share along the point the run stands on
            at = torch.where(found[:, None], best_u, u)
            l1 = at.abs().sum(dim=1)
            length = length * torch.where(
                l1 > 0, torch.linalg.vector_norm(at, dim=1) / l1.clamp_min(1e-300),
                torch.ones_like(l1))
        direction = grad / torch.linalg.vector_norm(grad, dim=1, keepdim=True).clamp_min(1e-30)
        moved = u - torch.nan_to_num(length, posinf=0.0)[:, None] * direction
        # no counterexample yet: the linearised jump (a box-aware DeepFool-L1 step) where the
        # model has behaved linearly, else a dense step (after a failed first jump, from the
        # start again)
        leap = ~found & ~ok
        dense_from = torch.where((~greedy & (k == 1))[:, None], start, u)
        dense_length = cosine_schedule(k, steps, DENSE_JUMP, DENSE_JUMP / 100)
        dense_jump = dense_from - dense_length * direction
        leaped = torch.where(greedy[:, None], u + overshoot * jump, dense_jump)
        moved = torch.where(leap[:, None], leaped, moved)
        bound = torch.where(torch.isfinite(radius), radius, moved.abs().sum(dim=1))
        previous, u = u, project_l1_box(moved, bound, lo, hi)
        if space.has_relations:  # into box ∩ relations, falling back towards the last iterate
            u = problem.clip(u, threat, bound, anchor=previous)
        if k >= main - 1:
            u = torch.where(refining[:, None], t_k[:, None] * base, u)
        jumped = leap
        m_before, m_predicted = margin, margin + (raw * (u - previous)).sum(dim=1)
    found = torch.isfinite(best_norm)
    cand = problem.candidate(torch.where(found[:, None], best_u, u))
    return SolverOutput.of_candidates(x, cand, found.cpu().numpy(), space, threat)
