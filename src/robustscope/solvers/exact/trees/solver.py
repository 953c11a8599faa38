"""Exact minimum-norm counterexamples for tree ensembles, as mixed-integer programs.

The encoding follows Kantchelian, Tygar & Joseph (ICML 2016), "Evasion and hardening of tree
ensemble classifiers": every split threshold used on a feature becomes a *cut*; a binary
predicate variable ``p = 1`` says "the feature lies left of the cut"; a continuous leaf
variable per tree leaf says "the input reaches this leaf"; consistency rows tie leaves to the
predicates of their ancestors, and predicates of one feature are ordered. A row asks the
score of another class to reach the label's, and the objective is the perturbation norm.

Units and validity
------------------
Costs are measured on the scaled perturbation ``u = (x' - x) / scale`` of the FeatureSpace.
Each cut is placed, exactly, at the smallest *valid* value that the library routes right of
its threshold: the float32 cast of XGBoost and scikit-learn, the ``<`` vs ``<=`` rule, the
feature's bounds and its integer / binary / one-hot type are all folded into that value, so
thresholds that no valid value separates collapse into one cut, and a cut no valid value can
cross is fixed. The counterexample puts every feature at the nearest valid value of the
chosen cell, so its norm equals the program's objective and the bracket closes exactly.

Norms: Linf and L1 costs are linear in the predicates (a telescoping sum along each feature's
ordered cuts); L2 minimises the *squared* norm, which telescopes the same way, so all three
are plain MILPs solved by HiGHS.

Build once, prune first: the input-independent program (:mod:`tree_program`) and the
leaves' boxes (:mod:`tree_bounds`) are built once per (ensemble, feature space) and cached by
content; one HiGHS instance is kept per worker thread and option set. Each input is first
bracketed without a program (:func:`_prune`: the independent-trees lower bound, beam leaf
walks for a verified counterexample), then :func:`_exhaust` tries to close the bracket by a
branch and bound over leaf choices below that counterexample; most inputs close there, and
the MILP search below runs only on the open bracket, over the cuts within its
counterexample's radius.
``prune=False`` runs the MILP search alone (the reference of the tests and the benchmark).

Search: programs are solved with a radius cutoff; every cut whose crossing alone costs more
is fixed to the input's side before the program is built, so unreachable leaves and trees
that cannot change drop out and HiGHS sees small programs. The cutoff starts at twice the
cheapest crossing and doubles while no class can win (each such level certifies a lower
bound). For Linf the radius is one of the finitely many crossing costs, and a geometric
then binary search over them with objective-free feasibility programs is faster than
minimising (``linf_search='bisect'``, the default); L1 and L2 minimise the norm at the
first cutoff level that admits a counterexample.

Ties: a class with a lower index than the label wins a tie (as ``argmax`` does), so its
score need only reach the label's; a class with a higher index must lead by ``tie_tol``
(1e-9 of the score range, 1e-6 for XGBoost, whose scores are float32 sums). The lower bound
is exact for the model's decision under that rule. The pruning's independent-trees bound
certifies against a lower class only a deficit of at least ``tie_tol``: an exact tie (a
forest's 0.5 / 0.5), summed in floating point, can come out a hair below zero. Every
counterexample is re-checked with the model's own ``predict_proba``; when the library
settles a near-tie the other way, the program is solved again with a 100x and then 10^4x
larger margin, and a counterexample that still fails is dropped
(``meta['verification_failures']`` lists the inputs).

Relations between features (``space.relations``, linear rows) are held by a raw-unit column
per related feature tied to its predicates (:func:`_relation_block`); see
``docs/exact-trees.md``.

Missing values are not modelled (inputs are finite); see :mod:`robustscope.models.trees`.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from robustscope.core.checks import check_labels
from robustscope.core.errors import InputError, ModelError
from robustscope.core.relations import Relations
from robustscope.core.space import FeatureSpace
from robustscope.core.statuses import ATTACKED, CENSORED, EXACT, MISCLASSIFIED, SATISFIED
from robustscope.models.base import QueryLedger
from robustscope.models.threads import AUTO, check_threads, limited_threads
from robustscope.models.trees import (
    TreeEnsemble,
    TreeEnsembleClassifier,
    is_tree_ensemble,
    parse_tree_model,
)
from robustscope.solvers.exact.trees.leaf_bounds import (
    LeafBoxes,
    box_point,
    certified_index,
    cheapest,
    leaf_boxes,
    leaf_reach,
    max_gain,
    walk,
)
from robustscope.solvers.exact.trees.program import (
    INTEGRAL_TYPES,
    LEAF,
    LEFT,
    Costs,
    Program,
    build_program,
    construct,
    input_costs,
    norm,
)
from robustscope.solvers.milp.highs import new_highs
from robustscope.solvers.milp.relation_rows import relation_rows
from robustscope.solvers.output import SolverOutput
from robustscope.solvers.tolerances import TREE_BRACKET_RTOL as EXACT_RTOL
from robustscope.threats import LpThreat, get_threat

#: ``check(x_adv) -> class``: the model's class at a counterexample ``(d,)`` of the input
#: being solved when the statement holds there, else -1.
Check = Callable[[np.ndarray], int]

#: Under relations a feature's column moves at most this many scales from the input (radius
#: units), so that its big-M rows stay finite; bounds certified under relations are capped here.
REL_RADIUS_CAP = 1e6
#: HiGHS feasibility tolerance set when the program holds relations, so that a solution sits
#: within the relations' own tolerance (1e-9 relative).
REL_FEASIBILITY_TOLERANCE = 1e-9
#: L2 under relations: rounds of tangent cuts on the related features' squared distances.
OA_ROUNDS = 30
#: HiGHS optimality gaps (relative, absolute) asked for.
MIP_REL_GAP = 1e-9
MIP_ABS_GAP = 1e-12



@dataclass
class _Reduced:
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
class _RelInput:
    """The linear relations of the feature space, for the programs of one input."""

    relations: Relations
    feats: np.ndarray      # (k,) features with a nonzero coefficient in some row
    x0: np.ndarray         # (d,) the input, raw units
    scale: np.ndarray      # (d,)
    lower: np.ndarray      # (d,) valid bounds (integral features rounded inwards)
    upper: np.ndarray
    integral: np.ndarray   # (d,) bool
    mutable: np.ndarray    # (d,) bool


def _rel_input(space: FeatureSpace, x0: np.ndarray) -> _RelInput | None:
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
    return _RelInput(rel, np.flatnonzero(used), x0, space.scale.astype(np.float64), lower,
                     upper, integral, space.mutable.astype(bool))


class _Rows:
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


def _reduce(prog: Program, costs: Costs, cutoff: float, linf: bool,
            feasibility: bool = False, rel: _RelInput | None = None) -> _Reduced:
    """Fix every predicate whose crossing alone costs more than ``cutoff`` (objective units)
    to the input's side, drop the leaves no free predicate can reach, and build the rows.
    With ``feasibility`` (Linf only) the program has no objective: every move left free
    already costs at most ``cutoff``. With ``rel``, the relations between features hold
    (:func:`_relation_block`)."""
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
    rows = _Rows()
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
    red = _Reduced(free, state, a, np.array(lo), np.array(hi), scores, const, obj, offset,
                   linf, costs.origin_left.astype(np.float64), infeasible, feasibility, unit,
                   b_col)
    if rel is not None:
        radius = cutoff ** (1.0 / costs.power) * (1 + 1e-12)
        _relation_block(prog, red, rel, costs, col, radius, priced_mode)
    return red


def _relation_block(prog: Program, red: _Reduced, rel: _RelInput, costs: Costs,
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
    distance (more are added per solution in :func:`_solve_class`, see :data:`OA_ROUNDS`).
    """
    k = len(rel.feats)
    base = red.a.shape[1]
    n_new = k + (k if mode else 0)
    rows = _Rows()
    row = rows.add

    radius = min(radius, REL_RADIUS_CAP)  # keeps the big-M rows finite on unbounded features
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
            # _solve_class adds tangents at each solution until the bound meets it
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


