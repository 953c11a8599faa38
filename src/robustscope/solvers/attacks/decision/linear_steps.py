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
   the coordinate of largest ``|g_j|``; and tries ``u`` stretched by ``1 + overshoot``.
   With three classes or more (untargeted, smooth margins: :data:`NEAREST_CLASS`), the
   same differences linearise the boundary between the label and every other class, and the
   step goes to the one nearest the input (DeepFool's multi-class rule): at ``b`` the margin
   is the runner-up's, whose boundary ``b`` lies on, while the nearest boundary from the
   input may be another class's. Measured on two 3- and 4-class tune MLPs under L2
   (``mlp-tune3c`` and ``mlp-tune4c`` of ``benchmarks/blackbox_budget.py``, 40 inputs,
   seeds 0-1, against the white box at 3,000 passes), p90 radius /
   reference at 250 queries 1.44-1.60 -> 1.12 and 1.38-1.42 -> 1.32-1.34, at 500
   1.14-1.24 -> 1.07 and 1.09 -> 1.07-1.09;
4. where that is not a counterexample, removes the margin it still has along the same
   linear step (Newton steps on the measured margin with the estimated gradient, up to
   ``newton`` queries), then bisects the segment from the last point to ``u*`` (up to
   ``segment_steps`` queries): a curved boundary puts the linear optimum on the wrong side,
   and these steps find the nearest counterexample near it. Measured on the tune MLP with
   30 features (``benchmarks/blackbox_budget.py``): at 250 queries the median radius /
   reference fell from 1.17 to 1.02 under Linf and from 1.37 to 1.02 under L2;
5. under L2, where every mutable coordinate moved the margin (a smooth model) and a round
   that missed the linear optimum gained less than ``stall_gain`` of the radius, tries
   shorter moves towards that optimum (the shares ``damped`` of the way from ``b``), with
   one Newton step where none was a counterexample (:func:`damped_steps`). Near a local
   optimum on a curved boundary the full step lands where the margin is large, Newton's
   way back ends barely inside the radius held, and the rounds crawl (measured: 0.04% a
   round on the tune MLP with 30 features); a quarter of the way, the curvature costs a
   sixteenth as much. On that MLP under L2 (40 inputs, against the white box at 3,000
   passes, seeds 0-2), p90 of radius / reference 1.09 -> 1.04 at 250 and 500 queries,
   1.06-1.08 -> 1.04 at 1,000, median 1.015 -> 1.011-1.013; on the tune MLP with 10
   features the change was within the spread of the seeds. Under Linf it made both tune
   MLPs' tails worse (p90 at 1,000 queries 1.009 -> 1.015 and 1.037 -> 1.058), and on
   trees, whose differences now and then cross a threshold, worse too: it is off there.

A margin that does not move under the differences (a tree ensemble's plateaus, a label-only
model) ends the stage for that input after one estimate, which costs ``d`` queries and the
bisection's few. Each round costs about ``d + 16`` queries (``2·len(damped)`` more where it
stalls); the stage repeats while a round
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

#: Shares of the way to a missed linear optimum tried where a round stalls (chosen on the
#: tune MLPs; 0.3 / 0.1, or a stall threshold of 5%, were no better).
DAMPED = (0.5, 0.25, 0.125)
#: On a model of three or more classes, step to the nearest of the linearised boundaries
#: between the label and each other class (:func:`nearest_class_plane`), not only the
#: runner-up's at the boundary point; where every mutable coordinate moved the margin (a
#: smooth model), untargeted statements only. See the module docstring.
NEAREST_CLASS = True


def unit_step(threat_p: float, g: torch.Tensor) -> torch.Tensor:
    """The smallest step ``(k, d)`` in the threat's norm that raises the linear margin with
    gradient ``g`` ``(k, d)`` by one: L2 ``g / ||g||²``, Linf ``sign(g) / ||g||_1``, L1
    ``e_j / g_j`` on the coordinate of largest ``|g_j|`` (zero where ``g`` is)."""
    if threat_p == math.inf:
        return torch.sign(g) / g.abs().sum(1).clamp_min(1e-30).unsqueeze(1)
    if threat_p == 2.0:
        return g / (g * g).sum(1).clamp_min(1e-30).unsqueeze(1)
    j = g.abs().argmax(1, keepdim=True)
    top = g.gather(1, j)
    inverse = torch.where(top != 0, 1 / top.where(top != 0, torch.ones_like(top)),
                          torch.zeros_like(top))
    return torch.zeros_like(g).scatter(1, j, inverse)


