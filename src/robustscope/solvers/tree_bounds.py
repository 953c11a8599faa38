"""Cheap brackets for tree ensembles: a sound lower bound and a tree-aware upper bound.

Both work on the leaves of a :class:`~robustscope.solvers.tree_program.Program`, each seen
as a box: on every feature a leaf holds the values in ``[cut[lo], cut[hi])``, where ``lo`` is
the largest cut its path must be right of and ``hi`` the smallest cut it must be left of
(predicate indices; within a feature, indices are ordered as the cuts).

For one input, a leaf's *reach* is the Lp distance (scaled units) from the input to the
nearest valid point of its box (for Linf: the largest crossing cost of a cut its path is on
the other side of). Every point of the ball of radius ``eps`` lies in leaves of reach
``<= eps``, so

- **lower bound** (:meth:`LeafBoxes.certified_index`): summing, tree by tree, the largest
  score change among the leaves within reach ``eps`` over-estimates every class's gain on
  the ball. When no class can gain enough, no counterexample has norm ``<= eps``. Trees are
  bounded independently (no clique merging), so the bound is sound by construction; it is
  exact while at most one tree has more than one leaf within reach, and loosens as the ball
  grows. A bound that holds up to the reach value ``u_m`` holds up to the next one.
- **upper bound** (:meth:`LeafBoxes.greedy`): walk to neighbouring leaf boxes: trees with
  more than one leaf within reach, most influential first, each pick the best leaf whose
  box still meets the boxes picked so far; the point nearest to the input in the common box
  is a candidate counterexample (its scores are the sum of the picked leaves), to be
  verified by calling the model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from robustscope.solvers.tree_program import LEAF, LEFT, Costs, Program


@dataclass
class LeafBoxes:
    """The leaves of a program's trees as boxes, flattened; ``L`` leaves, ``K`` classes,
    ``d`` features, ``n_pred`` predicates. Built once per program."""

    tree_start: np.ndarray   # (n_trees,) first leaf of each tree; a tree's leaves are contiguous
    scores: np.ndarray       # (L, K) class-score contribution
    const: np.ndarray        # (K,) scores of the constant part
    path_ptr: np.ndarray     # (L + 1,) CSR pointers into path_pred / path_left
    path_pred: np.ndarray    # predicate on the leaf's path
    path_left: np.ndarray    # True: the leaf lies left of that cut
    blocked: np.ndarray      # (L,) a fixed node routes every valid value away from the leaf
    lo: np.ndarray           # (L, d) largest cut index the leaf is right of, -1 for none
    hi: np.ndarray           # (L, d) smallest cut index the leaf is left of, n_pred for none

    @property
    def n_trees(self) -> int:
        return len(self.tree_start)


def leaf_boxes(prog: Program, n_features: int) -> LeafBoxes:
    """Flatten ``prog``'s trees into :class:`LeafBoxes` (once per program)."""
    n_pred = prog.n_pred
    scores: list[np.ndarray] = []
    paths: list[list[tuple[int, bool]]] = []
    blocked: list[bool] = []
    tree_start: list[int] = []
    for tree in prog.trees:
        tree_start.append(len(scores))
        stack: list[tuple[int, list[tuple[int, bool]], bool]] = [(0, [], False)]
        while stack:
            node, path, dead = stack.pop()
            k = int(tree.pred[node])
            if k == LEAF:
                scores.append(tree.scores[node])
                paths.append(path)
                blocked.append(dead)
                continue
            if k < 0:  # a fixed side: every valid value goes there
                stack.append((int(tree.right[node]), path, dead or k == LEFT))
                stack.append((int(tree.left[node]), path, dead or k != LEFT))
                continue
            stack.append((int(tree.right[node]), path + [(k, False)], dead))
            stack.append((int(tree.left[node]), path + [(k, True)], dead))
    n_leaf = len(scores)
    lo = np.full((n_leaf, n_features), -1, dtype=np.int64)
    hi = np.full((n_leaf, n_features), n_pred, dtype=np.int64)
    for i, path in enumerate(paths):
        for k, left in path:
            f = int(prog.pred_feature[k])
            if left:
                hi[i, f] = min(hi[i, f], k)
            else:
                lo[i, f] = max(lo[i, f], k)
    ptr = np.zeros(n_leaf + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(p) for p in paths])
    return LeafBoxes(
        tree_start=np.asarray(tree_start, dtype=np.int64),
        scores=np.asarray(scores, dtype=np.float64).reshape(n_leaf, len(prog.const_scores)),
        const=prog.const_scores.copy(),
        path_ptr=ptr,
        path_pred=np.asarray([k for p in paths for k, _ in p], dtype=np.int64),
        path_left=np.asarray([s for p in paths for _, s in p], dtype=bool),
        blocked=np.asarray(blocked, dtype=bool),
        lo=lo, hi=hi)


