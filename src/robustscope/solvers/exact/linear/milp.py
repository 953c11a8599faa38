"""Exact minimal perturbation of affine classifiers over mixed-type features (a MILP per class).

With integer, binary or one-hot (categorical) features the nearest point of a class's
half-space is a mixed-integer program. Per input ``x`` of class ``y`` and each other class
``j`` (classes in increasing order of the bound that ignores box, types and relations, and
only while that bound can beat the best so far):

    min ||u||_p  s.t.  (W_j - W_y) . delta >= z_y - z_j,  x + delta in the box,
                       delta_i integer for integer / binary / categorical features,
                       sum of delta over each one-hot group = 0 (one arm stays on),
                       delta_i = 0 for immutable features,  relations at x + delta,

with ``u = delta / scale`` the scaled perturbation. A program column is ``delta_i`` (raw
units) for a discrete feature, so that integrality is a column's, and ``u_i`` for a real one.
Linf and L1 are linear objectives (epigraph columns); L2 is minimised through tangent cuts of
``||u||_2`` (outer approximation: each MILP's optimum is a lower bound, the cut at its
solution is added until the bound meets the solution's norm within :data:`L2_CUT_RTOL`, or
:data:`L2_MAX_CUTS` rounds, after which the bracket stays open). Every program goes to HiGHS
through :mod:`robustscope.solvers.milp.highs`. The margin is over-shot by a relative ``1e-9``
(as the closed form); integer columns are rounded and the real columns solved again with the
integers fixed where rounding loses the margin. The lower bound is HiGHS's dual bound; status
``exact`` where every class is settled (optimal, or pruned by the bound).
"""

from __future__ import annotations

import math
import time

import numpy as np
import scipy.sparse as sp
import torch

from robustscope.core.space import FeatureSpace
from robustscope.core.statuses import ATTACKED, CENSORED, EXACT
from robustscope.solvers.milp.highs import kept_highs, pass_model, run_mip, solve_lp
from robustscope.solvers.milp.relation_rows import relation_rows
from robustscope.solvers.output import SolverOutput
from robustscope.threats.lp import LpThreat

#: Relative over-shoot of the margin (as in the closed form of ``exact_linear``).
MARGIN_OVERSHOOT = 1e-9
#: HiGHS options of the MILPs: one thread (searches run in processes), tight feasibility and
#: integrality, and a relative gap far below ``BRACKET_RTOL`` so that an optimum is exact.
MILP_OPTIONS = (("threads", 1), ("mip_rel_gap", 1e-9), ("mip_abs_gap", 0.0),
                ("mip_feasibility_tolerance", 1e-9), ("primal_feasibility_tolerance", 1e-10),
                ("dual_feasibility_tolerance", 1e-10), ("presolve", "on"))
#: L2: the tangent-cut rounds stop when the MILP's bound is within this relative gap of its
#: solution's norm (well inside ``BRACKET_RTOL``); a bracket this narrow is ``exact``.
L2_CUT_RTOL = 1e-6
#: L2: at most this many tangent-cut rounds per (input, class).
L2_MAX_CUTS = 60
#: Feature types whose program column is integral.
DISCRETE_TYPES = ("integer", "binary", "categorical")


