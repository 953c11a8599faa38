"""Solving one goal's MILP of the tree solver, and turning its solution into a point.

:func:`solve_class` adds a goal's class-score rows to the rows of
:mod:`~robustscope.solvers.exact.trees.milp_rows` and solves the program with a
:class:`Backend`: ``highspy`` (:func:`run_highspy`, one kept HiGHS instance per worker thread
and option set, from :func:`robustscope.solvers.milp.highs.kept_highs`) or ``scipy``
(:func:`run_scipy`, ``scipy.optimize.milp``, the fallback where highspy is missing). Every
HiGHS call goes through :mod:`robustscope.solvers.milp.highs`; the options are the tree
solver's (:mod:`~robustscope.solvers.exact.trees.settings`). :func:`build_point` turns a
solution into a counterexample.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from robustscope.solvers.exact.trees import settings
from robustscope.solvers.exact.trees.milp_rows import Reduced
from robustscope.solvers.exact.trees.program import Program, construct
from robustscope.solvers.milp.highs import MipResult, kept_highs, pass_model, run_mip, scipy_milp


def build_point(prog: Program, x0: np.ndarray, res: Solve,
                 red: Reduced) -> np.ndarray:
    """The counterexample ``(d,)`` of a solution: every feature at the nearest valid value of
    the chosen cell, except the features in a relation, which take their column's value
    (moved into the cell's valid values when HiGHS left it on a cut within its tolerance)."""
    x = construct(prog, x0, res.p)
    if red.rel_feats is None or res.x_rel is None:
        return x
    for f, v, integral in zip(red.rel_feats, res.x_rel, red.rel_int, strict=True):
        preds = prog.feature_preds[f]
        if integral:
            v = float(np.round(v))
        if len(preds):
            left = res.p[preds] > 0.5
            if (~left).any():
                v = max(v, float(prog.pred_cut[preds[~left]].max()))
            if left.any():
                v = min(v, float(prog.pred_left[preds[left]].min()))
        x[f] = v
    return x


@dataclass
class Solve:
    """One program's answer, as the tree search reads it."""

    status: str              # "optimal", "infeasible", "time_limit", "error"
    objective: float         # incumbent objective (inf when none)
    dual_bound: float        # certified lower bound on the objective
    p: np.ndarray | None     # (n_pred,) predicate values of the incumbent (0/1)
    values: np.ndarray | None = None  # all column values of the incumbent
    x_rel: np.ndarray | None = None   # (k,) values of the relation columns (raw units)


@dataclass(frozen=True)
class Backend:
    """Which HiGHS interface runs the programs, and the HiGHS options it sets: ``options`` for
    feasibility programs, ``minimise_options`` for programs with an objective."""

    name: str
    options: tuple[tuple[str, object], ...]
    minimise_options: tuple[tuple[str, object], ...]

    def run(self, *args, minimise: bool = False, objective_bound: float | None = None,
            ) -> Solve:
        """Solve; ``objective_bound`` (highspy only; scipy's interface has no such option)
        lets HiGHS prune every node whose bound exceeds it from the start."""
        options = dict(self.minimise_options if minimise else self.options)
        if self.name == "highspy":
            return run_highspy(*args, options=options, objective_bound=objective_bound)
        return run_scipy(*args, options=options)


def backend_for(name: str, highs_options: dict | None, holds_relations: bool) -> Backend:
    """The backend ``name`` (``highspy`` or ``scipy``) with the run's HiGHS options:
    :data:`~robustscope.solvers.exact.trees.settings.HIGHS_OPTIONS` for feasibility programs,
    with :data:`~robustscope.solvers.exact.trees.settings.MINIMISE_OPTIONS` on top for
    minimisations, or ``highs_options`` for both. Under relations the primal and MIP
    feasibility tolerances are lowered to
    :data:`~robustscope.solvers.exact.trees.settings.REL_FEASIBILITY_TOLERANCE` (from HiGHS's
    1e-7 default where unset)."""
    opts = dict(settings.HIGHS_OPTIONS if highs_options is None else highs_options)
    minimise = dict(opts, **settings.MINIMISE_OPTIONS) if highs_options is None else dict(opts)
    if holds_relations:
        for chosen in (opts, minimise):
            for option in ("primal_feasibility_tolerance", "mip_feasibility_tolerance"):
                chosen[option] = min(float(chosen.get(option, 1e-7)),
                                     settings.REL_FEASIBILITY_TOLERANCE)
    return Backend(name, tuple(sorted(opts.items())), tuple(sorted(minimise.items())))


def solve_class(red: Reduced, pairs: list[tuple[int, int, float]], cutoff: float,
                 time_limit: float, backend: Backend, objective: bool = True,
                 incumbent: float | None = None) -> Solve:
    """Cheapest move (within ``cutoff``, objective units) after which, for every
    ``(winner, loser, margin)`` in ``pairs``, the winner's score is at least ``margin`` above
    the loser's. Without ``objective``, any such move within the cutoff is returned.
    ``incumbent``: the cost (objective units) of a move known to meet the goal; the
    minimisation prunes against it (slightly above it, so that its cell stays feasible)."""
    n_p = len(red.free)
    n_leaf = len(red.leaf_scores)
    n_col = red.a.shape[1]
    need = np.array([red.const[lo_] - red.const[w] + m for w, lo_, m in pairs])
    diff = np.zeros((len(pairs), n_col))
    for r, (w, lo_, _) in enumerate(pairs):
        diff[r, n_p:n_p + n_leaf] = red.leaf_scores[:, w] - red.leaf_scores[:, lo_]
    if red.infeasible:
        return Solve("infeasible", np.inf, np.inf, None)
    if n_leaf == 0:  # nothing reachable can change the scores: stay at the input
        if (need <= 0).all():
            return Solve("optimal", 0.0, 0.0, red.origin.copy())
        return Solve("infeasible", np.inf, np.inf, None)
    blocks = [red.a, sp.csr_matrix(diff)]
    lo = [red.row_lo, need]
    hi = [red.row_hi, np.full(len(pairs), np.inf)]
    col_lo = np.zeros(n_col)
    col_hi = np.ones(n_col)
    scaled_cutoff = cutoff / red.unit
    integrality = np.zeros(n_col, dtype=np.int64)
    integrality[:n_p] = 1
    if red.rel_cols is not None:
        col_lo[red.rel_cols], col_hi[red.rel_cols] = red.rel_lo, red.rel_hi
        integrality[red.rel_cols] = red.rel_int
        col_hi[red.rel_cols[-1] + 1:] = np.inf  # L1 / L2 distance columns
    if red.feasibility:
        pass
    elif red.linf:
        col_hi[red.b_col] = scaled_cutoff * (1 + 1e-12) if np.isfinite(cutoff) else np.inf
    elif np.isfinite(cutoff) and not objective:
        # a feasibility program must stay within the cutoff. A minimisation does not need the
        # row (its cuts beyond the cutoff are fixed already), and with it HiGHS 1.16 (presolve
        # off) returned a move 1% above the optimum as optimal on a one-hot forest
        # (tests/test_exact_trees.py::test_one_hot_group_stays_one_hot)
        blocks.append(sp.csr_matrix(red.obj[None, :]))
        lo.append([-np.inf])
        hi.append([scaled_cutoff * (1 + 1e-12) - red.obj_offset])
    a = sp.vstack(blocks, format="csr")
    obj = red.obj if objective else np.zeros_like(red.obj)
    row_lo, row_hi = np.concatenate(lo), np.concatenate(hi)
    t0 = time.perf_counter()
    res = backend.run(a, row_lo, row_hi, col_lo, col_hi, obj,
                      red.obj_offset if objective else 0.0, integrality, n_p, time_limit,
                      minimise=objective,
                      objective_bound=None if incumbent is None or not objective
                      else incumbent / red.unit * (1 + settings.INCUMBENT_SLACK))
    for _ in range(settings.OA_ROUNDS if objective and red.rel_t is not None else 0):
        # L2 under relations: the squared distances of the related features are bounded by
        # tangents; cut at the solution until the program's optimum meets its true cost
        if res.status != "optimal" or res.values is None:
            break
        x, t = res.values[red.rel_cols], res.values[red.rel_t]
        z = (x - red.rel_x0) / red.rel_scale
        short = z * z / red.unit - t
        if short.sum() <= 1e-9 * max(res.objective, 1e-12):
            break
        remaining = time_limit - (time.perf_counter() - t0)
        if remaining <= 0:
            break
        cut = np.flatnonzero(short > 0)
        scale = red.rel_scale[cut] * red.unit
        rows = sp.csr_matrix((np.concatenate([np.ones(len(cut)), -2.0 * z[cut] / scale]),
                              (np.tile(np.arange(len(cut)), 2),
                               np.concatenate([red.rel_t[cut], red.rel_cols[cut]]))),
                             shape=(len(cut), n_col))
        a = sp.vstack([a, rows], format="csr")
        row_lo = np.concatenate(
            [row_lo, (-2.0 * z[cut] * red.rel_x0[cut] / red.rel_scale[cut] - z[cut] ** 2)
             / red.unit])
        row_hi = np.concatenate([row_hi, np.full(len(cut), np.inf)])
        res = backend.run(a, row_lo, row_hi, col_lo, col_hi, obj, red.obj_offset,
                          integrality, n_p, remaining, minimise=True)
    if objective and red.rel_t is not None and res.values is not None:
        z = (res.values[red.rel_cols] - red.rel_x0) / red.rel_scale
        # the solution's true cost (the program's objective bounds it from below)
        res.objective += float(np.maximum(z * z / red.unit - res.values[red.rel_t], 0).sum())
    if res.p is not None:
        full = red.state.astype(np.float64)
        full[red.free] = res.p
        res.p = full
        if red.rel_cols is not None and res.values is not None:
            res.x_rel = res.values[red.rel_cols]
    res.objective *= red.unit
    res.dual_bound *= red.unit
    return res


def _solve(res: MipResult, n_pred: int) -> Solve:
    """The search's reading of a HiGHS run: an optimum's bound is at most its objective (the
    objective where HiGHS gave no finite bound); a stop on a limit certifies its finite dual
    bound, else 0; an error certifies nothing."""
    p = None if res.values is None else np.round(res.values[:n_pred])
    if res.status == "optimal":
        value, bound = res.objective, res.dual_bound
        return Solve("optimal", value, min(bound, value) if np.isfinite(bound) else value, p,
                     res.values)
    if res.status == "infeasible":
        return Solve("infeasible", np.inf, np.inf, None)
    if res.status == "time_limit":
        bound = res.dual_bound if np.isfinite(res.dual_bound) else 0.0
        return Solve("time_limit", res.objective, bound, p, res.values)
    return Solve("error", np.inf, 0.0, p, res.values)


def run_highspy(a, row_lo, row_hi, col_lo, col_hi, obj, offset, integrality, n_pred,
                time_limit, options: dict, objective_bound: float | None = None) -> Solve:
    """Solve on this thread's kept HiGHS instance for ``options`` (one thread, the gaps of
    :data:`~robustscope.solvers.exact.trees.settings.MIP_REL_GAP` and
    :data:`~robustscope.solvers.exact.trees.settings.MIP_ABS_GAP`); ``n_pred``: the leading
    binary columns whose rounded values are the solution's predicates."""
    h = kept_highs((*options.items(), ("threads", 1), ("mip_rel_gap", settings.MIP_REL_GAP),
                    ("mip_abs_gap", settings.MIP_ABS_GAP)))
    pass_model(h, a, row_lo, row_hi, col_lo, col_hi, obj, offset, integrality)
    return _solve(run_mip(h, time_limit, objective_bound), n_pred)


def run_scipy(a, row_lo, row_hi, col_lo, col_hi, obj, offset, integrality, n_pred,
              time_limit, options: dict) -> Solve:
    """Solve with ``scipy.optimize.milp`` (reads only ``presolve`` of ``options``)."""
    res = scipy_milp(obj, integrality, col_lo, col_hi, a, row_lo, row_hi,
                     {"time_limit": max(float(time_limit), 1e-3),
                      "mip_rel_gap": settings.MIP_REL_GAP, "disp": False,
                      "presolve": options.get("presolve", "on") != "off"}, offset=offset)
    return _solve(res, n_pred)
