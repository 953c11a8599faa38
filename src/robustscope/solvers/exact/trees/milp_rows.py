"""The rows of one input's tree-ensemble MILP: the program of :mod:`.program` restricted to
the predicates within a radius cutoff, the norm's rows and the relations between features.

The encoding follows Kantchelian, Tygar & Joseph (ICML 2016), "Evasion and hardening of tree
ensemble classifiers": every split threshold used on a feature becomes a *cut*; a binary
predicate variable ``p = 1`` says "the feature lies left of the cut"; a continuous leaf
variable per tree leaf says "the input reaches this leaf"; consistency rows tie leaves to the
predicates of their ancestors, and predicates of one feature are ordered. (The class-score
rows are added per goal in :func:`~robustscope.solvers.exact.trees.milp.solve_class`.)

Norms: Linf and L1 costs are linear in the predicates (a telescoping sum along each feature's
ordered cuts); L2 minimises the *squared* norm, which telescopes the same way, so all three
are plain MILPs. Every cut whose crossing alone costs more than the cutoff is fixed to the
input's side before the rows are built (:func:`reduce_program`), so unreachable leaves and
trees that cannot change drop out and HiGHS sees small programs.

Relations between features (``space.relations``, linear rows) are held by a raw-unit column
per related feature tied to its predicates (:func:`relation_block`); see
``docs/exact-trees.md``. New constraint rows go here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from robustscope.core.relations import Relations
from robustscope.core.space import FeatureSpace
from robustscope.solvers.exact.trees import settings
from robustscope.solvers.exact.trees.program import INTEGRAL_TYPES, LEAF, LEFT, Costs, Program
from robustscope.solvers.milp.relation_rows import relation_rows


@dataclass
class Reduced:
    """The program restricted to predicates cheaper than a cutoff; columns are
    ``[free predicates, reachable leaves, (b for Linf)]``."""

    free: np.ndarray          # predicate index of each predicate column
    state: np.ndarray         # (n_pred,) 1 / 0 fixed left / right, -1 free
    a: sp.csr_matrix
    row_lo: np.ndarray
    row_hi: np.ndarray
    leaf_scores: np.ndarray   # (n_leaf_cols, n_classes)
    const: np.ndarray         # (n_classes,) scores of the fixed part
    obj: np.ndarray
    obj_offset: float
    linf: bool
    origin: np.ndarray        # (n_pred,) predicate values at the input
    infeasible: bool = False  # a one-hot group cannot be satisfied
    feasibility: bool = False  # no objective: any move within the cutoff will do
    unit: float = 1.0         # costs in the program are divided by this (keeps them O(1))
    b_col: int = -1           # column of the Linf norm variable (-1: none)
    # relations between features: one raw-unit column per feature in a relation
    rel_feats: np.ndarray | None = None   # (k,) features with a column
    rel_cols: np.ndarray | None = None    # (k,) their columns
    rel_lo: np.ndarray | None = None      # (k,) column bounds (raw units)
    rel_hi: np.ndarray | None = None
    rel_int: np.ndarray | None = None     # (k,) bool: integral feature
    rel_t: np.ndarray | None = None       # (k,) L2: columns bounding the squared distances
    rel_x0: np.ndarray | None = None      # (k,) L2: the input's values of those features
    rel_scale: np.ndarray | None = None   # (k,) L2: their scales


@dataclass(frozen=True)
class RelationInput:
    """The linear relations of the feature space, for the programs of one input."""

    relations: Relations
    feats: np.ndarray      # (k,) features with a nonzero coefficient in some row
    x0: np.ndarray         # (d,) the input, raw units
    scale: np.ndarray      # (d,)
    lower: np.ndarray      # (d,) valid bounds (integral features rounded inwards)
    upper: np.ndarray
    integral: np.ndarray   # (d,) bool
    mutable: np.ndarray    # (d,) bool


def relation_input(space: FeatureSpace, x0: np.ndarray) -> RelationInput | None:
    """The relations to hold for input ``x0`` ``(d,)``; ``None`` without linear rows."""
    rel = space.relations
    if rel is None or rel.is_linear_empty:
        return None
    used = (np.abs(np.vstack([rel.A, rel.C])) > 0).any(axis=0)
    if not used.any():
        return None
    integral = np.isin(space.types, INTEGRAL_TYPES)
    lower = np.where(integral, np.ceil(space.lower), space.lower).astype(np.float64)
    upper = np.where(integral, np.floor(space.upper), space.upper).astype(np.float64)
    return RelationInput(rel, np.flatnonzero(used), x0, space.scale.astype(np.float64), lower,
                     upper, integral, space.mutable.astype(bool))


class Rows:
    """Sparse constraint rows ``lo <= A[r] . v <= hi`` collected one at a time."""

    def __init__(self) -> None:
        self.ri: list[int] = []
        self.rj: list[int] = []
        self.rv: list[float] = []
        self.lo: list[float] = []
        self.hi: list[float] = []

    def add(self, cols: list[int], vals: list[float], low: float, high: float) -> None:
        r = len(self.lo)
        self.ri.extend([r] * len(cols))
        self.rj.extend(cols)
        self.rv.extend(vals)
        self.lo.append(low)
        self.hi.append(high)

    def matrix(self, n_col: int) -> sp.csr_matrix:
        """The rows so far, shape ``(len(lo), n_col)``."""
        return sp.csr_matrix((self.rv, (self.ri, self.rj)), shape=(len(self.lo), n_col))


def reduce_program(prog: Program, costs: Costs, cutoff: float, linf: bool,
            feasibility: bool = False, rel: RelationInput | None = None) -> Reduced:
    """Fix every predicate whose crossing alone costs more than ``cutoff`` (objective units)
    to the input's side, drop the leaves no free predicate can reach, and build the rows.
    With ``feasibility`` (Linf only) the program has no objective: every move left free
    already costs at most ``cutoff``. With ``rel``, the relations between features hold
    (:func:`relation_block`)."""
    far = costs.frozen | (costs.cost ** costs.power > cutoff * (1 + 1e-12))
    state = np.where(far, costs.origin_left.astype(np.int64), -1)
    free = np.flatnonzero(~far)
    # HiGHS prunes with absolute tolerances: costs are handed over in units of the largest
    # free one, so that cost differences far below 1e-6 of a radius still count
    unit = float(np.max(costs.cost[free] ** costs.power)) if len(free) else 1.0
    unit = unit if unit > 0 else 1.0
    col = np.full(prog.n_pred, -1, dtype=np.int64)
    col[free] = np.arange(len(free))
    n_p = len(free)
    rows = Rows()
    row = rows.add

    const = prog.const_scores.copy()
    leaf_scores: list[np.ndarray] = []
    for tree in prog.trees:
        # follow fixed predicates; branch on free ones
        node = 0
        while tree.pred[node] != LEAF and (tree.pred[node] < 0 or state[tree.pred[node]] >= 0):
            k = tree.pred[node]
            go_left = k == LEFT or (k >= 0 and state[k] == 1)
            node = int(tree.left[node] if go_left else tree.right[node])
        if tree.pred[node] == LEAF:
            const += tree.scores[node]
            continue

        def visit(node: int, tree=tree) -> list[int]:
            k = tree.pred[node]
            if k == LEAF:
                leaf_scores.append(tree.scores[node])
                return [n_p + len(leaf_scores) - 1]
            if k < 0 or state[k] >= 0:
                go_left = k == LEFT or (k >= 0 and state[k] == 1)
                return visit(int(tree.left[node] if go_left else tree.right[node]))
            left = visit(int(tree.left[node]))
            right = visit(int(tree.right[node]))
            c = int(col[k])
            row(left + [c], [1.0] * len(left) + [-1.0], -np.inf, 0.0)
            row(right + [c], [1.0] * len(right) + [1.0], -np.inf, 1.0)
            return left + right

        leaves = visit(node)
        row(leaves, [1.0] * len(leaves), 1.0, 1.0)
    n_leaf = len(leaf_scores)
    with_b = linf and not feasibility
    n_col = n_p + n_leaf + (1 if with_b else 0)
    obj = np.zeros(n_col)
    offset = 0.0
    l1 = not linf and costs.power == 1.0
    priced = np.zeros(len(prog.feature_preds), dtype=bool)  # distance on the raw column
    priced_mode = None if feasibility or linf else ("l1" if l1 else "l2")
    if rel is not None and priced_mode is not None:
        priced[rel.feats] = True
    for f, preds in enumerate(prog.feature_preds):
        fp = preds[state[preds] < 0]
        if len(fp) == 0:
            continue
        for a, b in zip(fp[:-1], fp[1:], strict=True):  # left of a cut => left of larger ones
            row([int(col[a]), int(col[b])], [1.0, -1.0], -np.inf, 0.0)
        up = fp[costs.origin_left[fp]]             # cuts above the input, ascending
        down = fp[~costs.origin_left[fp]][::-1]    # cuts below it, descending
        for chain, rising in ((up, True), (down, False)):
            if len(chain) == 0 or feasibility or priced[f]:
                continue
            w = np.diff(np.concatenate([[0.0], costs.cost[chain] ** costs.power])) / unit
            cols = col[chain].tolist()
            # crossing a cut above: p 1 -> 0, term w (1 - p); below: p 0 -> 1, term w p
            if linf:
                if rising:
                    row(cols + [n_col - 1], w.tolist() + [1.0], float(w.sum()), np.inf)
                else:
                    row(cols + [n_col - 1], (-w).tolist() + [1.0], 0.0, np.inf)
            elif rising:
                obj[col[chain]] -= w
                offset += float(w.sum())
            else:
                obj[col[chain]] += w
    infeasible = False
    for g in prog.groups:
        fixed_left = float(sum(state[k] for k in g if state[k] >= 0))
        cols = [int(col[k]) for k in g if state[k] < 0]
        target = len(g) - 1.0 - fixed_left
        if cols:
            row(cols, [1.0] * len(cols), target, target)
        infeasible |= not cols and target != 0
    if with_b:
        obj[-1] = 1.0
    b_col = n_col - 1 if with_b else -1
    a, lo, hi = rows.matrix(n_col), rows.lo, rows.hi
    scores = np.array(leaf_scores).reshape(n_leaf, len(const))
    red = Reduced(free, state, a, np.array(lo), np.array(hi), scores, const, obj, offset,
                   linf, costs.origin_left.astype(np.float64), infeasible, feasibility, unit,
                   b_col)
    if rel is not None:
        radius = cutoff ** (1.0 / costs.power) * (1 + 1e-12)
        relation_block(prog, red, rel, costs, col, radius, priced_mode)
    return red


def relation_block(prog: Program, red: Reduced, rel: RelationInput, costs: Costs,
                    col: np.ndarray, radius: float, mode: str | None) -> None:
    """Append to ``red`` a raw-unit column ``x_f`` per feature in a relation and the relation
    rows over them (:func:`~robustscope.solvers.milp.relation_rows.relation_rows`).

    ``x_f`` is bounded by the feature's valid bounds and the ball of ``radius`` (radius units;
    fixed at the input for an immutable feature) and lies in the closure of the cell its
    predicates select: ``p = 1`` (left of cut ``r``) gives ``x_f <= `` the largest valid value
    left of ``r``, ``p = 0`` gives ``x_f >= r`` (big-M rows over the column's bounds), so
    every valid point is feasible and its cost is counted. Distances are measured on these
    columns: Linf ``b >= |x_f - x0_f| / (scale_f unit)``; L1 a column ``t_f >=`` the same in
    the objective instead of the feature's telescoping cut costs; L2 a column ``t_f`` in the
    objective bounded below by the squared cut costs and by tangents of the squared scaled
    distance (more are added per solution in
    :func:`~robustscope.solvers.exact.trees.milp.solve_class`, see
    :data:`~robustscope.solvers.exact.trees.settings.OA_ROUNDS`).
    """
    k = len(rel.feats)
    base = red.a.shape[1]
    n_new = k + (k if mode else 0)
    rows = Rows()
    row = rows.add

    # (the cap keeps the big-M rows finite on unbounded features)
    radius = min(radius, settings.REL_RADIUS_CAP)
    x_lo, x_hi = np.empty(k), np.empty(k)
    infeasible = red.infeasible
    for i, f in enumerate(rel.feats):
        x0f, s = float(rel.x0[f]), float(rel.scale[f])
        if rel.mutable[f]:
            a_, b_ = max(rel.lower[f], x0f - radius * s), min(rel.upper[f], x0f + radius * s)
            if rel.integral[f]:
                a_, b_ = math.ceil(a_ - 1e-9), math.floor(b_ + 1e-9)
        else:
            a_ = b_ = x0f
        preds = prog.feature_preds[f]
        for q in preds:  # predicates fixed to a side bound the column
            if red.state[q] == 1:
                b_ = min(b_, float(prog.pred_left[q]))
            elif red.state[q] == 0:
                a_ = max(a_, float(prog.pred_cut[q]))
        infeasible |= a_ > b_
        b_ = max(a_, b_)
        x_lo[i], x_hi[i] = a_, b_
        c = base + i
        for q in preds:
            if red.state[q] >= 0:
                continue
            pc, left = int(col[q]), float(prog.pred_left[q])
            cut = float(prog.pred_cut[q])
            # p = 1 => x <= left ; p = 0 => x >= cut
            row([c, pc], [1.0, max(b_ - left, 0.0)], -np.inf, max(b_, left))
            row([c, pc], [1.0, max(cut - a_, 0.0)], cut, np.inf)
        unit = s * red.unit
        if red.b_col >= 0:
            row([red.b_col, c], [1.0, -1.0 / unit], -x0f / unit, np.inf)
            row([red.b_col, c], [1.0, 1.0 / unit], x0f / unit, np.inf)
        if mode == "l2":
            t = base + k + i
            # squared distance: tangents of z^2 (z = (x - x0) / s) and the cell's cut costs;
            # solve_class adds tangents at each solution until the bound meets it
            reach = min(radius, max(x0f - a_, b_ - x0f) / s)
            for at in np.linspace(-reach, reach, 9):
                if at != 0.0:
                    row([t, c], [1.0, -2.0 * at / (s * red.unit)],
                        (-2.0 * at * x0f / s - at * at) / red.unit, np.inf)
            fp = preds[red.state[preds] < 0]
            up, down = fp[costs.origin_left[fp]], fp[~costs.origin_left[fp]][::-1]
            cols, vals, rhs = [t], [1.0], 0.0
            for chain, sign in ((up, 1.0), (down, -1.0)):
                w = np.diff(np.concatenate([[0.0], costs.cost[chain] ** 2])) / red.unit
                cols += col[chain].tolist()
                vals += (sign * w).tolist()
                rhs += float(w.sum()) if sign > 0 else 0.0
            row(cols, vals, rhs, np.inf)
        if mode == "l1":
            t = base + k + i
            row([t, c], [1.0, -1.0 / unit], -x0f / unit, np.inf)
            row([t, c], [1.0, 1.0 / unit], x0f / unit, np.inf)
    n_col = base + n_new
    columns = np.full(rel.relations.n_features, -1, dtype=np.int64)
    columns[rel.feats] = base + np.arange(k)
    offset = np.where(columns >= 0, 0.0, rel.x0)  # x_f = v[column]: raw units
    mat, m_lo, m_hi = relation_rows(rel.relations, columns, offset, np.ones_like(rel.x0),
                                    n_col)
    own, lo, hi = rows.matrix(n_col), rows.lo, rows.hi
    old = sp.hstack([red.a, sp.csr_matrix((red.a.shape[0], n_new))], format="csr")
    red.a = sp.vstack([old, own, mat], format="csr")
    red.row_lo = np.concatenate([red.row_lo, lo, m_lo])
    red.row_hi = np.concatenate([red.row_hi, hi, m_hi])
    obj = np.zeros(n_col)
    obj[:base] = red.obj
    if mode:
        obj[base + k:] = 1.0
    red.obj = obj
    red.infeasible = infeasible
    red.rel_feats, red.rel_cols = rel.feats, base + np.arange(k)
    red.rel_lo, red.rel_hi, red.rel_int = x_lo, x_hi, rel.integral[rel.feats]
    if mode == "l2":
        red.rel_t = base + k + np.arange(k)
        red.rel_x0, red.rel_scale = rel.x0[rel.feats], rel.scale[rel.feats]
