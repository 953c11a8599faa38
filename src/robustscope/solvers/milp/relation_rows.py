"""Relations between features as rows of a linear or mixed-integer program.

The relations of a feature space hold over **raw** feature units (``A x <= b``,
``C x == d``); a program has its own input variables. :func:`relation_rows` maps each
feature to ``x_j = offset_j + coef_j * v[column_j]`` (``column_j = -1``: the feature is fixed at
``offset_j``), so that one function serves programs in scaled units (``offset = x0``,
``coef = scale``) and in raw units (``offset = 0``, ``coef = 1``).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from robustscope.core.relations import Relations


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
