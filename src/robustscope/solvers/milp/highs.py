"""The one place that creates and drives HiGHS, for every exact solver.

- :func:`new_highs`: a fresh ``highspy.Highs``. The first ``highspy.Highs()`` of a process
  prints a banner on the C-level stdout before any option can silence it; that first one is
  made with file descriptor 1 sent to /dev/null, so that robustscope's own output (tables,
  JSON on stdout) stays clean.
- :func:`kept_highs`: this thread's instance for an option set, kept between programs (the
  tree solver's many small MILPs).
- :func:`pass_model`: hand a sparse program (rows ``row_lo <= A v <= row_hi``, column bounds,
  costs, offset, integrality) to an instance.
- :func:`run_mip`: solve a MILP on an instance (time limit, objective bound) and read its
  status, incumbent and dual bound into a :class:`MipResult`.
- :func:`solve_lp`: an LP or a convex QP with a diagonal Hessian on a fresh instance (the
  exact linear solver).
- :func:`scipy_milp`: the same MILP through ``scipy.optimize.milp`` (scipy's own HiGHS):
  the ReLU network MILP, and the tree solver's ``backend="scipy"``.

Each caller passes its own options and tolerances; nothing here chooses them.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

_LOCK = threading.Lock()
_BANNER_DONE = False
#: Per thread: the kept instances of :func:`kept_highs`, one per option set.
_KEPT = threading.local()


def new_highs():
    """A fresh ``highspy.Highs`` instance, without the process's first banner."""
    global _BANNER_DONE
    import highspy

    if _BANNER_DONE:
        return highspy.Highs()
    with _LOCK:  # descriptor 1 is process-wide: one redirect at a time
        if _BANNER_DONE:
            return highspy.Highs()
        sys.stdout.flush()
        saved, devnull = os.dup(1), os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 1)
            h = highspy.Highs()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            os.close(devnull)
        _BANNER_DONE = True
        return h


def kept_highs(options: Iterable[tuple[str, object]]):
    """This thread's ``highspy.Highs`` for an option set, kept between programs and inputs:
    created once per thread and option set, with ``output_flag`` off and ``options`` set in
    their order (later ones win); each :func:`pass_model` replaces the last program in it.
    ``options``: ``(name, value)`` pairs (hashable, e.g. a tuple)."""
    options = tuple(options)
    key = tuple(sorted(options, key=lambda kv: kv[0]))
    kept = getattr(_KEPT, "highs", None)
    if kept is None:
        kept = _KEPT.highs = {}
    h = kept.get(key)
    if h is None:
        h = new_highs()
        h.setOptionValue("output_flag", False)
        for name, value in options:
            h.setOptionValue(name, value)
        kept[key] = h
    return h


def pass_model(h, a: sp.csr_matrix, row_lo: np.ndarray, row_hi: np.ndarray,
               col_lo: np.ndarray, col_hi: np.ndarray, cost: np.ndarray, offset: float = 0.0,
               integrality: np.ndarray | None = None) -> None:
    """Hand the program ``min cost . v + offset`` s.t. ``row_lo <= a v <= row_hi``,
    ``col_lo <= v <= col_hi`` (``integrality[j]`` nonzero: ``v_j`` integer) to ``h``
    (row-wise sparse matrix), replacing its previous model."""
    import highspy

    a = sp.csr_matrix(a)
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = a.shape[1], a.shape[0]
    lp.col_cost_ = np.asarray(cost, dtype=np.float64)
    lp.col_lower_ = np.asarray(col_lo, dtype=np.float64)
    lp.col_upper_ = np.asarray(col_hi, dtype=np.float64)
    lp.row_lower_ = np.asarray(row_lo, dtype=np.float64)
    lp.row_upper_ = np.asarray(row_hi, dtype=np.float64)
    lp.offset_ = float(offset)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = a.shape[1], a.shape[0]
    lp.a_matrix_.start_ = a.indptr.astype(np.int32)
    lp.a_matrix_.index_ = a.indices.astype(np.int32)
    lp.a_matrix_.value_ = a.data.astype(np.float64)
    if integrality is not None:
        lp.integrality_ = [highspy.HighsVarType.kInteger if v
                           else highspy.HighsVarType.kContinuous for v in integrality]
    h.passModel(lp)


@dataclass
class MipResult:
    """One MILP run, as HiGHS reported it (offset included); each caller reads it with its
    own rules (what an absent bound means, which statuses certify)."""

    status: str                # "optimal", "infeasible", "time_limit" or "error"
    objective: float           # the incumbent's objective (inf when there is none)
    dual_bound: float          # HiGHS's MIP dual bound (nan when it reported none)
    values: np.ndarray | None  # the incumbent's column values (None when there is none,
    #                            always None when infeasible)