def linear_radius_milp(weights: np.ndarray, bias: np.ndarray, x: np.ndarray, y: np.ndarray,
                       space: FeatureSpace, threat: LpThreat, target: int | None = None,
                       time_limit: float = 60.0) -> SolverOutput:
    """Exact minimal ``||u||_p`` that changes ``argmax(W x' + b)`` away from ``y`` (or to
    ``target``, binary models) over the valid inputs of a space with discrete features.

    ``weights`` ``(k, d)``, ``bias`` ``(k,)``; ``x`` ``(n, d)`` raw units, valid in ``space``
    (integers integral, one-hot groups one-hot); ``y`` ``(n,)`` the current predictions;
    ``time_limit`` seconds per MILP. Returns radii (``inf`` where no valid input changes the
    decision), lower bounds (HiGHS's dual bounds; equal to the radius where exact),
    counterexamples, reached classes and statuses (``exact`` where every class was settled,
    ``attacked`` where a MILP stopped early or the L2 cuts did not close).
    """
    t0 = time.perf_counter()
    w = np.asarray(weights, dtype=np.float64)
    b = np.asarray(bias, dtype=np.float64)
    flat = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    n, (k, d) = len(flat), w.shape
    discrete = space.mutable & np.isin(space.types, DISCRETE_TYPES)
    # x'_i = x_i + step_i * v_i: raw steps for discrete columns, scaled ones for real columns
    step = np.where(discrete, 1.0, space.scale)
    to_u = step / space.scale  # u_i = to_u_i * v_i
    radius = np.full(n, np.inf)
    lower = np.full(n, np.inf)
    reached = np.full(n, -1, dtype=np.int64)
    delta_out = np.zeros((n, d))
    dual_p = {1.0: math.inf, 2.0: 2.0, math.inf: 1.0}[threat.p]
    for i in range(n):
        col_lo, col_hi = _column_bounds(space, flat[i], discrete, step)
        movable = col_hi - col_lo > 0
        yi = int(y[i])
        logits = w @ flat[i] + b
        classes = [target] if target is not None else [j for j in range(k) if j != yi]
        bounds = []
        for j in classes:
            c = (w[j] - w[yi]) * space.scale  # gain of z_j - z_y per unit of u
            margin = (logits[yi] - logits[j]) * (1 + MARGIN_OVERSHOOT)
            dual = np.linalg.norm(np.where(movable, c, 0.0), ord=dual_p)
            bounds.append((max(margin, 0.0) / dual if dual > 0 else math.inf, j, c, margin))
        settled_below = np.inf  # smallest lower bound of a class left open
        for bound, j, c, margin in sorted(bounds, key=lambda t: t[0]):
            if not bound < radius[i]:
                break
            program = _Program(c * to_u, margin, flat[i], col_lo, col_hi, discrete, step,
                               to_u, space, threat)
            v, low = program.solve(time_limit, radius[i])
            settled_below = min(settled_below, low)
            if v is None:
                continue
            r = float(np.linalg.norm(v * to_u, ord=threat.p))
            if r < radius[i]:
                radius[i], reached[i], delta_out[i] = r, j, v * step
        lower[i] = min(radius[i], settled_below)
    x_adv = torch.as_tensor(flat + delta_out).reshape(np.shape(x))
    finite = np.isfinite(radius)
    with np.errstate(invalid="ignore"):  # inf - inf where no class is reachable
        gap = np.where(finite, radius - np.minimum(lower, radius), np.inf)
    closed = finite & (gap <= L2_CUT_RTOL * radius)
    status = np.where(closed, EXACT, np.where(finite, ATTACKED, CENSORED))
    status[~finite & (lower < np.inf)] = CENSORED
    return SolverOutput(x_adv=x_adv, radius=radius, lower_bound=np.minimum(lower, radius),
                        status=status.astype(object), adv_prediction=reached,
                        forward_queries=np.zeros(n, dtype=np.int64),
                        seconds=np.full(n, (time.perf_counter() - t0) / max(n, 1)))