def _build_point(prog: Program, x0: np.ndarray, res: _Solve,
                 red: _Reduced) -> np.ndarray:
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
class _Solve:
    status: str              # "optimal", "infeasible", "time_limit", "error"
    objective: float         # incumbent objective (inf when none)
    dual_bound: float        # certified lower bound on the objective
    p: np.ndarray | None     # (n_pred,) predicate values of the incumbent (0/1)
    values: np.ndarray | None = None  # all column values of the incumbent
    x_rel: np.ndarray | None = None   # (k,) values of the relation columns (raw units)


@dataclass(frozen=True)
class _Backend:
    """Which HiGHS interface runs the programs, and the HiGHS options it sets: ``options`` for
    feasibility programs, ``minimise_options`` for programs with an objective."""

    name: str
    options: tuple[tuple[str, object], ...]
    minimise_options: tuple[tuple[str, object], ...]

    def run(self, *args, minimise: bool = False, objective_bound: float | None = None,
            ) -> _Solve:
        """Solve; ``objective_bound`` (highspy only; scipy's interface has no such option)
        lets HiGHS prune every node whose bound exceeds it from the start."""
        options = dict(self.minimise_options if minimise else self.options)
        if self.name == "highspy":
            return _run_highspy(*args, options=options, objective_bound=objective_bound)
        return _run_scipy(*args, options=options)


#: HiGHS options of the feasibility programs. Presolve is off: the program handed over is
#: already reduced (fixed cuts, unreachable leaves and constant trees removed), and HiGHS's
#: presolve then costs more than it saves (3-5x slower on LightGBM programs of ~400 binaries,
#: measured). The MIP feasibility tolerance (also used when pruning nodes against the
#: incumbent) is tightened from 1e-6: with it, HiGHS returned an L2 optimum 1.6e-4 too large
#: as optimal.
HIGHS_OPTIONS = {"presolve": "off", "mip_feasibility_tolerance": 1e-9}
#: Changes for programs that minimise the norm (L1, L2; Linf under relations). Presolve on:
#: with it off, HiGHS 1.16 returned moves above the optimum as optimal: 1% on a one-hot forest
#: under L1 (with an objective-cutoff row), 0.5% on a random forest under L2 (without one:
#: input 11 of the benchmark). ``_solve_input`` also refuses a dual bound above a verified
#: counterexample (:data:`BOUND_SLACK`). Restarts off and primal heuristics at effort 0.02
#: (HiGHS's default 0.05): the minimisation starts with the walks' counterexample as its
#: objective bound, and HiGHS's root node (restarts, sub-MIP heuristics) was most of its time.
#: Measured on 2 Dec 2026 against presolve on alone, in one run per model and norm (the first
#: 16 benchmark inputs, time limit 10 s, same radii wherever both closed), seconds in all:
#: XGBoost L1 9.5 to 3.2, L2 3.0 to 1.6; LightGBM L1 87 to 69, L2 34.5 to 18.6; random
#: forest L1 107 to 105 (closed 9 against 8), L2 84.5 to 71.5 (closed 14 against 11). Where the
#: forest's L1 programs hit the time limit, the counterexamples of 3 of 8 inputs were 2-14%
#: above those of the default options. Effort 0 with RINS / RENS off was a little faster on
#: XGBoost, but left the forest's timed-out counterexamples up to 46% above; restarts and
#: feasibility jump off with the default effort (measured earlier) cost the forest 3 more
#: timeouts of 24.
MINIMISE_OPTIONS = {"presolve": "on", "mip_allow_restart": False, "mip_heuristic_effort": 0.02}
#: A program's dual bound more than this (relative) above a verified counterexample's cost
#: shows the solver was wrong: that level certifies nothing (``meta["refused_bounds"]``).
BOUND_SLACK = 1e-6
#: A verified counterexample's cost, raised by this (relative), is the objective bound the
#: minimisation prunes against: its own cell stays inside despite rounding.
INCUMBENT_SLACK = 1e-7


def _solve_class(red: _Reduced, pairs: list[tuple[int, int, float]], cutoff: float,
                 time_limit: float, backend: _Backend, objective: bool = True,
                 incumbent: float | None = None) -> _Solve:
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
        return _Solve("infeasible", np.inf, np.inf, None)
    if n_leaf == 0:  # nothing reachable can change the scores: stay at the input
        if (need <= 0).all():
            return _Solve("optimal", 0.0, 0.0, red.origin.copy())
        return _Solve("infeasible", np.inf, np.inf, None)
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
                      else incumbent / red.unit * (1 + INCUMBENT_SLACK))
    for _ in range(OA_ROUNDS if objective and red.rel_t is not None else 0):
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


_WORKER = threading.local()


def _worker_highs(options: dict):
    """This thread's ``highspy.Highs`` for an option set, kept between programs and inputs
    (created, and its options set, once per thread and option set); each program replaces
    the last one."""
    key = tuple(sorted(options.items()))
    kept = getattr(_WORKER, "highs", None)
    if kept is None:
        kept = _WORKER.highs = {}
    h = kept.get(key)
    if h is None:
        h = new_highs()
        h.setOptionValue("output_flag", False)
        for name, value in options.items():
            h.setOptionValue(name, value)
        h.setOptionValue("threads", 1)
        h.setOptionValue("mip_rel_gap", MIP_REL_GAP)
        h.setOptionValue("mip_abs_gap", MIP_ABS_GAP)
        kept[key] = h
    return h


