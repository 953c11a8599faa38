"""Relations between features as rows of a linear or mixed-integer program, and one
HiGHS call for the small LPs / QPs of the exact linear solver.

The relations of a feature space hold over **raw** feature units (``A x <= b``,
``C x == d``); a program has its own input variables. :func:`relation_rows` maps each
feature to ``x_j = offset_j + coef_j * v[column_j]`` (``column_j = -1``: the feature is fixed at
``offset_j``), so that one function serves programs in scaled units (``offset = x0``,
``coef = scale``) and in raw units (``offset = 0``, ``coef = 1``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from robustscope.core.relations import Relations
from robustscope.solvers.milp.highs import new_highs

#: HiGHS feasibility tolerances of the exact linear LPs (tighter than HiGHS's 1e-7 default,
#: so that a solution sits within the relations' own tolerance).
LP_FEASIBILITY_TOLERANCE = 1e-10


def relation_rows(relations: Relations, columns: np.ndarray, offset: np.ndarray,
                  coef: np.ndarray, n_cols: int) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
    """Rows ``row_lo <= M v <= row_hi`` of the linear relations over program variables ``v``.

    ``columns`` ``(d,)`` int: the program column of each feature, ``-1`` where it has none;
    ``offset``, ``coef`` ``(d,)``: ``x_j = offset_j + coef_j * v[columns_j]`` (raw units);
    ``n_cols``: number of columns of the program. Returns ``M`` ``(m + q, n_cols)`` (the
    inequalities first, then the equalities, in the order of ``relations``), ``row_lo`` and
    ``row_hi`` ``(m + q,)`` (``-inf`` below the inequalities; equal for the equalities).
    """
    columns = np.asarray(columns, dtype=np.int64).reshape(-1)
    offset = np.asarray(offset, dtype=np.float64).reshape(-1)
    coef = np.asarray(coef, dtype=np.float64).reshape(-1)
    d = relations.n_features
    if not (len(columns) == len(offset) == len(coef) == d):
        raise ValueError(f"relation_rows: columns, offset and coef need {d} entries each")
    if columns.max(initial=-1) >= n_cols:
        raise ValueError(f"relation_rows: a column index is >= n_cols = {n_cols}")
    mats = np.vstack([relations.A, relations.C])  # (r, d)
    rhs = np.concatenate([relations.b, relations.d]) - mats @ offset
    has = columns >= 0
    sub = mats[:, has] * coef[has]  # (r, k)
    rr, cc = np.nonzero(sub)
    matrix = sp.csr_matrix((sub[rr, cc], (rr, columns[has][cc])), shape=(len(rhs), n_cols))
    m = len(relations.b)
    row_lo = np.concatenate([np.full(m, -np.inf), rhs[m:]])
    row_hi = rhs
    return matrix, row_lo, row_hi


@dataclass
class Solution:
    """One HiGHS run: ``status`` (``optimal``, ``infeasible`` or ``error``), the objective and
    the column values (``None`` unless optimal)."""

    status: str
    objective: float
    values: np.ndarray | None


def solve_highs(cost: np.ndarray, matrix: sp.csr_matrix, row_lo: np.ndarray, row_hi: np.ndarray,
                col_lo: np.ndarray, col_hi: np.ndarray, quadratic: np.ndarray | None = None,
                time_limit: float = 60.0) -> Solution:
    """``min cost . v (+ 1/2 v' diag(quadratic) v)`` subject to ``row_lo <= matrix v <=
    row_hi`` and ``col_lo <= v <= col_hi``; an LP, or a convex QP with a diagonal Hessian
    (``quadratic`` ``(n_cols,)`` >= 0). One thread; feasibility tolerances
    :data:`LP_FEASIBILITY_TOLERANCE`."""
    import highspy

    h = new_highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    h.setOptionValue("time_limit", float(time_limit))
    h.setOptionValue("primal_feasibility_tolerance", LP_FEASIBILITY_TOLERANCE)
    h.setOptionValue("dual_feasibility_tolerance", LP_FEASIBILITY_TOLERANCE)
    matrix = sp.csr_matrix(matrix)
    n = matrix.shape[1]
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = n, matrix.shape[0]
    lp.col_cost_ = np.asarray(cost, dtype=np.float64)
    lp.col_lower_ = np.asarray(col_lo, dtype=np.float64)
    lp.col_upper_ = np.asarray(col_hi, dtype=np.float64)
    lp.row_lower_ = np.asarray(row_lo, dtype=np.float64)
    lp.row_upper_ = np.asarray(row_hi, dtype=np.float64)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = n, matrix.shape[0]
    lp.a_matrix_.start_ = matrix.indptr.astype(np.int32)
    lp.a_matrix_.index_ = matrix.indices.astype(np.int32)
    lp.a_matrix_.value_ = matrix.data.astype(np.float64)
    h.passModel(lp)
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