def leaf_reach(boxes: LeafBoxes, costs: Costs, p: float = np.inf) -> np.ndarray:
    """Lp reach of every leaf for one input: the ``p``-norm distance (scaled units) from the
    input to the nearest valid point of the leaf's box, ``(L,)`` (``inf``: no valid point,
    or an immutable feature must change). ``p`` is ``inf``, 1 or 2."""
    cost = np.where(costs.frozen, np.inf, costs.cost)
    if p == np.inf:
        # crossing needed when the leaf's side differs from the input's side of the cut
        wrong = boxes.path_left != costs.origin_left[boxes.path_pred]
        per = np.where(wrong, cost[boxes.path_pred], 0.0)
        reach = np.zeros(len(boxes.blocked))
        nonempty = np.diff(boxes.path_ptr) > 0
        if per.size:
            reach[nonempty] = np.maximum.reduceat(per, boxes.path_ptr[:-1][nonempty])
    else:
        # per feature, at most one side of the box is across from the input; index -1
        # (no lower cut) and n_pred (no upper cut) read the appended 0
        up = np.append(np.where(costs.origin_left, cost, 0.0), 0.0)
        down = np.append(np.where(costs.origin_left, 0.0, cost), 0.0)
        per_feature = up[boxes.lo] + down[boxes.hi]
        reach = (per_feature.sum(axis=1) if p == 1 else
                 np.sqrt((per_feature ** 2).sum(axis=1)))
    reach[boxes.blocked] = np.inf
    return reach


def max_gain(boxes: LeafBoxes, reach: np.ndarray, eps: float, label: int) -> np.ndarray:
    """Upper bound on ``score_j - score_label`` over the ball of radius ``eps`` (the norm
    ``reach`` was measured in), per class ``j``: ``(K,)``."""
    diff = boxes.scores - boxes.scores[:, [label]]
    masked = np.where((reach <= eps)[:, None], diff, -np.inf)
    per_tree = np.maximum.reduceat(masked, boxes.tree_start, axis=0)
    return boxes.const - boxes.const[label] + per_tree.sum(axis=0)


def certified_index(boxes: LeafBoxes, reach: np.ndarray, cand: np.ndarray, label: int,
                    margins: np.ndarray) -> int:
    """Largest ``k`` such that no class ``j`` gains ``margins[j]`` over the label anywhere
    in the ball of radius ``cand[k]`` (``cand`` ascending); -1 when none. ``margins`` is
    ``(K,)`` with ``inf`` for classes that need not be beaten (the label itself)."""
    def safe(k: int) -> bool:
        return bool((max_gain(boxes, reach, float(cand[k]), label) < margins).all())

    lo, hi = -1, len(cand)  # safe(lo) holds, safe(hi) fails (sentinels)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if safe(mid):
            lo = mid
        else:
            hi = mid
    return lo


def greedy(boxes: LeafBoxes, reach: np.ndarray, eps: float, gain: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Pick one leaf per tree within reach ``eps`` so that the boxes meet, greedily
    maximising ``gain`` (``(L,)``, e.g. a class's score minus the label's).

    Returns ``(lo, hi, scores)``: the common box (cut indices per feature, ``(d,)`` each) and
    the class scores of every point in it (``(K,)``); None when the picks do not meet (a
    tree's reachable leaves all miss the box: cannot happen for a partition, kept as a guard).
    """
    within = reach <= eps
    ends = np.append(boxes.tree_start[1:], len(reach))
    counts = np.add.reduceat(within.astype(np.int64), boxes.tree_start)
    total = boxes.const.copy()
    single = np.flatnonzero(counts == 1)
    for t in single:  # one leaf within reach: the whole ball lies in it
        a, b = boxes.tree_start[t], ends[t]
        total += boxes.scores[a + int(np.argmax(within[a:b]))]
    multi = np.flatnonzero(counts > 1)
    masked = np.where(within, gain, -np.inf)
    best = np.maximum.reduceat(masked, boxes.tree_start)[multi]
    own = np.array([gain[boxes.tree_start[t] + int(np.argmin(reach[boxes.tree_start[t]:ends[t]]))]
                    for t in multi])
    lo = np.full(boxes.lo.shape[1], -1, dtype=np.int64)
    hi = np.full(boxes.hi.shape[1], np.iinfo(np.int64).max, dtype=np.int64)
    for t in multi[np.argsort(own - best, kind="stable")]:
        a, b = boxes.tree_start[t], ends[t]
        ok = within[a:b] & (np.maximum(boxes.lo[a:b], lo) < np.minimum(boxes.hi[a:b], hi)
                            ).all(axis=1)
        if not ok.any():
            return None
        i = a + int(np.argmax(np.where(ok, gain[a:b], -np.inf)))
        lo = np.maximum(lo, boxes.lo[i])
        hi = np.minimum(hi, boxes.hi[i])
        total += boxes.scores[i]
    return lo, hi, total


def box_point(prog: Program, x0: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The point of the box ``[cut[lo], cut[hi])`` nearest to ``x0`` on every feature,
    ``(d,)`` (each feature at its nearest valid value, as the program's costs assume)."""
    x = x0.copy()
    has_lo = lo >= 0
    idx = np.flatnonzero(has_lo)
    below = x0[idx] < prog.pred_cut[lo[idx]]
    x[idx[below]] = prog.pred_cut[lo[idx[below]]]
    idx = np.flatnonzero(hi < prog.n_pred)
    above = x0[idx] >= prog.pred_cut[hi[idx]]
    x[idx[above]] = prog.pred_left[hi[idx[above]]]
    return x