def _run_highspy(a, row_lo, row_hi, col_lo, col_hi, obj, offset, integrality, n_pred,
                 time_limit, options: dict, objective_bound: float | None = None) -> _Solve:
    import highspy

    h = _worker_highs(options)
    h.setOptionValue("time_limit", max(float(time_limit), 1e-3))
    lp = highspy.HighsLp()
    lp.num_col_ = a.shape[1]
    lp.num_row_ = a.shape[0]
    lp.col_cost_ = obj
    lp.col_lower_ = col_lo
    lp.col_upper_ = col_hi
    lp.row_lower_ = row_lo
    lp.row_upper_ = row_hi
    lp.offset_ = offset
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_ = a.shape[1]
    lp.a_matrix_.num_row_ = a.shape[0]
    lp.a_matrix_.start_ = a.indptr
    lp.a_matrix_.index_ = a.indices
    lp.a_matrix_.value_ = a.data
    lp.integrality_ = [highspy.HighsVarType.kInteger if v else highspy.HighsVarType.kContinuous
                       for v in integrality]
    h.passModel(lp)
    # (the kept instance holds the last program's bound: set on every run)
    h.setOptionValue("objective_bound", np.inf if objective_bound is None else objective_bound)
    h.run()
    status = h.getModelStatus()
    info = h.getInfo()
    ms = highspy.HighsModelStatus
    has_sol = info.primal_solution_status == 2  # kSolutionStatusFeasible
    p = values = None
    if has_sol:
        values = np.asarray(h.getSolution().col_value, dtype=np.float64)
        p = np.round(values[:n_pred])
    if status == ms.kOptimal:
        value, bound = info.objective_function_value, info.mip_dual_bound
        return _Solve("optimal", value, min(bound, value) if np.isfinite(bound) else value, p,
                      values)
    if status == ms.kInfeasible:
        return _Solve("infeasible", np.inf, np.inf, None)
    if status in (ms.kTimeLimit, ms.kInterrupt, ms.kSolutionLimit, ms.kIterationLimit):
        bound = info.mip_dual_bound if np.isfinite(info.mip_dual_bound) else 0.0
        return _Solve("time_limit", info.objective_function_value if has_sol else np.inf,
                      bound, p, values)
    return _Solve("error", np.inf, 0.0, p, values)


def _run_scipy(a, row_lo, row_hi, col_lo, col_hi, obj, offset, integrality, n_pred,
               time_limit, options: dict) -> _Solve:
    from scipy.optimize import Bounds, LinearConstraint, milp

    res = milp(obj, integrality=integrality, bounds=Bounds(col_lo, col_hi),
               constraints=LinearConstraint(a, row_lo, row_hi),
               options={"time_limit": max(float(time_limit), 1e-3),
                        "mip_rel_gap": MIP_REL_GAP, "disp": False,
                        "presolve": options.get("presolve", "on") != "off"})
    values = None if res.x is None else np.asarray(res.x, dtype=np.float64)
    p = None if values is None else np.round(values[:n_pred])
    if res.status == 0:
        bound = getattr(res, "mip_dual_bound", None)
        bound = res.fun if bound is None or not np.isfinite(bound) else min(bound, res.fun)
        return _Solve("optimal", res.fun + offset, bound + offset, p, values)
    if res.status == 2:
        return _Solve("infeasible", np.inf, np.inf, None)
    if res.status == 1:
        bound = getattr(res, "mip_dual_bound", None)
        bound = bound + offset if bound is not None and np.isfinite(bound) else 0.0
        return _Solve("time_limit", np.inf if res.x is None else res.fun + offset, bound, p,
                      values)
    return _Solve("error", np.inf, 0.0, p, values)



# -- public entry -----------------------------------------------------------------------------
def exact_tree_radius(
    model: object,
    x: np.ndarray | torch.Tensor,
    y: np.ndarray | torch.Tensor,
    space: FeatureSpace,
    threat: LpThreat | str = "linf",
    time_limit: float = 10.0,
    max_radius: float | None = None,
    backend: str = "auto",
    growth: float = 2.0,
    linf_search: str = "bisect",
    highs_options: dict | None = None,
    target: int | None = None,
    verify: Callable[[int, np.ndarray], int] | None = None,
    clean_class: np.ndarray | None = None,
    prune: bool = True,
    threads: str | int | None = AUTO,
) -> SolverOutput:
    """Exact radius of robustness of a tree ensemble, per input.

    Parameters
    ----------
    model : a :class:`TreeEnsembleClassifier`, or a fitted tree classifier (wrapped here);
        counterexamples are verified with its own ``predict_proba``.
    x : inputs ``(n, d)`` in original units (float64 numpy array or tensor).
    y : labels as class indices ``(n,)``.
    space : the feature space (bounds, scale, types, mutability) of the ``d`` features.
    threat : ``linf``, ``l1`` or ``l2`` (measured on ``(x' - x) / scale``).
    time_limit : seconds per input, all classes together; on timeout the result holds the
        best bracket found.
    max_radius : optional largest radius of interest; beyond it an input is ``censored``.
    backend : ``highspy``, ``scipy`` (``scipy.optimize.milp``, the same HiGHS without the
        MIP tolerance setting) or ``auto`` (highspy when installed, else scipy).
    growth : the search solves the program with a radius cutoff that starts at twice the
        cheapest single move and grows by this factor until a counterexample lies inside:
        cuts farther than the cutoff are fixed, which keeps every program small.
    linf_search : ``bisect`` (default: feasibility programs over the candidate radii, see
        :func:`_linf_search`) or ``optimize`` (minimise the norm, as for L1 / L2).
    highs_options : HiGHS options replacing :data:`HIGHS_OPTIONS` and
        :data:`MINIMISE_OPTIONS` (``scipy`` reads only
        ``presolve``).
    target : a class index: the counterexample must be predicted as ``target`` (the
        targeted statement) instead of anything but ``y``. Inputs already predicted as the
        target are reported ``satisfied``, those not predicted as ``y`` ``misclassified``,
        both with radius 0, as the radius search does.
    verify : ``verify(i, x_adv) -> class`` checks a counterexample ``(d,)`` of input ``i``
        with the model (the class there when the statement holds, else -1); the radius
        search passes its one verification here. Default: call the model, charged to
        ``forward_queries`` of the result.
    clean_class : ``(n,)`` the model's decision at each input when already known (saves a
        query per input).
    prune : bracket each input first without a program (:func:`_prune`: the
        independent-trees lower bound, beam leaf walks for a counterexample, then the
        branch and bound over leaf choices of :func:`_exhaust`) and solve
        programs only where the bracket stays open, over the cuts within its counterexample's
        radius. ``False`` runs the MILP search alone (the reference the tests compare with).
    threads : thread use, as for :func:`robustscope.radius`: ``"auto"`` (HiGHS runs on one
        thread; the model's checks, one row at a time, too), an int, or ``None`` (leave the
        model's and the native pools' settings alone); restored on return. Inside a search
        the search's setting holds.

    Returns a :class:`~robustscope.solvers.output.SolverOutput`: ``radius`` the norm of the
    verified counterexample (``inf`` where none), ``lower_bound`` the MILP's certified bound,
    ``status`` ``exact`` (bracket closed), ``attacked`` (open: time limit or failed
    verification), ``censored``, ``misclassified`` or ``satisfied``; ``adv_prediction`` the
    model's class at the counterexample; ``meta`` the program's size, the inputs whose
    verification failed, ``program_cached`` (the program came from the cache),
    ``closed_without_milp`` (inputs whose bracket the pruning closed), of them
    ``closed_by_leaf_search`` (closed by :func:`_exhaust`), and ``refused_bounds``
    (inputs where a program's bound lay above a verified counterexample, so the solver was
    wrong there and that bound was not used).
    """
    threads = check_threads(threads)
    with limited_threads(threads, int(np.prod(np.shape(x)))):
        return _exact_tree_radius(model, x, y, space, threat, time_limit, max_radius, backend,
                                  growth, linf_search, highs_options, target, verify,
                                  clean_class, prune)


