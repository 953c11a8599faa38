"""Exact minimal perturbation of affine classifiers under relations between features.

With linear relations (``A x <= b``, ``C x == d`` in raw units) the nearest point of each
class's half-space is no longer a closed form: per input ``x`` of class ``y`` and each other
class ``j``, with ``u = (x' - x) / scale``,

    min ||u||_p  s.t.  c_j . u >= m_j,  lo <= u <= hi,  relations at x + u * scale,

an LP for Linf and L1 (epigraph variables) and a convex QP for L2, each solved by HiGHS. The
radius is the minimum over ``j``; classes are solved in increasing order of the bound that
ignores box and relations (``m_j / ||c_j||_*``) and only while that bound can beat the best so
far. As in the closed form, the margin is over-shot by a relative ``1e-9`` so that the
counterexample strictly changes the argmax, and the optimum is reported as the radius and
its lower bound. Spaces with mutable integer, binary or one-hot features go to the MILP of
:mod:`robustscope.solvers.exact.linear.milp` instead.
"""

from __future__ import annotations

import math
import time

import numpy as np
import scipy.sparse as sp
import torch

from robustscope.core.space import FeatureSpace
from robustscope.core.statuses import ATTACKED, CENSORED, EXACT
from robustscope.solvers.milp.highs import solve_lp
from robustscope.solvers.milp.relation_rows import relation_rows
from robustscope.solvers.output import SolverOutput
from robustscope.threats.lp import LpThreat

#: Relative over-shoot of the margin (as in the closed form of ``exact_linear``).
MARGIN_OVERSHOOT = 1e-9
#: HiGHS primal and dual feasibility tolerances of the LPs (tighter than HiGHS's 1e-7
#: default, so that a solution sits within the relations' own tolerance).
LP_FEASIBILITY_TOLERANCE = 1e-10


def linear_radius_lp(weights: np.ndarray, bias: np.ndarray, x: np.ndarray, y: np.ndarray,
                     space: FeatureSpace, threat: LpThreat, target: int | None = None,
                     time_limit: float = 60.0) -> SolverOutput:
    """Exact minimal ``||u||_p`` that changes ``argmax(W x' + b)`` away from ``y`` (or to
    ``target``, binary models) inside the box and the relations of ``space``.

    ``weights`` ``(k, d)``, ``bias`` ``(k,)``; ``x`` ``(n, d)`` raw units; ``y`` ``(n,)`` the
    current predictions. Returns the radii (``inf`` where no valid input changes the
    decision), lower bounds (= radii), counterexamples and reached classes.
    """
    t0 = time.perf_counter()
    w = np.asarray(weights, dtype=np.float64)
    b = np.asarray(bias, dtype=np.float64)
    flat = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    n, (k, d) = len(flat), w.shape
    lo_t, hi_t = space.delta_bounds(torch.as_tensor(flat))
    lo_all, hi_all = lo_t.numpy(), hi_t.numpy()
    radius = np.full(n, np.inf)
    lower = np.full(n, np.inf)
    reached = np.full(n, -1, dtype=np.int64)
    u_out = np.zeros((n, d))
    dual_p = {1.0: math.inf, 2.0: 2.0, math.inf: 1.0}[threat.p]
    for i in range(n):
        yi = int(y[i])
        logits = w @ flat[i] + b
        classes = [target] if target is not None else [j for j in range(k) if j != yi]
        movable = (hi_all[i] - lo_all[i]) > 0
        bounds = []
        for j in classes:
            c = (w[j] - w[yi]) * space.scale
            margin = (logits[yi] - logits[j]) * (1 + MARGIN_OVERSHOOT)
            dual = np.linalg.norm(np.where(movable, c, 0.0), ord=dual_p)
            bounds.append((max(margin, 0.0) / dual if dual > 0 else math.inf, j, c, margin))
        for bound, j, c, margin in sorted(bounds, key=lambda t: t[0]):
            if not bound < radius[i]:
                break
            u, solved = _solve_class(c, margin, flat[i], lo_all[i], hi_all[i], space, threat,
                                     time_limit)
            if not solved:  # HiGHS gave no answer: only the relaxed bound is certain
                lower[i] = min(lower[i], bound)
            if u is None:
                continue
            r = float(np.linalg.norm(u, ord=threat.p))
            if r < radius[i]:
                radius[i], reached[i], u_out[i] = r, j, u
    x_adv = space.apply_delta(torch.as_tensor(flat), torch.as_tensor(u_out)).reshape(np.shape(x))
    lower = np.minimum(lower, radius)
    finite = np.isfinite(radius)
    status = np.where(finite, EXACT, CENSORED)
    status[finite & (lower < radius)] = ATTACKED
    return SolverOutput(x_adv=x_adv, radius=radius, lower_bound=lower,
                        status=status.astype(object), adv_prediction=reached,
                        forward_queries=np.zeros(n, dtype=np.int64),
                        seconds=np.full(n, (time.perf_counter() - t0) / max(n, 1)))


def _solve_class(c: np.ndarray, margin: float, x0: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                 space: FeatureSpace, threat: LpThreat, time_limit: float
                 ) -> tuple[np.ndarray | None, bool]:
    """``(u, solved)``: the nearest ``u`` (d,) with ``c . u >= margin`` in the box and the
    relations (``None`` where there is none); ``solved`` is False where HiGHS stopped
    without an answer (time limit, numerical trouble)."""
    d = len(c)
    extra = {math.inf: 1, 1.0: d, 2.0: 0}[threat.p]
    n_cols = d + extra
    blocks = [sp.csr_matrix(np.concatenate([c, np.zeros(extra)])[None, :])]
    row_lo, row_hi = [np.array([margin])], [np.array([np.inf])]
    rel, rlo, rhi = relation_rows(space.relations, np.arange(d), x0, space.scale, n_cols)
    blocks.append(rel)
    row_lo.append(rlo)
    row_hi.append(rhi)
    if extra:  # epigraph: -t <= u <= t (one t for Linf, one per feature for L1)
        eye = sp.identity(d, format="csr")
        t_cols = sp.csr_matrix(np.ones((d, 1))) if extra == 1 else eye
        blocks += [sp.hstack([eye, -t_cols]), sp.hstack([-eye, -t_cols])]
        row_lo += [np.full(2 * d, -np.inf)]
        row_hi += [np.zeros(2 * d)]
    matrix = sp.vstack(blocks, format="csr")
    cost = np.concatenate([np.zeros(d), np.ones(extra)])
    col_lo = np.concatenate([lo, np.zeros(extra)])
    col_hi = np.concatenate([hi, np.full(extra, np.inf)])
    quadratic = np.concatenate([np.full(d, 2.0), np.zeros(extra)]) if extra == 0 else None
    sol = solve_lp(cost, matrix, np.concatenate(row_lo), np.concatenate(row_hi), col_lo,
                   col_hi, LP_FEASIBILITY_TOLERANCE, quadratic=quadratic, time_limit=time_limit)
    if sol.status != "optimal":
        return None, sol.status == "infeasible"
    return np.clip(sol.values[:d], lo, hi), True