def newton_steps(oracle: ScaledOracle, idx: np.ndarray, u: torch.Tensor,
                 margin: torch.Tensor, step: torch.Tensor, count: int,
                 overshoot: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Up to ``count`` queries per input: from points ``u`` ``(k, d)`` that are not
    counterexamples, with measured margins ``margin`` ``(k,)``, move by ``-(1 + overshoot)
    · margin · step`` (``step`` from :func:`unit_step`: the linear margin falls by one per
    unit) until the point is a counterexample or the margin is unknown. Returns the last
    points ``(k, d)`` and whether each is a counterexample ``(k,)`` (the oracle keeps the
    counterexamples)."""
    u, margin = u.clone(), margin.clone()
    hit = torch.zeros(len(idx), dtype=torch.bool, device=u.device)
    for _ in range(count):
        go = ~hit & torch.isfinite(margin) & (margin > 0)
        go &= torch.as_tensor(oracle.remaining(idx) >= 1, device=u.device)
        if not go.any():
            break
        sel = torch.nonzero(go).reshape(-1)
        u[sel] = u[sel] - ((1 + overshoot) * margin[sel]).unsqueeze(1) * step[sel]
        adv, marg, _, _ = oracle.query(idx[sel.cpu().numpy()], u[sel].unsqueeze(1))
        hit[sel] = adv[:, 0]
        margin[sel] = marg[:, 0]
    return u, hit


def damped_steps(oracle: ScaledOracle, idx: np.ndarray, b: torch.Tensor, target: torch.Tensor,
                 step: torch.Tensor, shares: tuple[float, ...], overshoot: float
                 ) -> torch.Tensor:
    """Shorter moves towards a linear optimum that fell on the wrong side of a curved
    boundary: for each share ``a`` of ``shares``, the point ``b + a·(target - b)`` (``b``,
    ``target``, ``step`` ``(k, d)``); for the inputs none of whose points is a
    counterexample, one Newton step from each point, on its measured margin along ``step``.
    One or two requests of ``len(shares)`` queries per input. Returns whether each input met
    a counterexample ``(k,)`` (the oracle keeps them)."""
    a = torch.as_tensor(shares, dtype=b.dtype, device=b.device).reshape(1, -1, 1)
    trial = b.unsqueeze(1) + a * (target - b).unsqueeze(1)  # (k, s, d)
    adv, marg, _, asked = oracle.query(idx, trial)
    hit = adv.any(1)
    again = torch.as_tensor(asked, device=b.device) & ~hit & torch.isfinite(marg).all(1)
    if again.any():
        rows = torch.nonzero(again).reshape(-1)
        fixed = trial[rows] - ((1 + overshoot) * marg[rows]).unsqueeze(2) * step[rows].unsqueeze(1)
        adv2, _, _, _ = oracle.query(idx[rows.cpu().numpy()], fixed)
        hit[rows] = adv2.any(1)
    return hit


def bisect_segment(oracle: ScaledOracle, idx: np.ndarray, near: torch.Tensor,
                   far: torch.Tensor, steps: int) -> None:
    """Bisect, ``steps`` queries per input at most, the segments from ``near`` ``(k, d)``
    (not a counterexample) to ``far`` (a counterexample) for the point nearest ``near``
    that still changes the decision (the oracle keeps every counterexample it meets)."""
    oracle.bisect(idx, lambda pos, t: near[pos] + t.unsqueeze(1) * (far[pos] - near[pos]),
                  steps)


def difference_gradient(diff: torch.Tensor, moved: torch.Tensor, cols: torch.Tensor,
                        d: int) -> torch.Tensor:
    """Forward-difference gradient ``(k, d, *rest)`` from the differences ``diff``
    ``(k, c, *rest)`` that the moves ``moved`` ``(k, c)`` of the coordinates ``cols``
    ``(c,)`` made (signed: a move the box turned around divides by its own sign); 0 on the
    other coordinates and where a move was clipped to nothing."""
    step = moved.reshape(*moved.shape, *([1] * (diff.ndim - 2)))
    g = torch.zeros(diff.shape[0], d, *diff.shape[2:], dtype=diff.dtype, device=diff.device)
    g[:, cols] = torch.where(step.abs() > 0, diff / step.abs().clamp_min(1e-30) *
                             torch.sign(step), torch.zeros_like(diff))
    return g


def class_differences(scores: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``z_y - z_j`` for every class ``j`` at every probe: ``scores`` ``(k, m, K)`` (logits
    or log-probabilities), labels ``y`` ``(k,)`` -> ``(k, m, K)``, 0 at ``j = y``."""
    label = scores.gather(2, y.reshape(-1, 1, 1).expand(-1, scores.shape[1], 1))
    return label - scores


def nearest_class_plane(oracle: ScaledOracle, ids: np.ndarray, scores: torch.Tensor,
                        u_valid: torch.Tensor, cols: torch.Tensor, moved: torch.Tensor,
                        g: torch.Tensor, base: torch.Tensor, where: torch.Tensor
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """Of the linearised boundaries between the label and each other class ``j``
    (``z_y - z_j = 0``, each from the same forward differences), the one nearest the input
    in the threat's norm (``|c_j| / ||g_j||_*``, the dual norm), for the inputs ``ids``
    ``(k,)`` where ``where`` ``(k,)`` bool holds: their gradient ``g`` ``(k, d)`` and value
    ``base`` ``(k, 1)`` at the first probe replace the margin's (the runner-up's at the
    boundary point). ``scores`` ``(k, 1 + c, K)`` of the probes ``u_valid`` ``(k, 1 + c, d)``,
    the first one the boundary point, then one per mutable coordinate ``cols`` ``(c,)``
    moved by ``moved`` ``(k, c)``. Elsewhere ``g`` and ``base`` are returned unchanged."""
    k, d = g.shape
    y = oracle.y[torch.as_tensor(ids, device=g.device)]
    f = class_differences(scores, y)  # (k, 1 + c, K)
    gj = difference_gradient(f[:, 1:, :] - f[:, :1, :], moved, cols, d)  # (k, d, K)
    c = (gj * u_valid[:, :1, :].transpose(1, 2)).sum(1) - f[:, 0, :]  # (k, K)
    dual = oracle.threat.dual_norm(gj.transpose(1, 2).reshape(-1, d)).reshape(k, -1)
    # c_j < 0: the linearised f_j is positive at the input, which lies on the label's side
    reach = (c < 0) & (dual > 0) & torch.isfinite(c) & torch.isfinite(dual)
    dist = torch.where(reach, -c / dual.clamp_min(1e-30), torch.full_like(c, math.inf))
    dist = dist.scatter(1, y.reshape(k, 1), math.inf)
    nearest, j = dist.min(1)
    use = (torch.isfinite(nearest) & where).unsqueeze(1)
    g_near = gj.gather(2, j.reshape(k, 1, 1).expand(k, d, 1))[:, :, 0]
    base_near = f[:, 0, :].gather(1, j.reshape(k, 1))
    return torch.where(use, g_near, g), torch.where(use, base_near, base)


def round_cost(oracle: ScaledOracle) -> int:
    """Queries per input of a usual round of :func:`boundary_steps` at its defaults, ``d +
    16`` (``d`` the mutable features): the bisection to the boundary (up to 8), the
    difference probes (``d + 1``), the linear optimum (1) and, where it falls short,
    Newton's steps (up to 3) and the segment's bisection (up to 4), one of which is seldom
    spent; the damped moves, where a round stalls, come on top."""
    return int(oracle.mutable.sum()) + 16


def boundary_steps(oracle: ScaledOracle, rounds: int = 6, h: float = 1e-3,
                   overshoot: float = 0.02, min_gain: float = 0.005,
                   bisect_rtol: float = 0.02, newton: int = 3,
                   segment_steps: int = 4, damped: tuple[float, ...] = DAMPED,
                   stall_gain: float = 0.02) -> None:
    """Run the stage on every input holding a counterexample (its counterexamples are kept
    in ``oracle``): up to ``rounds`` rounds while a round gains ``min_gain`` of the radius,
    forward differences of ``h`` times the radius, and the ``damped`` shares (empty: none)
    where a round gains less than ``stall_gain``. See the module docstring."""
    n, d = oracle.n, oracle.d
    mutable = oracle.mutable
    cols = torch.nonzero(mutable).reshape(-1)
    live = oracle.holding().cpu().numpy()
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
        _, marg, u_valid, _, scores = oracle.query_scores(idx[sel],
                                                          probes[torch.as_tensor(sel)])
        base = marg[:, :1]
        moved = (u_valid[:, 1:, :] - u_valid[:, :1, :])[:, rows, cols]
        g = difference_gradient(marg[:, 1:] - base, moved, cols, d)
        flat = ~torch.isfinite(g).all(1) | (g.abs().sum(1) == 0)
        # every mutable coordinate moved the margin: a smooth model (on a tree a few
        # differences cross a threshold and the rest read zero)
        every = (g[:, cols] != 0).all(1) & ~flat
        if NEAREST_CLASS and oracle.statement.target is None and scores.shape[2] > 2:
            g, base = nearest_class_plane(oracle, idx[sel], scores, u_valid, cols, moved, g,
                                          base, every)
        smooth = every & (oracle.threat.p == 2.0)  # the damped moves: under L2 only
        oracle.plateau[idx[sel]] |= flat.cpu().numpy()
        g = torch.where(torch.isfinite(g), g, torch.zeros_like(g))
        bs = u_valid[:, 0, :]
        step = unit_step(oracle.threat.p, g)
        target = ((g * bs).sum(1) - base[:, 0]).unsqueeze(1) * step * (1 + overshoot)
        keep = (~flat).cpu().numpy() & (oracle.remaining(idx[sel]) >= 1)
        if keep.any():
            ks = np.flatnonzero(keep)
            tk = torch.as_tensor(ks, device=g.device)
            rows_k = idx[sel][ks]
            anchor = oracle.best_u[ti[torch.as_tensor(sel[ks], device=g.device)]]
            adv, marg_t, _, _ = oracle.query(rows_k, target[tk].unsqueeze(1))
            missed = np.flatnonzero(~adv[:, 0].cpu().numpy())
            if len(missed):  # the linear optimum fell short: Newton, then the segment
                tm = torch.as_tensor(missed, device=g.device)
                near, hit = newton_steps(oracle, rows_k[missed], target[tk][tm],
                                         marg_t[tm, 0], step[tk][tm], newton, overshoot)
                short = torch.nonzero(~hit).reshape(-1)
                if len(short):
                    bisect_segment(oracle, rows_k[missed][short.cpu().numpy()], near[short],
                                   anchor[tm][short], segment_steps)
                if damped:  # slow progress on a curved boundary: shorter moves along it
                    rows_m = rows_k[missed]
                    now = oracle.best_r[torch.as_tensor(rows_m, device=g.device)]
                    slow = 1 - now / oracle.threat.norm(anchor[tm]) < stall_gain
                    slow = (slow & smooth[tk][tm]).cpu().numpy()
                    if slow.any():
                        sl = tm[torch.as_tensor(slow, device=g.device)]
                        damped_steps(oracle, rows_m[slow], bs[tk][sl], target[tk][sl],
                                     step[tk][sl], damped, overshoot)
        after = oracle.best_r[ti]
        gain = (before - after) / before
        stop = np.ones(len(idx), dtype=bool)
        stop[sel[keep]] = (gain[torch.as_tensor(sel[keep])] < min_gain).cpu().numpy()
        live[idx[stop]] = False
        live &= oracle.remaining(np.arange(n)) >= len(cols) + 8