def _exact_tree_radius(model, x, y, space, threat, time_limit, max_radius, backend, growth,
                       linf_search, highs_options, target, verify,
                       clean_class, prune) -> SolverOutput:
    clf = _as_classifier(model)
    ens = clf.ensemble
    threat = get_threat(threat)
    x_np = x.detach().cpu().numpy() if torch.is_tensor(x) else np.asarray(x)
    x_np = np.asarray(x_np, dtype=np.float64).reshape(len(x_np), -1)
    n, d = x_np.shape
    if d != ens.n_features or space.n_features != d:
        raise InputError(f"x: {d} features per row, model has {ens.n_features}, feature space "
                         f"{space.n_features}")
    y_np = check_labels(y, n, ens.n_classes)
    space.check_data(x_np, what="x")
    if threat.p not in (1.0, 2.0, math.inf):
        raise InputError(f"threat: p={threat.p} is not supported (1, 2, inf)")
    if target is not None and not 0 <= int(target) < ens.n_classes:
        raise InputError(f"target: class {target} is not in 0..{ens.n_classes - 1}")
    if backend not in ("auto", "highspy", "scipy"):
        raise InputError(f"backend '{backend}': choose 'auto', 'highspy' or 'scipy'")
    if backend == "auto":
        backend = "highspy" if importlib.util.find_spec("highspy") is not None else "scipy"
    if linf_search not in ("bisect", "optimize"):
        raise InputError(f"linf_search '{linf_search}': choose 'bisect' or 'optimize'")
    if not growth > 1.0:
        raise InputError(f"growth must be > 1, got {growth}")
    if max_radius is not None and not max_radius > 0:
        raise InputError(f"max_radius must be > 0, got {max_radius}")

    comp, cached = _compiled(ens, space)
    prog = comp.prog
    opts = dict(HIGHS_OPTIONS if highs_options is None else highs_options)
    minimise = dict(opts, **MINIMISE_OPTIONS) if highs_options is None else dict(opts)
    holds_relations = space.relations is not None and not space.relations.is_linear_empty
    if holds_relations:
        for chosen in (opts, minimise):
            for name in ("primal_feasibility_tolerance", "mip_feasibility_tolerance"):
                chosen[name] = min(float(chosen.get(name, 1e-7)), REL_FEASIBILITY_TOLERANCE)
    solver = _Backend(backend, tuple(sorted(opts.items())), tuple(sorted(minimise.items())))
    ledger = QueryLedger(n)
    if clean_class is None:
        with clf.charging(ledger, np.arange(n)):
            model_pred = _model_predict(clf, x_np)
    else:
        model_pred = np.asarray(clean_class, dtype=np.int64).reshape(n)
    parsed_pred = ens.predict(x_np)
    out = _empty(n, x_np)
    failures: list[int] = []
    n_pruned = n_searched = 0
    refused: list[int] = []
    for i in range(n):
        t0 = time.perf_counter()
        x0, yi = x_np[i], int(y_np[i])
        check = functools.partial(verify, i) if verify is not None else functools.partial(
            _model_check, clf, ledger, i, yi, target, space)
        if model_pred[i] != yi or (target is not None and model_pred[i] == target):
            out["radius"][i] = out["lower"][i] = 0.0
            out["status"][i] = MISCLASSIFIED if model_pred[i] != yi else SATISFIED
            out["adv_class"][i] = model_pred[i]
            out["seconds"][i] = time.perf_counter() - t0
            continue
        start = None
        if prune:
            start = _prune(comp, ens, check, space, x0, yi, target, threat.p, max_radius)
            if not start.closed() and _exhaust(comp, ens, check, space, x0, yi, target,
                                               threat.p, start, t0 + time_limit):
                n_searched += 1
        if start is not None and (start.closed() or math.isinf(start.lower) or (
                max_radius is not None and start.lower > max_radius)):
            best_r, best_x, best_cls, lower, failed, bad_bound = (
                start.radius, start.x, start.cls, start.lower, False, False)
            n_pruned += 1
        elif threat.p == math.inf and linf_search == "bisect" and not holds_relations:
            # (under relations the Linf radius need not be a crossing cost: minimised below)
            best_r, best_x, best_cls, lower, failed = _linf_search(
                prog, check, ens, space, x0, yi, target, t0 + time_limit, max_radius, solver,
                growth, start)
            bad_bound = False
        else:
            best_r, best_x, best_cls, lower, failed, bad_bound = _solve_input(
                prog, check, ens, space, threat, x0, yi, target, t0 + time_limit, max_radius,
                solver, growth, start)
        if failed:
            failures.append(i)
        if bad_bound:
            refused.append(i)
        if parsed_pred[i] != model_pred[i]:
            lower = 0.0  # the parsed model disagrees here: no certificate
        _finish(out, i, best_r, best_x, best_cls, lower, time.perf_counter() - t0)
    meta = {"solver": "exact-trees", "backend": backend, "time_limit": time_limit,
            "max_radius": max_radius, "tie_tol": prog.tie_tol, "n_predicates": prog.n_pred,
            "n_leaves": prog.n_leaf, "verification_failures": failures,
            "program_cached": cached, "closed_without_milp": n_pruned,
            "closed_by_leaf_search": n_searched,
            "refused_bounds": refused}
    return SolverOutput(x_adv=torch.as_tensor(out["x_adv"]), radius=out["radius"],
                        lower_bound=out["lower"], status=out["status"],
                        adv_prediction=out["adv_class"], forward_queries=ledger.forward.copy(),
                        seconds=out["seconds"], meta=meta)


# -- build once per (ensemble, feature space) -------------------------------------------------
@dataclass
class _Compiled:
    """What every input of one (ensemble, feature space) shares."""

    prog: Program
    boxes: LeafBoxes


#: Compiled programs of recent (ensemble, feature space) pairs, keyed on their content, so a
#: refitted or edited model, or another space, never meets a stale program.
_CACHE: OrderedDict[bytes, _Compiled] = OrderedDict()
_CACHE_SIZE = 8
_CACHE_LOCK = threading.Lock()


def _content_key(ens: TreeEnsemble, space: FeatureSpace) -> bytes:
    h = hashlib.blake2b(digest_size=20)
    for t in ens.trees:
        for a in (t.feature, t.threshold, t.left, t.right, t.value):
            h.update(np.ascontiguousarray(a).tobytes())
    h.update(ens.offset.tobytes())
    h.update(repr((ens.link, ens.n_classes, ens.n_features, ens.strict, ens.input_float32,
                   ens.zero_band, bool(ens.meta.get("float32_scores")))).encode())
    for a in (space.lower, space.upper, space.scale, space.mutable):
        h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
    h.update(repr(list(space.types)).encode())
    h.update(repr([np.asarray(g).tolist() for g in space.groups]).encode())
    return h.digest()


def _compiled(ens: TreeEnsemble, space: FeatureSpace) -> tuple[_Compiled, bool]:
    """The program of ``(ens, space)``, built on first use; ``(compiled, was_cached)``."""
    key = _content_key(ens, space)
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
            return hit, True
    prog = build_program(ens, space)
    comp = _Compiled(prog, leaf_boxes(prog, ens.n_features))
    with _CACHE_LOCK:
        _CACHE[key] = comp
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return comp, False


