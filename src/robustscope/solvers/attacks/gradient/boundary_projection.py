"""Projection of an input onto a decision boundary linearised at a counterexample (FAB's
step, Croce & Hein 2020, made a refinement of a search's best counterexample).

Where a counterexample ``u_b`` (scaled perturbation) has been found, the margin between the
label and a class ``c`` is linearised there, ``m(u) ~ m(u_b) + g . (u - u_b)``, and the input
is moved by the smallest Lp step that takes that linear margin to zero inside the box:
``need = m(u_b) - g . u_b`` is the margin the linearisation predicts at the input, and the
step solves ``min ||s||_p`` s.t. ``g . s <= -need``, ``lo <= s <= hi``. On a piecewise-linear
network whose counterexample and boundary point share a linear region the step lands on
the boundary exactly, wherever the search's iterates stopped short of it; a class other
than the counterexample's gives a first-order jump to that class's boundary.

The minimal steps have closed forms per norm (all batched, on the input's device):

* L1: coordinates filled in decreasing ``|g_i|`` up to their room
  (:func:`~robustscope.solvers.attacks.gradient.minnorm_l1.linear_l1_step`);
* Linf: ``s_i = -sign(g_i) min(t, room_i)`` with the smallest ``t`` that covers ``need``;
* L2: ``s_i = -sign(g_i) min(lam |g_i|, room_i)`` with the smallest such ``lam``.

Linf and L2 both ask for the smallest ``t >= 0`` with ``sum_i w_i min(t, b_i) >= need``
(``w_i = |g_i|, b_i = room_i`` and ``w_i = g_i^2, b_i = room_i / |g_i|``): a non-decreasing,
piecewise-linear function of ``t`` with breakpoints ``b_i``, solved exactly by sorting them.
"""

from __future__ import annotations

import math

import torch

from robustscope.core.space import FeatureSpace
from robustscope.core.statement import Statement, rounding_margin
from robustscope.models.base import Classifier
from robustscope.solvers.attacks.gradient.minnorm_l1 import exclusive_cumsum, linear_l1_step
from robustscope.solvers.attacks.gradient.scaled_problem import ScaledProblem
from robustscope.threats.lp import LpThreat

#: The step covers the predicted margin times ``1 + AIM`` (a point exactly on the linearised
#: boundary is a counterexample only half the time), and at least by the logits' rounding
#: (:func:`~robustscope.core.statement.rounding_margin`: a float32 network's margin within a
#: few ulps of zero can change sign with the batch it is computed in).
AIM = 1e-6


def _smallest_cover(need: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per row the smallest ``t >= 0`` with ``sum_i w_i min(t, b_i) >= need`` (``inf`` where
    no ``t`` does), for ``w`` ``(n, d)`` ``>= 0``, ``b`` ``(n, d)`` ``>= 0`` (may be ``inf``)
    and ``need`` ``(n,)``."""
    b, order = b.sort(dim=1)
    w = w.gather(1, order)
    wb = torch.where(w > 0, w * b, torch.zeros_like(w))  # inf where an unbounded side slopes
    before = exclusive_cumsum(wb)  # sum over the breakpoints below b_k (no inf - inf)
    rest = w.flip(1).cumsum(dim=1).flip(1)  # sum of w_j over j >= k
    # on [b_(k-1), b_k] the function is before_k + t * rest_k: its value at t = b_k
    at_break = before + torch.where(rest > 0, b * rest, torch.zeros_like(b))
    reached = at_break >= need[:, None]
    k = torch.where(reached.any(dim=1), reached.to(torch.int8).argmax(dim=1),
                    torch.full_like(need, b.shape[1] - 1, dtype=torch.long))
    t = (need - before.gather(1, k[:, None])[:, 0]) / rest.gather(1, k[:, None])[:, 0]
    t = torch.where(reached.any(dim=1), t, torch.full_like(t, math.inf))
    return torch.where(need > 0, t.clamp_min(0.0), torch.zeros_like(t))


def halfspace_step(need: torch.Tensor, grad: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor,
                   p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The Lp-smallest move ``s`` ``(n, d)`` from ``0`` with ``grad . s <= -need`` and
    ``lo <= s <= hi``, and its length ``(n,)`` (``inf``, with the move that goes furthest,
    where the box cannot cover ``need``). ``need`` ``(n,)`` (``<= 0``: ``s = 0``), ``grad``,
    ``lo <= 0 <= hi`` ``(n, d)``; ``p`` is 1, 2 or ``inf``."""
    if p == 1.0:
        return linear_l1_step(need, grad, torch.zeros_like(grad), lo, hi)
    room = torch.where(grad > 0, -lo, hi).clamp_min(0.0)
    g = grad.abs()
    room = torch.where(g > 0, room, torch.zeros_like(room))
    if p == math.inf:
        t = _smallest_cover(need, g, room)
        amount = torch.minimum(t[:, None], room)
    elif p == 2.0:
        bp = torch.where(g > 0, room / g.clamp_min(1e-300), torch.zeros_like(room))
        t = _smallest_cover(need, g * g, bp)
        amount = torch.where(g > 0, torch.minimum(t[:, None] * g, room), torch.zeros_like(g))
    else:
        raise ValueError(f"halfspace_step: p must be 1, 2 or inf, got {p}")
    covered = torch.isfinite(t)
    amount = torch.where(covered[:, None] | torch.isfinite(room), amount, torch.zeros_like(g))
    step = -torch.sign(grad) * amount
    length = torch.linalg.vector_norm(step, ord=p, dim=1)
    return step, torch.where(covered, length, torch.full_like(length, math.inf))


def project_to_boundaries(model: Classifier, x: torch.Tensor, y: torch.Tensor,
                          best: torch.Tensor, classes: torch.Tensor, space: FeatureSpace,
                          threat: LpThreat, statement: Statement
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """For each row, the input ``x`` ``(n, *shape)`` moved onto the boundary between its
    label ``y`` ``(n,)`` and ``classes`` ``(n,)`` linearised at ``best`` ``(n, *shape)`` (a
    counterexample, or any point), by the threat's smallest step inside the box.

    Returns the candidates ``(n, *shape)`` and their lengths ``(n,)`` in the threat's scaled
    units (``inf`` where the box cannot reach the linearised boundary). Costs one gradient
    per row, charged to the model's ledger like any solver call; the candidates are not
    checked here (the search verifies them)."""
    problem = ScaledProblem(model, x, y, space, statement, classes)
    u_best = space.scaled_delta(best.to(x.dtype), x)
    logits, margin, grad = problem.margin_and_grad(u_best)
    need = margin - (grad * u_best).sum(dim=1)
    slack = rounding_margin(logits, model.dtype).to(need.dtype)
    need = need + torch.maximum(AIM * need.abs(), slack)
    step, length = halfspace_step(need, grad, problem.lo, problem.hi, threat.p)
    if space.has_relations:  # the step may leave the relations: back into them
        step = problem.clip(step)
        length = torch.where(torch.isfinite(length), threat.norm(step), length)
    return problem.candidate(step), length