def run_mip(h, time_limit: float, objective_bound: float | None = None) -> MipResult:
    """Solve the model last passed to ``h`` within ``time_limit`` seconds (at least 1 ms);
    ``objective_bound`` lets HiGHS prune every node whose bound exceeds it from the start
    (set on every run: a kept instance holds the last run's)."""
    import highspy

    h.setOptionValue("time_limit", max(float(time_limit), 1e-3))
    h.setOptionValue("objective_bound", np.inf if objective_bound is None else objective_bound)
    h.run()
    status = h.getModelStatus()
    info = h.getInfo()
    ms = highspy.HighsModelStatus
    has_sol = info.primal_solution_status == 2  # kSolutionStatusFeasible
    values = np.asarray(h.getSolution().col_value, dtype=np.float64) if has_sol else None
    if status == ms.kOptimal:
        return MipResult("optimal", info.objective_function_value, info.mip_dual_bound, values)
    if status == ms.kInfeasible:
        return MipResult("infeasible", np.inf, np.inf, None)
    if status in (ms.kTimeLimit, ms.kInterrupt, ms.kSolutionLimit, ms.kIterationLimit):
        return MipResult("time_limit", info.objective_function_value if has_sol else np.inf,
                         info.mip_dual_bound, values)
    return MipResult("error", np.inf, info.mip_dual_bound, values)


def scipy_milp(cost: np.ndarray, integrality: np.ndarray, col_lo: np.ndarray,
               col_hi: np.ndarray, a: sp.spmatrix, row_lo: np.ndarray, row_hi: np.ndarray,
               options: dict, offset: float = 0.0) -> MipResult:
    """The same MILP through ``scipy.optimize.milp`` (scipy's build of HiGHS; ``options``
    passed as they are, see scipy's documentation: it takes no tolerance settings)."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    res = milp(cost, integrality=integrality, bounds=Bounds(col_lo, col_hi),
               constraints=LinearConstraint(a, row_lo, row_hi), options=options)
    values = None if res.x is None else np.asarray(res.x, dtype=np.float64)
    bound = getattr(res, "mip_dual_bound", None)
    bound = np.nan if bound is None else bound + offset
    objective = np.inf if res.x is None else res.fun + offset
    if res.status == 0:
        return MipResult("optimal", objective, bound, values)
    if res.status == 2:
        return MipResult("infeasible", np.inf, np.inf, None)
    if res.status == 1:
        return MipResult("time_limit", objective, bound, values)
    return MipResult("error", np.inf if values is None else objective, bound, values)


def scipy_lp(cost: np.ndarray, a_ub: np.ndarray | None, b_ub: np.ndarray | None,
             bounds: np.ndarray):
    """``min cost . v`` subject to ``a_ub v <= b_ub`` and ``bounds`` ``(n, 2)`` through
    ``scipy.optimize.linprog(method="highs")`` (scipy's build of HiGHS, its default
    tolerances): the small dense LPs of branch and bound's subdomains. Returns scipy's
    ``OptimizeResult`` (``status``, ``x``, ``fun``, ``ineqlin.marginals``)."""
    from scipy.optimize import linprog

    return linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs")


@dataclass
class Solution:
    """One LP / QP run: ``status`` (``optimal``, ``infeasible`` or ``error``), the objective and
    the column values (``None`` unless optimal)."""

    status: str
    objective: float
    values: np.ndarray | None


def solve_lp(cost: np.ndarray, matrix: sp.csr_matrix, row_lo: np.ndarray, row_hi: np.ndarray,
             col_lo: np.ndarray, col_hi: np.ndarray, feasibility_tolerance: float,
             quadratic: np.ndarray | None = None, time_limit: float = 60.0) -> Solution:
    """``min cost . v (+ 1/2 v' diag(quadratic) v)`` subject to ``row_lo <= matrix v <=
    row_hi`` and ``col_lo <= v <= col_hi``; an LP, or a convex QP with a diagonal Hessian
    (``quadratic`` ``(n_cols,)`` >= 0). A fresh instance, one thread; primal and dual
    feasibility tolerances ``feasibility_tolerance``."""
    import highspy

    h = new_highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    h.setOptionValue("time_limit", float(time_limit))
    h.setOptionValue("primal_feasibility_tolerance", feasibility_tolerance)
    h.setOptionValue("dual_feasibility_tolerance", feasibility_tolerance)
    pass_model(h, matrix, row_lo, row_hi, col_lo, col_hi, cost)
    n = matrix.shape[1]
    if quadratic is not None:
        q = np.asarray(quadratic, dtype=np.float64)
        nz = np.flatnonzero(q)
        hess = highspy.HighsHessian()
        hess.dim_ = n
        hess.format_ = highspy.HessianFormat.kTriangular
        start = np.zeros(n + 1, dtype=np.int32)
        start[1:] = np.cumsum(np.isin(np.arange(n), nz))
        hess.start_ = start
        hess.index_ = nz.astype(np.int32)
        hess.value_ = q[nz]
        h.passHessian(hess)
    h.run()
    ms = highspy.HighsModelStatus
    status = h.getModelStatus()
    if status == ms.kOptimal:
        return Solution("optimal", float(h.getInfo().objective_function_value),
                        np.asarray(h.getSolution().col_value, dtype=np.float64))
    if status in (ms.kInfeasible, ms.kUnboundedOrInfeasible):
        return Solution("infeasible", np.inf, None)
    return Solution("error", np.inf, None)