# -- pruning: a cheap bracket before any program is solved ------------------------------------
@dataclass
class _Bracket:
    """What :func:`_prune` settled for one input: ``cand[index]`` (Linf candidate radii of
    the input) is certified free of counterexamples (-1: nothing certified), so the radius is
    at least ``lower``; ``radius`` / ``x`` / ``cls`` a verified counterexample (``inf`` when
    none was found); ``clean`` the parsed class scores at the input ``(K,)``; ``costs`` the
    input's crossing costs and ``reach`` its leaves' reach ``(L,)``, both in the threat's
    norm (the leaf search starts from them)."""

    index: int
    lower: float
    radius: float
    x: np.ndarray
    cls: int
    clean: np.ndarray
    costs: Costs
    reach: np.ndarray

    def closed(self) -> bool:
        return (np.isfinite(self.radius)
                and self.radius - self.lower <= EXACT_RTOL * max(self.radius, 1e-12))


#: Beam width of the leaf walks (:func:`~robustscope.solvers.exact.trees.leaf_bounds.walk`; 1 would
#: be a
#: greedy walk). At the exact Linf radius, width 32 found a counterexample on 24 of 24
#: LightGBM inputs of the benchmark, width 1 on 17.
WALK_WIDTH = 32
#: Leaf walks tried per input (at candidate radii: up from the certified bound, then
#: bisection) before the MILP takes over.
MAX_WALKS = 10


def _prune(comp: _Compiled, ens: TreeEnsemble, check: Check, space: FeatureSpace,
           x0: np.ndarray, yi: int,
           target: int | None, p: float, max_radius: float | None) -> _Bracket:
    """Bracket one input's radius without a program: the independent-trees bound over the
    leaves' Lp reach certifies the largest radius it can; leaf walks (a beam search over
    the trees' reachable leaves) then look for the smallest candidate radius at which they
    find a counterexample: at the bound first, then at candidates ``1, 2, 4, ...`` steps
    above it (for L1 / L2 at least twice the last radius tried: their candidates are dense
    and the bound loose), then by bisection between the last miss and the first find (at
    most :data:`MAX_WALKS` walks). An L1 / L2 counterexample is polished (:func:`_polish`)
    before its radius counts. Counterexamples are verified with ``check``, smallest first.
    For Linf the candidates are the input's crossing costs (the radius is one of them), and
    ``index`` is set for :func:`_linf_search`; for L1 / L2 they are the leaves' reaches."""
    prog, boxes = comp.prog, comp.boxes
    costs = input_costs(prog, x0, space, p)
    reach_inf = leaf_reach(boxes, costs)
    own = reach_inf == 0.0  # the input's own leaf in every tree (every crossing costs > 0)
    clean = boxes.const + boxes.scores[own].sum(axis=0)
    if p == math.inf:
        reach = reach_inf
        all_costs = np.unique(costs.cost[~costs.frozen])
    else:
        reach = leaf_reach(boxes, costs, p)
        all_costs = np.unique(reach[np.isfinite(reach) & (reach > 0)])
    cand = all_costs if max_radius is None else all_costs[all_costs <= max_radius]
    k_cls = len(clean)
    # a class j beats the label when it gains at least its margin (argmax tie rule)
    # (a lower class wins a tie; summed in floating point an exact tie can come out a hair
    # below zero, so below the label only a deficit of tie_tol certifies)
    margins = np.array([-prog.tie_tol if j < yi else prog.tie_tol for j in range(k_cls)])
    margins[yi] = np.inf
    if target is not None:
        margins[np.arange(k_cls) != target] = np.inf
    index = certified_index(boxes, reach, cand, yi, margins) if len(cand) else -1
    # radius > cand[index], and every radius is at least the next candidate
    nxt = int(np.searchsorted(all_costs, cand[index], side="right")) if index >= 0 else 0
    lower = float(all_costs[nxt]) if nxt < len(all_costs) else np.inf
    bracket = _Bracket(index if p == math.inf else -1, lower, np.inf, x0.copy(), -1, clean,
                       costs, reach)
    if index + 1 >= len(cand):
        return bracket
    rivals = [target] if target is not None else [
        int(j) for j in np.argsort(clean[yi] - clean, kind="stable") if j != yi]
    found: list[tuple[float, np.ndarray]] = []  # (radius, point) the walks reached

    def attempt(k: int, miss: int) -> float | None:
        """A walk at ``cand[k]``: the radius of the point it reaches (pulled towards the
        input over the candidates above ``cand[miss]``), or None."""
        eps = float(cand[k])
        bound = max_gain(boxes, reach, eps, yi)
        for j in rivals:
            if bound[j] < margins[j]:
                continue  # this class cannot win within eps
            path = walk(boxes, reach, eps, boxes.scores[:, j] - boxes.scores[:, yi],
                        WALK_WIDTH, p, costs, need=margins[j] - boxes.const[j]
                        + boxes.const[yi])
            if path is None or not _decides(path[2], yi, target, prog.tie_tol):
                continue
            x_adv = box_point(prog, x0, path[0], path[1])
            if not _one_hot_ok(space, x_adv) or not space.relations_hold(x_adv[None])[0]:
                continue  # (the MILP holds the relations; a walk does not)
            if norm((x_adv - x0) / space.scale, p) > lower * (1 + EXACT_RTOL):
                x_adv = _shrink(ens, space, x0, x_adv, cand[miss + 1:k + 1], yi, target,
                                prog.tie_tol)
                if p != math.inf:
                    x_adv = _polish(prog, ens, space, x0, x_adv, p, yi, target)
            r = norm((x_adv - x0) / space.scale, p)
            if max_radius is not None and r > max_radius:
                continue  # beyond the radius of interest (L1 / L2 only)
            found.append((r, x_adv))
            return r
        return None

    # up from the bound in steps of 1, 2, 4, ... candidates, then bisect miss .. hit
    miss, hit, step, walks = index, len(cand), 1, 0
    while walks < MAX_WALKS and miss + 1 < len(cand):
        k = min(miss + step, len(cand) - 1)
        if p != math.inf:
            # (L1 / L2: the reaches are dense and the bound loose: double the radius instead)
            k = min(max(k, int(np.searchsorted(cand, 2.0 * cand[max(miss, 0)]))),
                    len(cand) - 1)
        walks += 1
        r = attempt(k, miss)
        if r is not None:
            hit = int(np.searchsorted(cand, r * (1 - 1e-12)))
            break
        miss, step = k, step * 2
    while walks < MAX_WALKS and hit - miss > 1:
        k = (miss + hit) // 2
        walks += 1
        r = attempt(k, miss)
        if r is None:
            miss = k
        else:
            hit = min(hit, int(np.searchsorted(cand, r * (1 - 1e-12))))
    for r, x_adv in sorted(found, key=lambda f: f[0]):
        cls = check(x_adv)
        if cls >= 0:  # (else the model settles a near-tie the other way: the MILP decides)
            bracket.radius, bracket.x, bracket.cls = r, x_adv, cls
            break
    return bracket


#: Nodes the branch and bound over leaf choices (:func:`_exhaust`) may visit per input and
#: class before the MILP takes over (about 1.5 s on the LightGBM model of the benchmark).
SEARCH_NODES = 100_000
#: Nodes per second the leaf search is assumed to reach at the least (the slowest measured
#: is about 65,000 / s): what is left of an input's time limit caps its nodes at this rate.
SEARCH_NODES_PER_SECOND = 20_000


