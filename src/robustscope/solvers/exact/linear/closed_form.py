"""Exact minimal perturbation of affine classifiers, multiclass, with feature bounds.

For an input ``x`` of class ``y`` and each other class ``j``, the decision can move to ``j``
when ``c_j . u >= m_j``, with ``u = (x' - x) / scale`` the scaled perturbation,
``c_j = (W_j - W_y) * scale`` and ``m_j = z_y - z_j`` the logit margin. Each such half-space,
intersected with the box of allowed ``u`` (feature bounds; immutable features fixed), has a
closed-form nearest point:

* Linf and L2: ``u_i = sign(c_i) * min(t * w_i, cap_i)``; the gain is piecewise linear in
  ``t`` with breakpoints ``cap_i / w_i`` (Linf: ``w_i = 1``; L2: ``w_i = |c_i|``, the KKT
  multiplier), found by sorting.
* L1: a fractional knapsack: spend the budget on features in decreasing ``|c_i|``.

The radius is the minimum over ``j``. Everything runs batched in float64, no LP.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from robustscope.core.errors import InputError
from robustscope.core.space import FeatureSpace
from robustscope.core.statuses import CENSORED, EXACT
from robustscope.solvers.output import SolverOutput
from robustscope.threats.lp import LpThreat

#: Relative over-shoot of the margin, so that the counterexample strictly changes the argmax.
MARGIN_OVERSHOOT = 1e-9
#: Largest number of (input, class, feature) entries processed at once.
CHUNK_ELEMENTS = 4_000_000


def exact_linear_radius(
    weights: np.ndarray,
    bias: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    space: FeatureSpace,
    threat: LpThreat,
    target: int | None = None,
) -> SolverOutput:
    """Exact minimal ``||u||_p`` that changes ``argmax(W x' + b)`` away from ``y`` (or to
    ``target`` for binary models).

    ``x``: (n, d) float64 in original units; ``y``: (n,) class indices, assumed to be the
    current prediction. Returns radii in the threat's norm of the scaled perturbation
    (``lower_bound`` = ``radius``: the closed form is a certificate; ``inf`` where no valid
    input changes the decision), the counterexamples (``x_adv``, overshooting the boundary by
    a relative ``1e-9`` of the margin) and the class each reaches (``adv_prediction``).
    With linear relations between features (``space.relations``) the radius is an LP / QP per
    class instead (:mod:`robustscope.solvers.exact.linear.lp`); with mutable integer, binary
    or one-hot features a MILP per class (:mod:`robustscope.solvers.exact.linear.milp`).
    """
    has_relations = space.relations is not None and not space.relations.is_linear_empty
    if has_relations or space.has_discrete:
        if target is not None and np.shape(weights)[0] > 2:
            raise InputError("the exact linear solver takes a target class only for binary "
                             "models; use solver='minnorm' for targeted multiclass statements")
        if space.has_discrete:
            from robustscope.solvers.exact.linear.milp import linear_radius_milp

            return linear_radius_milp(weights, bias, x, y, space, threat, target)
        from robustscope.solvers.exact.linear.lp import linear_radius_lp

        return linear_radius_lp(weights, bias, x, y, space, threat, target)
    t0 = time.perf_counter()
    w = torch.as_tensor(weights, dtype=torch.float64)
    b = torch.as_tensor(bias, dtype=torch.float64)
    xt = torch.as_tensor(np.asarray(x, dtype=np.float64).reshape(len(x), -1))
    yt = torch.as_tensor(np.asarray(y), dtype=torch.int64)
    k, d = w.shape
    if target is not None and k > 2:
        raise InputError("the exact linear solver takes a target class only for binary models; "
                         "use solver='minnorm' for targeted multiclass statements")
    n = xt.shape[0]
    radius = np.full(n, np.inf)
    reached = np.full(n, -1, dtype=np.int64)
    u_out = np.zeros((n, d))
    per_row = max(1, (k - 1) * d)
    chunk = max(1, CHUNK_ELEMENTS // per_row)
    for start in range(0, n, chunk):
        sl = slice(start, min(n, start + chunk))
        r, j, u = _solve_chunk(w, b, xt[sl], yt[sl], space, threat)
        radius[sl], reached[sl], u_out[sl] = r, j, u
    x_adv = space.apply_delta(xt, torch.as_tensor(u_out)).reshape(np.shape(x))
    finite = np.isfinite(radius)
    status = np.where(finite, EXACT, CENSORED)
    return SolverOutput(x_adv=x_adv, radius=radius, lower_bound=radius.copy(),
                        status=status.astype(object), adv_prediction=reached,
                        forward_queries=np.zeros(n, dtype=np.int64),
                        seconds=np.full(n, (time.perf_counter() - t0) / max(n, 1)))


def _solve_chunk(w, b, x, y, space: FeatureSpace, threat: LpThreat):
    n, d = x.shape
    k = w.shape[0]
    lo, hi = space.delta_bounds(x)  # (n, d)
    scale = torch.as_tensor(space.scale, dtype=torch.float64)
    logits = x @ w.T + b  # (n, k)
    rows = torch.arange(n)
    others = torch.arange(k).expand(n, k)[torch.arange(k).expand(n, k) != y[:, None]]
    others = others.reshape(n, k - 1)  # (n, k-1)
    c = (w[others] - w[y][:, None, :]) * scale  # (n, k-1, d): gain of z_j - z_y per unit u
    margin = logits.gather(1, y[:, None]) - logits.gather(1, others)  # (n, k-1), > 0
    margin = margin * (1 + MARGIN_OVERSHOOT)
    cap = torch.where(c > 0, hi[:, None, :], -lo[:, None, :])  # room in the useful direction
    a = torch.where(cap > 0, c.abs(), torch.zeros_like(c))  # features that cannot move: no gain
    # Ignoring the bounds gives a lower bound per class (closed form, the dual norm); classes
    # are solved exactly in increasing order of it, and only while it can beat the best so far.
    dual = torch.linalg.vector_norm(a, ord={1.0: math.inf, 2.0: 2.0, math.inf: 1.0}[threat.p],
                                    dim=-1)
    lower = torch.where(dual > 0, margin.clamp_min(0) / dual, torch.full_like(margin, math.inf))
    order = lower.argsort(dim=1)
    best_norm = torch.full((n,), math.inf, dtype=torch.float64)
    best_pos = torch.zeros(n, dtype=torch.int64)
    best_v = torch.zeros(n, d, dtype=torch.float64)
    for t in range(k - 1):
        pos = order[:, t]
        todo = torch.nonzero(lower[rows, pos] < best_norm).reshape(-1)
        if len(todo) == 0:
            break
        p = pos[todo]
        norm, v = _solve(a[todo, p], cap[todo, p], margin[todo, p], threat)
        better = norm < best_norm[todo]
        where = todo[better]
        best_norm[where], best_pos[where], best_v[where] = norm[better], p[better], v[better]
    u = torch.sign(c[rows, best_pos]) * best_v
    u = torch.where(torch.isfinite(best_norm)[:, None], u, torch.zeros_like(u))
    return best_norm.numpy(), others[rows, best_pos].numpy(), u.numpy()


def _solve(a, cap, margin, threat: LpThreat):
    """Exact nearest point of one half-space per row: gains ``a`` (m, d), room ``cap``
    (m, d), margins (m,). Returns the norm (m,) and magnitudes ``v`` (m, d)."""
    if threat.p == 1.0:
        norm, v = _l1_knapsack(a, cap, margin)
    else:
        norm, v = _breakpoint_solve(a, cap, margin, l2=threat.p == 2.0)
    return torch.where(margin <= 0, torch.zeros_like(norm), norm), v


def _breakpoint_solve(a, cap, margin, l2: bool):
    """Smallest ``t`` with ``sum_i a_i min(t w_i, cap_i) >= margin``; Linf (w = 1) or L2
    (w = a). Returns the norm and the magnitudes ``v_i = min(t w_i, cap_i)``."""
    slope_w = a if l2 else torch.ones_like(a)
    with np.errstate(all="ignore"):
        brk = torch.where(slope_w > 0, cap / slope_w, torch.full_like(cap, math.inf))
        useful = a > 0
        brk = torch.where(useful, brk, torch.full_like(brk, math.inf))
        gain_sat = torch.where(useful, a * cap, torch.zeros_like(a))  # gain once saturated
        slope = torch.where(useful, a * slope_w, torch.zeros_like(a))  # d gain / d t before
    order = brk.argsort(dim=-1)
    s = brk.gather(-1, order)
    gs = gain_sat.gather(-1, order)
    sl = slope.gather(-1, order)
    sat_before = _exclusive_cumsum(gs)  # gain of features saturated strictly before k
    slope_from = sl.flip(-1).cumsum(-1).flip(-1)  # slope of features not yet saturated
    with np.errstate(all="ignore"):
        reach = sat_before + s * slope_from  # gain at t = s_k
    ok = reach >= margin[..., None]  # NaN (inf * 0) compares False
    feasible = ok.any(-1)
    kfirst = ok.to(torch.int64).argmax(-1, keepdim=True)
    t = (margin[..., None] - sat_before.gather(-1, kfirst)) / slope_from.gather(-1, kfirst)
    t = t.squeeze(-1).clamp_min(0.0)
    t = torch.where(feasible, t, torch.full_like(t, math.inf))
    tt = torch.where(feasible, t, torch.zeros_like(t))[..., None]
    v = torch.minimum(tt * slope_w, cap)
    v = torch.where(a > 0, v, torch.zeros_like(v))
    if l2:
        norm = torch.linalg.vector_norm(v, dim=-1)
    else:
        norm = t
    norm = torch.where(feasible, norm, torch.full_like(norm, math.inf))
    return norm, v


def _l1_knapsack(a, cap, margin):
    """Fractional knapsack: fill features by decreasing ``a_i`` until the margin is met."""
    order = a.argsort(dim=-1, descending=True)
    a_s = a.gather(-1, order)
    cap_s = cap.gather(-1, order)
    useful = a_s > 0
    with np.errstate(all="ignore"):
        gain = torch.where(useful, a_s * cap_s, torch.zeros_like(a_s))
    before = _exclusive_cumsum(gain)
    ok = useful & (before + gain >= margin[..., None])
    feasible = ok.any(-1)
    kfirst = ok.to(torch.int64).argmax(-1, keepdim=True)
    idx = torch.arange(a.shape[-1]).expand_as(a_s)
    partial = (margin[..., None] - before.gather(-1, kfirst)) / a_s.gather(-1, kfirst)
    v_s = torch.where(idx < kfirst, cap_s, torch.zeros_like(cap_s))
    v_s = torch.where(idx == kfirst, partial.expand_as(v_s), v_s)
    v_s = torch.where(feasible[..., None] & useful, v_s, torch.zeros_like(v_s)).clamp_min(0.0)
    v = torch.zeros_like(v_s).scatter(-1, order, v_s)
    norm = torch.where(feasible, v.sum(-1), torch.full_like(margin, math.inf))
    return norm, v


def _exclusive_cumsum(v: torch.Tensor) -> torch.Tensor:
    """Sum of the entries strictly before each position along the last axis (inf-safe:
    ``cumsum - v`` would give ``inf - inf = nan`` for unbounded features)."""
    return torch.cat([torch.zeros_like(v[..., :1]), torch.cumsum(v, -1)[..., :-1]], dim=-1)