def _column_bounds(space: FeatureSpace, x0: np.ndarray, discrete: np.ndarray,
                   step: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bounds ``(d,)`` of the program columns ``v`` at the input ``x0``: the box, integral
    bounds for discrete columns, ``[0, 0]`` for immutable features."""
    lo = (space.lower - x0) / step
    hi = (space.upper - x0) / step
    lo = np.where(discrete, np.ceil(lo - 1e-9), lo)
    hi = np.where(discrete, np.floor(hi + 1e-9), hi)
    lo = np.where(space.mutable, np.minimum(lo, 0.0), 0.0)
    hi = np.where(space.mutable, np.maximum(hi, 0.0), 0.0)
    return lo, hi


class _Program:
    """One (input, class) MILP: columns ``v`` (d,) then the norm's epigraph columns."""

    def __init__(self, gain: np.ndarray, margin: float, x0: np.ndarray, col_lo: np.ndarray,
                 col_hi: np.ndarray, discrete: np.ndarray, step: np.ndarray, to_u: np.ndarray,
                 space: FeatureSpace, threat: LpThreat) -> None:
        d = len(gain)
        self.d, self.p, self.to_u, self.discrete = d, threat.p, to_u, discrete
        self.gain, self.margin = gain, margin
        extra = {math.inf: 1, 1.0: d, 2.0: 1}[threat.p]
        self.n_cols = d + extra
        blocks = [sp.csr_matrix(np.concatenate([gain, np.zeros(extra)])[None, :])]
        row_lo, row_hi = [np.array([margin])], [np.array([np.inf])]
        if space.relations is not None and not space.relations.is_linear_empty:
            rel, rlo, rhi = relation_rows(space.relations, np.arange(d), x0, step, self.n_cols)
            blocks.append(rel)
            row_lo.append(rlo)
            row_hi.append(rhi)
        for g in space.groups:  # one arm on before and after: the group's steps sum to zero
            row = np.zeros(self.n_cols)
            row[g] = 1.0
            blocks.append(sp.csr_matrix(row[None, :]))
            row_lo.append(np.zeros(1))
            row_hi.append(np.zeros(1))
        scaled = sp.diags(to_u, format="csr")
        if threat.p != 2.0:  # epigraph: -t <= u <= t (one t for Linf, one per feature for L1)
            t_cols = sp.csr_matrix(np.ones((d, 1))) if extra == 1 else sp.identity(d)
            blocks += [sp.hstack([scaled, -t_cols]), sp.hstack([-scaled, -t_cols])]
            row_lo.append(np.full(2 * d, -np.inf))
            row_hi.append(np.zeros(2 * d))
        self.matrix = sp.vstack(blocks, format="csr")
        self.row_lo, self.row_hi = np.concatenate(row_lo), np.concatenate(row_hi)
        self.col_lo = np.concatenate([col_lo, np.zeros(extra)])
        self.col_hi = np.concatenate([col_hi, np.full(extra, np.inf)])
        self.cost = np.concatenate([np.zeros(d), np.ones(extra)])
        self.integrality = np.concatenate([discrete, np.zeros(extra, dtype=bool)])

    def norm(self, v: np.ndarray) -> float:
        return float(np.linalg.norm(v * self.to_u, ord=self.p))

    def solve(self, time_limit: float, best: float) -> tuple[np.ndarray | None, float]:
        """``(v, lower)``: the best valid columns ``v`` (d,) found (``None`` where none beats
        ``best`` or none exists) and a certified lower bound of this class's radius (``inf``
        where the class is infeasible, or at least ``best`` where pruned by it)."""
        if self.p == 2.0:
            return self._solve_l2(time_limit, best)
        h = kept_highs(MILP_OPTIONS)
        pass_model(h, self.matrix, self.row_lo, self.row_hi, self.col_lo, self.col_hi,
                   self.cost, integrality=self.integrality)
        res = run_mip(h, time_limit, objective_bound=best if np.isfinite(best) else None)
        return self._read(res, best)

    def _read(self, res, best: float) -> tuple[np.ndarray | None, float]:
        if res.status == "infeasible":  # no valid point, or none below the objective bound
            return None, best
        v = None if res.values is None else self._repair(res.values[:self.d])
        dual = res.dual_bound if np.isfinite(res.dual_bound) else -np.inf
        if res.status == "optimal":
            return v, max(min(dual, res.objective) if dual > -np.inf else res.objective, 0.0)
        return v, min(max(dual, 0.0), best)  # stopped early: HiGHS's bound, if it gave one

    def _repair(self, v: np.ndarray) -> np.ndarray | None:
        """Integer columns rounded; where that loses the margin or a row, the real columns
        solved again (LP) with the integers fixed. ``None`` where no repair holds."""
        v = np.clip(v, self.col_lo[:self.d], self.col_hi[:self.d])
        v[self.discrete] = np.round(v[self.discrete])
        if self._holds(v):
            return v
        if not (~self.discrete).any():
            return None
        lo, hi = self.col_lo.copy(), self.col_hi.copy()
        lo[:self.d][self.discrete] = hi[:self.d][self.discrete] = v[self.discrete]
        cost, quad = self.cost, None
        if self.p == 2.0:  # the real columns' squared norm
            cost = np.zeros(self.n_cols)
            quad = np.concatenate([2.0 * self.to_u ** 2, np.zeros(self.n_cols - self.d)])
        sol = solve_lp(cost, self.matrix, self.row_lo, self.row_hi, lo, hi, 1e-10,
                       quadratic=quad)
        if sol.status != "optimal":
            return None
        fixed = np.clip(sol.values[:self.d], lo[:self.d], hi[:self.d])
        return fixed if self._holds(fixed) else None

    def _holds(self, v: np.ndarray) -> bool:
        """The margin row holds exactly (the model's own check comes after, in the
        search's verification); other rows within 1e-9."""
        if not float(self.gain @ v) > self.margin / (1 + MARGIN_OVERSHOOT):
            return False
        full = np.concatenate([v, np.zeros(self.n_cols - self.d)])
        if self.p != 2.0:  # epigraph rows are met by choosing t; check the others only
            n_norm = 2 * self.d
            rows = self.matrix[:-n_norm] if n_norm else self.matrix
            lo, hi = self.row_lo[:-n_norm], self.row_hi[:-n_norm]
        else:
            rows, lo, hi = self.matrix, self.row_lo, self.row_hi
        val = rows @ full
        return bool(((val >= lo - 1e-9) & (val <= hi + 1e-9)).all())

    def _solve_l2(self, time_limit: float, best: float) -> tuple[np.ndarray | None, float]:
        """Outer approximation of ``min ||u||_2``: ``t >= g . u`` for unit vectors ``g``
        (tangents of the norm), starting from ``t >= |u_i|``; the cut at each MILP solution is
        added until the bound (the MILP's optimum) meets the solution's norm."""
        d = self.d
        base = self.matrix
        cuts = [sp.hstack([sp.diags(self.to_u), -sp.csr_matrix(np.ones((d, 1)))]),
                sp.hstack([-sp.diags(self.to_u), -sp.csr_matrix(np.ones((d, 1)))])]
        cut_rows = sp.vstack(cuts, format="csr")
        h = kept_highs(MILP_OPTIONS)
        deadline = time.perf_counter() + time_limit
        best_v, best_norm, lower = None, best, 0.0
        for _ in range(L2_MAX_CUTS):
            matrix = sp.vstack([base, cut_rows], format="csr")
            row_lo = np.concatenate([self.row_lo, np.full(cut_rows.shape[0], -np.inf)])
            row_hi = np.concatenate([self.row_hi, np.zeros(cut_rows.shape[0])])
            pass_model(h, matrix, row_lo, row_hi, self.col_lo, self.col_hi, self.cost,
                       integrality=self.integrality)
            left = deadline - time.perf_counter()
            if left <= 0:
                return best_v, lower
            res = run_mip(h, left, objective_bound=best_norm if np.isfinite(best_norm) else None)
            if res.status == "infeasible":  # nothing below the best norm: it is optimal
                return best_v, best_norm if best_v is not None else best
            if res.status != "optimal":
                return best_v, lower
            lower = max(lower, res.dual_bound if np.isfinite(res.dual_bound) else 0.0)
            v = self._repair(res.values[:d])
            if v is not None and self.norm(v) < best_norm:
                best_v, best_norm = v, self.norm(v)
            if best_v is not None and best_norm <= lower * (1 + L2_CUT_RTOL):
                return best_v, min(lower, best_norm)
            u = res.values[:d] * self.to_u
            size = np.linalg.norm(u)
            if size == 0:
                return best_v, lower
            cut = np.concatenate([u / size * self.to_u, [-1.0]])
            cut_rows = sp.vstack([cut_rows, sp.csr_matrix(cut[None, :])], format="csr")
        return best_v, lower