def _exhaust(comp: _Compiled, ens: TreeEnsemble, check: Check, space: FeatureSpace,
             x0: np.ndarray, yi: int, target: int | None, p: float,
             bracket: _Bracket, deadline: float) -> bool:
    """Close an open bracket without a program, by branch and bound over leaf choices
    (:func:`~robustscope.solvers.exact.trees.leaf_bounds.cheapest`) below its counterexample's
    radius,
    one rival class at a time. A cheaper box found on the way becomes the counterexample
    once the model confirms it; when every class's search finishes within
    :data:`SEARCH_NODES` nodes (fewer when the input's ``deadline`` is near, see
    :data:`SEARCH_NODES_PER_SECOND`), no counterexample is cheaper and the bracket closes
    (``lower`` set to the radius less a relative 1e-12, the search's slack). Returns
    whether it closed. Not run (False) without a counterexample to start from, under
    one-hot groups or relations (the leaf boxes do not hold them) or for a targeted
    statement with more than two classes (no single gain to reach); the MILP decides
    those."""
    prog, boxes = comp.prog, comp.boxes
    holds_relations = space.relations is not None and not space.relations.is_linear_empty
    k_cls = len(bracket.clean)
    if (not np.isfinite(bracket.radius) or space.groups or holds_relations
            or (target is not None and k_cls > 2)):
        return False
    rivals = [target] if target is not None else [
        int(j) for j in np.argsort(bracket.clean[yi] - bracket.clean, kind="stable")
        if j != yi]
    complete = True
    for j in rivals:
        nodes = min(SEARCH_NODES,
                    int((deadline - time.perf_counter()) * SEARCH_NODES_PER_SECOND))
        if nodes <= 0:
            return False
        margin = -prog.tie_tol if j < yi else prog.tie_tol
        done, r, lo, hi, _ = cheapest(
            boxes, bracket.costs, bracket.reach, bracket.radius,
            boxes.scores[:, j] - boxes.scores[:, yi],
            margin - boxes.const[j] + boxes.const[yi], p, nodes)
        complete &= done
        if r < bracket.radius:
            x_adv = box_point(prog, x0, lo, hi)
            cls = -1
            if _decides(ens.class_scores(x_adv[None])[0], yi, target, prog.tie_tol):
                cls = check(x_adv)
            if cls < 0:
                return False  # (the model settles a near tie the other way: the MILP decides)
            bracket.radius, bracket.x, bracket.cls = norm((x_adv - x0) / space.scale, p), \
                x_adv, cls
    if complete:
        bracket.lower = max(bracket.lower, bracket.radius * (1 - 1e-12))
    return complete


#: Radii tried at once when a walk's counterexample is pulled towards its input.
SHRINK_STEPS = 24


def _shrink(ens: TreeEnsemble, space: FeatureSpace, x0: np.ndarray, x_adv: np.ndarray,
            radii: np.ndarray, yi: int, target: int | None, tie_tol: float) -> np.ndarray:
    """Pull a counterexample ``(d,)`` towards ``x0``: its move clipped to each Linf radius in
    ``radii`` (at most :data:`SHRINK_STEPS` of them, one batch through the parsed ensemble);
    the smallest that still decides is returned (``x_adv`` when none does). Clipping keeps
    every feature between ``x0`` and ``x_adv`` (inside the bounds; immutable features do not
    move); a clipped point that would give an integer, binary or one-hot feature a value
    other than the input's or the counterexample's is not tried."""
    if len(radii) == 0:
        return x_adv
    radii = radii[np.unique(np.linspace(0, len(radii) - 1, SHRINK_STEPS).astype(np.int64))]
    step = (x_adv - x0)[None, :]
    reach = radii[:, None] * space.scale[None, :]
    pts = x0[None, :] + np.clip(step, -reach, reach)
    integral = np.isin(space.types, INTEGRAL_TYPES)
    moved = (pts != x0[None, :]) & (pts != x_adv[None, :])
    pts = pts[~(moved & integral[None, :]).any(axis=1)]
    pts = pts[space.relations_hold(pts)]
    if len(pts) == 0:
        return x_adv
    scores = ens.class_scores(pts)
    for row, sc in zip(pts, scores, strict=True):
        if _decides(sc, yi, target, tie_tol):
            return row
    return x_adv


#: Rounds of :func:`_polish` per counterexample (each moves one feature back).
POLISH_ROUNDS = 32


def _polish(prog: Program, ens: TreeEnsemble, space: FeatureSpace, x0: np.ndarray,
            x_adv: np.ndarray, p: float, yi: int, target: int | None) -> np.ndarray:
    """Lower an L1 / L2 counterexample's norm by moving single features back towards the
    input (to any cell in between, or all the way) while the decision stays changed.

    Every moved feature offers the nearest valid values of the cells between the input and
    the counterexample (and the input's own value); one batch through the parsed ensemble
    scores them all, the cheapest that still decides is taken, and the round repeats (at
    most :data:`POLISH_ROUNDS`). Features of one-hot groups stay as they are; points that
    break a relation are not taken. Returns a point ``(d,)`` whose norm is at most
    ``x_adv``'s (``x_adv`` itself when nothing helps), to be verified by the model."""
    grouped = np.zeros(len(x0), dtype=bool)
    for g in space.groups:
        grouped[np.asarray(g)] = True
    scale = space.scale
    best = x_adv.copy()
    for _ in range(POLISH_ROUNDS):
        feats, values = [], []
        for f in np.flatnonzero((best != x0) & ~grouped):
            preds = prog.feature_preds[f]
            if best[f] > x0[f]:  # cells whose nearest valid value is their lower cut
                cut = prog.pred_cut[preds]
                vals = cut[(cut > x0[f]) & (cut < best[f])]
            else:  # cells whose nearest valid value is the largest left of their upper cut
                left = prog.pred_left[preds]
                vals = left[(prog.pred_cut[preds] <= x0[f]) & (left > best[f])]
            vals = np.append(vals, x0[f])
            feats.append(np.full(len(vals), f))
            values.append(vals)
        if not feats:
            break
        f_idx, v = np.concatenate(feats), np.concatenate(values)
        pts = np.repeat(best[None, :], len(v), axis=0)
        pts[np.arange(len(v)), f_idx] = v
        cost = np.linalg.norm((pts - x0[None, :]) / scale[None, :], ord=p, axis=1)
        scores = ens.class_scores(pts)
        ok = np.array([_decides(s, yi, target, prog.tie_tol) for s in scores])
        if space.relations is not None and ok.any():
            ok[ok] = space.relations_hold(pts[ok])
        if not ok.any():
            break
        best = pts[np.flatnonzero(ok)[np.argmin(cost[ok])]]
    return best


def _decides(scores: np.ndarray, yi: int, target: int | None, tie_tol: float) -> bool:
    """Whether class scores ``(K,)`` change the decision (reach the target), with a margin
    of ``tie_tol`` wherever argmax's tie rule would not already settle it."""
    winner = int(np.argmax(scores))
    if target is not None and winner != target:
        return False
    if winner == yi:
        return False
    others = np.delete(scores, winner)
    return bool(scores[winner] - others.max() >= tie_tol)


