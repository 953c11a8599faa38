"""The input-independent program of a tree ensemble over a feature space, and its costs.

Every split threshold used on a feature becomes a *cut* at the smallest valid value that the
library routes right of it (float32 casts, ``<`` vs ``<=``, LightGBM's zero band, bounds and
integer types folded in); a *predicate* ``p = 1`` says "left of the cut". Trees are stored
with their inner nodes mapped to predicates (or to a fixed side), and the leaves' class
scores. :func:`build_program` runs once per (ensemble, feature space);
:func:`input_costs` gives, per input, each cut's crossing cost in scaled units.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from robustscope.core.errors import InputError
from robustscope.core.space import FeatureSpace
from robustscope.models.trees import TreeEnsemble

INTEGRAL_TYPES = ("integer", "binary", "categorical")


def right_start(t: np.ndarray, strict: bool, float32: bool,
                 zero_band: float = 0.0) -> np.ndarray:
    """Smallest float64 value ``v`` that the library routes right of threshold ``t``; with a
    ``zero_band`` (values ``|v| <= zero_band`` read as 0, LightGBM) the band moves as one."""
    r = _right_start_plain(t, strict, float32)
    if zero_band <= 0:
        return r
    t = np.asarray(t, dtype=np.float64)
    in_band = (r > -zero_band) & (r <= zero_band)
    # a band value reads as 0: right of a negative threshold, left of a non-negative one
    return np.where(in_band, np.where(t < 0, -zero_band, np.nextafter(zero_band, np.inf)), r)


def _right_start_plain(t: np.ndarray, strict: bool, float32: bool) -> np.ndarray:
    t = np.asarray(t, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if not float32:
            return t.copy() if strict else np.nextafter(t, np.inf)
        t32 = t.astype(np.float32)
        t32d = t32.astype(np.float64)
        bump = t32d < t if strict else t32d <= t
        u32 = np.where(bump, np.nextafter(t32, np.float32(np.inf)), t32)
        w32 = np.nextafter(u32, np.float32(-np.inf))
        m = (u32.astype(np.float64) + w32.astype(np.float64)) / 2.0  # exact in float64
        r = np.where(m.astype(np.float32) >= u32, m, np.nextafter(m, np.inf))
        return np.where(np.isfinite(u32), r, u32.astype(np.float64))


@dataclass
class TreeNodes:
    """One tree in program form: ``pred[i]`` is the predicate index of an inner node, or
    ``LEFT`` / ``RIGHT`` when every valid value takes that side, or ``LEAF``."""

    pred: np.ndarray
    left: np.ndarray
    right: np.ndarray
    scores: np.ndarray  # (n_nodes, n_classes) class-score contribution at leaves


LEAF, LEFT, RIGHT = -3, -2, -1


@dataclass
class Program:
    """The input-independent part of the MILP for one (ensemble, feature space)."""

    pred_feature: np.ndarray   # (n_pred,)
    pred_cut: np.ndarray       # (n_pred,) cut value r: x < r is "left" (p = 1)
    pred_left: np.ndarray      # (n_pred,) largest valid value left of the cut
    feature_preds: list[np.ndarray]  # per feature, predicate indices sorted by cut
    trees: list[TreeNodes]
    const_scores: np.ndarray   # (n_classes,) offset plus constant trees
    groups: list[np.ndarray]   # one-hot groups as predicate indices (cut at 1)
    tie_tol: float

    @property
    def n_pred(self) -> int:
        return len(self.pred_cut)

    @property
    def n_leaf(self) -> int:
        return int(sum((t.pred == LEAF).sum() for t in self.trees))


def build_program(ens: TreeEnsemble, space: FeatureSpace) -> Program:
    d = ens.n_features
    types = space.types
    integral = np.isin(types, INTEGRAL_TYPES)
    lo = np.where(integral, np.ceil(space.lower), space.lower)
    hi = np.where(integral, np.floor(space.upper), space.upper)
    # cut of each (feature, threshold); categorical features always get the cut at 1
    thresholds = ens.thresholds_by_feature()
    cut_values: list[np.ndarray] = []
    for f in range(d):
        r = _cut_of(thresholds[f], ens, bool(integral[f]))
        if types[f] == "categorical":
            r = np.append(r, 1.0)
        active = (r > lo[f]) & (r <= hi[f])
        cut_values.append(np.unique(r[active]))
    pred_feature = np.concatenate([np.full(len(c), f, dtype=np.int64)
                                   for f, c in enumerate(cut_values)])
    pred_cut = np.concatenate(cut_values)
    pred_left = np.where(integral[pred_feature], pred_cut - 1.0,
                         np.nextafter(pred_cut, -np.inf))
    feature_preds, start = [], 0
    for c in cut_values:
        feature_preds.append(np.arange(start, start + len(c)))
        start += len(c)

    const = ens.offset.copy()
    trees = []
    for tree in ens.trees:
        scores = tree.value
        if ens.link == "sigmoid":
            scores = np.hstack([np.zeros_like(scores), scores])
        if tree.feature[0] < 0:  # a single leaf: a constant
            const = const + tree.value[0]
            continue
        pred = np.full(len(tree.feature), LEAF, dtype=np.int64)
        for node in np.flatnonzero(tree.feature >= 0):
            f = int(tree.feature[node])
            r = _cut_of(tree.threshold[node:node + 1], ens, bool(integral[f]))[0]
            if r <= lo[f]:
                pred[node] = RIGHT
            elif r > hi[f]:
                pred[node] = LEFT
            else:
                pred[node] = feature_preds[f][int(np.searchsorted(cut_values[f], r))]
        trees.append(TreeNodes(pred, tree.left, tree.right, scores))
    if ens.link == "sigmoid":
        const = np.concatenate([[0.0], const])
    groups = []
    for g in space.groups:
        members = []
        for f in g:
            k = int(np.searchsorted(cut_values[f], 1.0))
            if k >= len(cut_values[f]) or cut_values[f][k] != 1.0:
                raise InputError(f"feature '{space.names[f]}': a categorical feature must "
                                 "allow both 0 and 1 (bounds [0, 1])")
            members.append(int(feature_preds[f][k]))
        groups.append(np.array(members, dtype=np.int64))
    spread = sum(float(np.abs(t.value).max()) for t in ens.trees) + float(np.abs(const).max())
    tie_tol = (1e-6 if ens.meta.get("float32_scores") else 1e-9) * (1.0 + spread)
    return Program(pred_feature, pred_cut, pred_left, feature_preds, trees, const, groups,
                    tie_tol)


def _cut_of(t: np.ndarray, ens: TreeEnsemble, integral: bool) -> np.ndarray:
    r = right_start(t, ens.strict, ens.input_float32, ens.zero_band)
    return np.ceil(r) if integral else r


# -- per input ---------------------------------------------------------------------------------
@dataclass
class Costs:
    origin_left: np.ndarray  # (n_pred,) bool: x0 < cut, i.e. p = 1 at the input
    cost: np.ndarray         # (n_pred,) scaled distance to the nearest valid value across
    frozen: np.ndarray       # (n_pred,) bool: held at the input's side (immutable feature)
    power: float             # 2 for L2 (the program minimises the squared norm), else 1


def input_costs(prog: Program, x0: np.ndarray, space: FeatureSpace, p: float) -> Costs:
    f = prog.pred_feature
    origin_left = x0[f] < prog.pred_cut
    dist = np.where(origin_left, prog.pred_cut - x0[f], x0[f] - prog.pred_left)
    return Costs(origin_left, dist / space.scale[f], ~space.mutable[f],
                  2.0 if p == 2.0 else 1.0)



def construct(prog: Program, x0: np.ndarray, p: np.ndarray) -> np.ndarray:
    """The nearest valid point of the cell that predicates ``p`` select, ``(d,)``."""
    x = x0.copy()
    for f, preds in enumerate(prog.feature_preds):
        if len(preds) == 0:
            continue
        cuts = prog.pred_cut[preds]
        right_of = p[preds] < 0.5
        a = cuts[right_of].max() if right_of.any() else -np.inf
        b_idx = np.flatnonzero(~right_of)
        if x0[f] < a:
            x[f] = a
        elif len(b_idx) and x0[f] >= cuts[b_idx[0]]:
            x[f] = prog.pred_left[preds[b_idx[0]]]
    return x


def norm(u: np.ndarray, p: float) -> float:
    return float(np.linalg.norm(u, ord=p)) if len(u) else 0.0