def _one_hot_ok(space: FeatureSpace, x: np.ndarray) -> bool:
    return all(np.isclose(x[np.asarray(g)].sum(), 1.0) for g in space.groups)


def _solve_input(prog: Program, check: Check, ens: TreeEnsemble,
                 space: FeatureSpace, threat: LpThreat, x0: np.ndarray, yi: int,
                 target: int | None, deadline: float, max_radius: float | None,
                 backend: _Backend, growth: float, start: _Bracket | None = None,
                 ) -> tuple[float, np.ndarray, int, float, bool]:
    """Radius search for one correctly classified input.

    Returns ``(radius, x_adv, adv_class, lower_bound, verification_failed, bound_refused)``.
    Programs are solved at growing cutoffs ``eps`` (radius units): at each level every other
    class is tried (closest clean score first) with the cutoff lowered to the best radius
    found; a level where no class is feasible certifies ``radius > eps``. With a ``start``
    bracket (from :func:`_prune`) holding a counterexample, one level at its radius remains.
    """
    linf = threat.p == math.inf
    power = 2.0 if threat.p == 2.0 else 1.0
    costs = input_costs(prog, x0, space, threat.p)
    rel = _rel_input(space, x0)
    cap = np.inf if rel is None else REL_RADIUS_CAP ** power
    free = costs.cost[~costs.frozen]
    if len(free) == 0:  # nothing can move: no counterexample at any radius
        return np.inf, x0.copy(), -1, np.inf, False, False
    goals = _goals(ens.class_scores(x0[None])[0] if start is None else start.clean, yi,
                   target)
    lower = float(free.min())  # any counterexample crosses at least one cut
    best_r, best_x, best_cls = np.inf, x0.copy(), -1
    if start is not None:
        lower = max(lower, start.lower)
        best_r, best_x, best_cls = start.radius, start.x, start.cls
    # growing cutoffs keep the programs small; a counterexample's radius caps them
    levels, eps, top = [], max(lower, 1e-12) * growth, float(free.max())
    # (with a counterexample from the walks, one level at its radius: the minimisation starts
    # from it, and its dual bound certified at least as much as the levels below did)
    while (eps < top and eps < best_r and (max_radius is None or eps < max_radius)
           and not np.isfinite(best_r)):
        levels.append(eps)
        eps *= growth
    levels.append(min(best_r, np.inf if max_radius is None else float(max_radius)))
    failed = refused = False
    # per goal, the smallest radius of a verified counterexample that meets it (its cell is
    # in every program of that goal whose cutoff it is within)
    in_goal: dict[tuple, float] = {}
    if start is not None and start.cls >= 0:
        pairs = goals[0].pairs if target is not None else ((start.cls, yi),)
        in_goal[pairs] = start.radius
    reduced: dict[float, _Reduced] = {}
    for level in levels:
        bounds = []
        for goal in goals:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                bounds.append(lower ** power)
                continue
            cutoff = min(level, best_r) ** power
            if cutoff not in reduced:
                reduced[cutoff] = _reduce(prog, costs, cutoff, linf, rel=rel)
            red = reduced[cutoff]
            known = in_goal.get(goal.pairs, np.inf) ** power
            incumbent = None
            if known <= cutoff * (1 + BOUND_SLACK):
                # the minimisation prunes against the verified counterexample's cost from the
                # start (a MIP start with its cell did the same, but HiGHS 1.16 with presolve
                # then returned that start's values beside a better optimal objective)
                incumbent = known
            else:
                # a feasibility program first: cheap to refute, and when it finds a move its
                # cost tightens the cutoff of the minimisation that follows
                probe = _solve_class(red, goal.with_margin(prog.tie_tol), cutoff, remaining,
                                     backend, objective=False)
                if probe.status == "infeasible":
                    bounds.append(min(cutoff, cap))
                    continue
                if probe.p is not None and rel is None:
                    # (under relations the point is only near the program's solution)
                    moved = construct(prog, x0, probe.p)
                    cost = norm((moved - x0) / space.scale, threat.p) ** power
                    if cost < cutoff:
                        cutoff = cost
                        red = _reduce(prog, costs, cutoff, linf)
            res, x_adv, cls, ok = _attempt(prog, red, check, x0, goal, cutoff, deadline,
                                           backend, incumbent=incumbent)
            failed |= res.p is not None and not ok
            if ok:
                r = norm((x_adv - x0) / space.scale, threat.p)
                in_goal[goal.pairs] = min(in_goal.get(goal.pairs, np.inf), r)
                if r < best_r:
                    best_r, best_x, best_cls = r, x_adv, cls
            # no move within the cutoff is cheaper than the dual bound (the program holds
            # every such move), so the radius is at least the smaller of the two; unless a
            # counterexample verified for this goal costs less than the bound
            claimed = np.inf if res.status == "infeasible" else res.dual_bound
            if known <= cutoff * (1 + BOUND_SLACK) and claimed > known * (1 + BOUND_SLACK):
                refused = True
                bounds.append(lower ** power)
            else:
                bounds.append(min(claimed, cutoff, cap))
        # a dual bound can be slightly negative (or absent) when HiGHS stops early
        level_bound = max(min(bounds), 0.0) ** (1.0 / power) if bounds else lower
        lower = max(lower, min(level_bound, best_r))
        if best_r <= level * (1 + 1e-9) or failed or deadline - time.perf_counter() <= 0:
            break
    if not linf and np.isfinite(best_r) and best_r > lower * (1 + EXACT_RTOL):
        # the bracket stayed open (time limit): a polished counterexample may still be nearer
        near = _polish(prog, ens, space, x0, best_x, threat.p, yi, target)
        r = norm((near - x0) / space.scale, threat.p)
        if r < best_r * (1 - 1e-12):
            cls = check(near)
            if cls >= 0:
                best_r, best_x, best_cls = r, near, cls
    return best_r, best_x, best_cls, lower, failed, refused


@dataclass(frozen=True)
class _Goal:
    """What a counterexample must achieve: every ``(winner, loser)`` pair's winner scores at
    least the loser (a tie counts when the winner has the lower index, as in argmax)."""

    pairs: tuple[tuple[int, int], ...]

    def with_margin(self, tie_tol: float, factor: float = 1.0) -> list[tuple[int, int, float]]:
        return [(w, lo, 0.0 if (w < lo and factor == 1.0) else tie_tol * factor)
                for w, lo in self.pairs]


def _goals(clean: np.ndarray, yi: int, target: int | None) -> list[_Goal]:
    """Decision change: one goal per other class, closest clean score first. Targeted: one
    goal, the target above every other class."""
    if target is not None:
        return [_Goal(tuple((target, k) for k in range(len(clean)) if k != target))]
    order = [int(j) for j in np.argsort(clean[yi] - clean, kind="stable") if j != yi]
    return [_Goal(((j, yi),)) for j in order]


def _holds(cls: int, yi: int, target: int | None) -> bool:
    return cls == target if target is not None else cls != yi


def _attempt(prog: Program, red: _Reduced, check: Check, x0: np.ndarray,
             goal: _Goal, cutoff: float, deadline: float,
             backend: _Backend, incumbent: float | None = None,
             ) -> tuple[_Solve, np.ndarray, int, bool]:
    """Solve for ``goal``, build the counterexample and verify it with ``check`` (the model,
    called again); when the model disagrees (a score tie settled the other way), ask for a
    clearer margin. Returns ``(solve, x_adv, adv_class, verified)``."""
    res = _solve_class(red, goal.with_margin(prog.tie_tol), cutoff,
                       deadline - time.perf_counter(), backend, incumbent=incumbent)
    if res.p is None or not np.isfinite(res.objective):
        return res, x0, -1, False
    x_adv = _build_point(prog, x0, res, red)
    cls = check(x_adv)
    ok = cls >= 0
    for tries in (1, 2):
        if ok or deadline - time.perf_counter() <= 0:
            break
        retry = _solve_class(red, goal.with_margin(prog.tie_tol, 100.0 ** tries), cutoff,
                             deadline - time.perf_counter(), backend)
        if retry.p is None or not np.isfinite(retry.objective):
            break
        x_adv = _build_point(prog, x0, retry, red)
        cls = check(x_adv)
        ok = cls >= 0
    return res, x_adv, cls, ok


def _linf_search(prog: Program, check: Check, ens: TreeEnsemble,
                 space: FeatureSpace, x0: np.ndarray, yi: int, target: int | None,
                 deadline: float, max_radius: float | None, backend: _Backend, growth: float,
                 start: _Bracket | None = None,
                 ) -> tuple[float, np.ndarray, int, float, bool]:
    """Linf radius by search over the finitely many candidate values.

    The Linf radius is the crossing cost of some cut, so it is one of the sorted distinct
    costs ``C``. A *feasibility* program at ``C[k]`` (only cuts costing at most ``C[k]`` may
    move; no objective) says whether some class can win; the search grows ``k``
    geometrically, then bisects. An infeasible ``C[k]`` certifies ``radius >= C[k+1]``; a
    feasible one gives a verified counterexample whose norm is itself in ``C``. A ``start``
    bracket (from :func:`_prune`) opens the search between its certified index and its
    counterexample, so programs only hold the cuts within its radius.
    """
    costs = input_costs(prog, x0, space, math.inf)
    all_costs = np.unique(costs.cost[~costs.frozen])
    if len(all_costs) == 0:  # nothing can move
        return np.inf, x0.copy(), -1, np.inf, False
    cand = all_costs if max_radius is None else all_costs[all_costs <= max_radius]
    clean = ens.class_scores(x0[None])[0] if start is None else start.clean
    goals = _goals(clean, yi, target)
    best = [np.inf, x0.copy(), -1] if start is None else [start.radius, start.x, start.cls]
    failed = False

    def probe(k: int) -> bool | None:
        nonlocal failed
        red = _reduce(prog, costs, float(cand[k]), True, feasibility=True)
        for goal in goals:
            if deadline - time.perf_counter() <= 0:
                return None
            res, x_adv, cls, ok = _attempt(prog, red, check, x0, goal, float(cand[k]),
                                           deadline, backend)
            if ok:
                r = norm((x_adv - x0) / space.scale, math.inf)
                if r < best[0]:
                    best[:] = [r, x_adv, cls]
                return True
            if res.p is not None:
                failed = True
                return None
            if res.status != "infeasible":
                return None  # time limit without an answer
        return False

    lo, hi = -1, len(cand)  # cand[lo] infeasible, cand[hi] feasible
    k = min(len(cand) - 1, int(np.searchsorted(cand, cand[0] * growth))) if len(cand) else -1
    stopped = False  # a probe ran out of time or failed verification
    if start is not None:
        lo = min(start.index, len(cand) - 1)
        k = lo + 1 if lo < len(cand) - 1 else -1
        if np.isfinite(best[0]):
            hi = min(hi, int(np.searchsorted(cand, best[0] * (1 - 1e-12))))
            k = -1
            if lo + 1 < hi:  # the walks' counterexample is often the radius: probe below it
                found = probe(hi - 1)
                if found is None:
                    stopped = True
                elif found:
                    hi = int(np.searchsorted(cand, best[0] * (1 - 1e-12)))
                else:
                    lo = hi - 1
    while 0 <= k < len(cand):
        found = probe(k)
        if found is None:
            break
        if found:
            hi = int(np.searchsorted(cand, best[0] * (1 - 1e-12)))
            break
        lo = k
        k = min(len(cand) - 1, max(k + 1, int(np.searchsorted(cand, cand[k] * growth))))
        if lo == len(cand) - 1:
            break
    while not stopped and hi - lo > 1 and deadline - time.perf_counter() > 0:
        found = probe((lo + hi) // 2)
        if found is None:
            break
        if found:
            hi = int(np.searchsorted(cand, best[0] * (1 - 1e-12)))
        else:
            lo = (lo + hi) // 2
    # an infeasible cand[lo] means radius > cand[lo]: the next candidate value is a bound
    nxt = int(np.searchsorted(all_costs, cand[lo], side="right")) if lo >= 0 else 0
    lower = float(all_costs[nxt]) if nxt < len(all_costs) else np.inf
    return best[0], best[1], best[2], lower, failed


def _empty(n: int, x: np.ndarray) -> dict:
    return {"radius": np.full(n, np.inf), "lower": np.zeros(n), "x_adv": x.copy(),
            "status": np.full(n, CENSORED, dtype=object), "adv_class": np.full(n, -1),
            "seconds": np.zeros(n)}


def _finish(out: dict, i: int, r: float, x_adv: np.ndarray, cls: int, lower: float,
            seconds: float) -> None:
    out["seconds"][i] = seconds
    if np.isfinite(r):
        lower = min(lower, r)
        out["radius"][i] = r
        out["x_adv"][i] = x_adv
        out["adv_class"][i] = cls
        closed = r - lower <= EXACT_RTOL * max(r, 1e-12)
        out["status"][i] = EXACT if closed else ATTACKED
        out["lower"][i] = r if closed else lower
    else:
        out["lower"][i] = lower
        out["status"][i] = CENSORED


def _as_classifier(model: object) -> TreeEnsembleClassifier:
    if isinstance(model, TreeEnsembleClassifier):
        return model
    if isinstance(model, TreeEnsemble):
        raise ModelError("exact_tree_radius needs the model itself (to verify counterexamples), "
                         "not only its parsed ensemble")
    if is_tree_ensemble(model):
        return TreeEnsembleClassifier(model, parse_tree_model(model))
    raise ModelError(f"{type(model).__name__} is not a tree ensemble the exact solver reads "
                     "(XGBClassifier, LGBMClassifier, scikit-learn tree classifiers)")


def _model_predict(clf: TreeEnsembleClassifier, x: np.ndarray) -> np.ndarray:
    return clf.predict(torch.as_tensor(x, dtype=torch.float64)).cpu().numpy()


def _model_check(clf: TreeEnsembleClassifier, ledger: QueryLedger, i: int, yi: int,
                 target: int | None, space: FeatureSpace, x_adv: np.ndarray) -> int:
    """The default check: the model's class at ``x_adv`` (charged to input ``i``) when the
    statement holds there and ``x_adv`` satisfies the space's relations, else -1."""
    if not space.relations_hold(x_adv[None])[0]:
        return -1
    with clf.charging(ledger, np.array([i])):
        cls = int(_model_predict(clf, x_adv[None])[0])
    return cls if _holds(cls, yi, target) else -1
