"""Cheap brackets for tree ensembles: a sound lower bound and a tree-aware upper bound.

Both work on the leaves of a :class:`~robustscope.solvers.exact.trees.program.Program`, each seen
as a box: on every feature a leaf holds the values in ``[cut[lo], cut[hi])``, where ``lo`` is
the largest cut its path must be right of and ``hi`` the smallest cut it must be left of
(predicate indices; within a feature, indices are ordered as the cuts).

For one input, a leaf's *reach* is the Lp distance (scaled units) from the input to the
nearest valid point of its box (for Linf: the largest crossing cost of a cut its path is on
the other side of). Every point of the ball of radius ``eps`` lies in leaves of reach
``<= eps``, so

- **lower bound** (:func:`certified_index`): summing, tree by tree, the largest
  score change among the leaves within reach ``eps`` over-estimates every class's gain on
  the ball. When no class can gain enough, no counterexample has norm ``<= eps``. Trees are
  bounded independently (no clique merging), so the bound is sound by construction; it is
  exact while at most one tree has more than one leaf within reach, and loosens as the ball
  grows. A bound that holds up to the reach value ``u_m`` holds up to the next one.
- **upper bound** (:func:`walk`): walk to neighbouring leaf boxes: trees with more than
  one leaf within reach, most influential first, each pick a leaf whose box still meets the
  boxes picked so far, keeping the ``width`` best partial choices (a beam); the point
  nearest to the input in the common box is a candidate counterexample (its scores are the
  sum of the picked leaves), to be verified by calling the model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from robustscope.solvers.exact.trees.program import LEAF, LEFT, Costs, Program


@dataclass
class LeafBoxes:
    """The leaves of a program's trees as boxes, flattened; ``L`` leaves, ``K`` classes,
    ``d`` features, ``n_pred`` predicates. Built once per program."""

    tree_start: np.ndarray   # (n_trees,) first leaf of each tree; a tree's leaves are contiguous
    scores: np.ndarray       # (L, K) class-score contribution
    const: np.ndarray        # (K,) scores of the constant part
    blocked: np.ndarray      # (L,) a fixed node routes every valid value away from the leaf
    lo: np.ndarray           # (L, d) largest cut index the leaf is right of, -1 for none
    hi: np.ndarray           # (L, d) smallest cut index the leaf is left of, n_pred for none
    n_pred: int              # the number of predicates (cuts)
    feat_flat: np.ndarray    # per leaf, the features its box is bounded on, flat
    feat_start: np.ndarray   # (L + 1,) leaf i's are feat_flat[feat_start[i]:feat_start[i + 1]]
    feat_mask: np.ndarray    # (L,) int64, bit f set when the leaf is bounded on feature f
    #                          (f >= 63 sets every bit: such a leaf shares a feature with all)

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
    # (the compiled loops visit only these: a LightGBM leaf of the benchmark bounds about
    # 4 features, its tree 10)
    bounded = (lo >= 0) | (hi < n_pred)
    return LeafBoxes(
        tree_start=np.asarray(tree_start, dtype=np.int64),
        scores=np.asarray(scores, dtype=np.float64).reshape(n_leaf, len(prog.const_scores)),
        const=prog.const_scores.copy(),
        blocked=np.asarray(blocked, dtype=bool),
        lo=lo, hi=hi, n_pred=n_pred,
        feat_flat=np.nonzero(bounded)[1].astype(np.int64),
        feat_start=np.concatenate([[0], np.cumsum(bounded.sum(axis=1))]).astype(np.int64),
        feat_mask=_feature_bits(bounded))


def _feature_bits(bounded: np.ndarray) -> np.ndarray:
    """Per row of ``bounded`` ``(L, d)``, an int64 with bit ``f`` set where column ``f``
    is True, for ``f < 63``; a row True in a later column gets every bit (-1), so that it
    meets every other row's bits."""
    low = bounded[:, :63]
    bits = (low.astype(np.int64) << np.arange(low.shape[1], dtype=np.int64)).sum(axis=1)
    return np.where(bounded[:, 63:].any(axis=1), np.int64(-1), bits).astype(np.int64)


def crossing_costs(costs: Costs) -> tuple[np.ndarray, np.ndarray]:
    """Per cut, the cost of a box that must be right of it (``up``) or left of it (``down``)
    for one input, each ``(n_pred + 1,)``: the crossing cost when the input lies on the other
    side, else 0; ``inf`` for a frozen cut. The appended 0 is read by the sentinels -1 (no
    lower cut) and ``n_pred`` (no upper cut) of :class:`LeafBoxes`."""
    cost = np.where(costs.frozen, np.inf, costs.cost)
    up = np.append(np.where(costs.origin_left, cost, 0.0), 0.0)
    down = np.append(np.where(costs.origin_left, 0.0, cost), 0.0)
    return up, down


def box_reach(up: np.ndarray, down: np.ndarray, lo: np.ndarray, hi: np.ndarray,
              p: float) -> np.ndarray:
    """Lp distance (scaled units) from the input to the nearest point of boxes given by cut
    indices ``lo`` / ``hi`` ``(..., d)``: ``(...)``. ``up`` / ``down`` from
    :func:`crossing_costs`. Per feature at most one side of a box is across from the input,
    and each side's cost grows with its distance from the input, so the reach of an
    intersection of boxes is at least the reach of each."""
    per_feature = up[lo] + down[hi]
    if p == np.inf:
        return per_feature.max(axis=-1, initial=0.0)
    if p == 1:
        return per_feature.sum(axis=-1)
    return np.sqrt((per_feature ** 2).sum(axis=-1))


def leaf_reach(boxes: LeafBoxes, costs: Costs, p: float = np.inf) -> np.ndarray:
    """Lp reach of every leaf for one input: the ``p``-norm distance (scaled units) from the
    input to the nearest valid point of the leaf's box, ``(L,)`` (``inf``: no valid point,
    or an immutable feature must change). ``p`` is ``inf``, 1 or 2."""
    up, down = crossing_costs(costs)
    reach = box_reach(up, down, boxes.lo, boxes.hi, p)
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


def walk(boxes: LeafBoxes, reach: np.ndarray, eps: float, gain: np.ndarray,
         width: int = 1, p: float = np.inf, costs: Costs | None = None,
         need: float = -np.inf) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Pick one leaf per tree within reach ``eps`` so that the boxes meet, by a beam search
    maximising ``gain`` (``(L,)``, e.g. a class's score minus the label's).

    Trees with more than one leaf within reach are taken in turn, those whose reachable
    leaves' gains spread most first; every partial choice of the ``width`` best (gain so far
    plus the best each remaining tree could add) is extended by each leaf whose box meets its
    box (and, for ``p`` 1 or 2, keeps the common box within ``eps``: ``costs`` needed). With
    ``width=1`` it is a greedy walk. Trees with one leaf within reach are kept as they are
    (the whole ball lies in it). The walk gives up as soon as none of its partial choices
    can reach a total ``gain`` of ``need`` (summed over every tree).

    Returns ``(lo, hi, scores)``: the common box (cut indices per feature, ``(d,)`` each) and
    the class scores of every point in it (``(K,)``); None when no choice survives.
    """
    from robustscope.solvers.exact.trees.leaf_search import beam_walk  # (loads Numba on first use)

    if p != np.inf and costs is None:
        raise ValueError("walk: p=1 or 2 needs the input's costs")
    if p == np.inf:
        up = down = np.zeros(boxes.n_pred)
        power, limit = 1.0, np.inf
    else:
        up, down = (c[:-1] for c in crossing_costs(costs))
        power = 1.0 if p == 1 else 2.0
        limit = eps ** power * (1 + 1e-12)
    found, lo, hi, scores = beam_walk(
        boxes.tree_start, boxes.lo, boxes.hi, boxes.scores, boxes.const, boxes.feat_flat,
        boxes.feat_start, np.ascontiguousarray(reach <= eps),
        np.ascontiguousarray(gain, dtype=np.float64), int(width), p != np.inf, power,
        np.ascontiguousarray(up), np.ascontiguousarray(down), float(limit), float(need))
    return (lo, hi, scores) if found else None


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


def cheapest(boxes: LeafBoxes, costs: Costs, reach: np.ndarray, eps: float, gain: np.ndarray,
             need: float, p: float, node_limit: int) -> tuple[bool, float, np.ndarray,
                                                              np.ndarray, int]:
    """Exact search for the cheapest box that reaches a total ``gain`` of ``need``, below
    the cost of a known counterexample of radius ``eps``: branch and bound over one leaf
    per tree among the leaves within reach ``eps`` (``reach`` ``(L,)`` from
    :func:`leaf_reach` in the same norm ``p``), pruned by the box's cost and by the
    independent-trees bound restricted to the leaves that still meet the box (see
    :func:`robustscope.solvers.exact.trees.leaf_search.cheapest_leaves`).

    Returns ``(complete, radius, lo, hi, nodes)``: ``radius`` the Lp norm (scaled units) of
    the cheapest box found, ``eps`` when none is cheaper; ``lo`` / ``hi`` its cut indices
    ``(d,)`` (meaningful only when ``radius < eps``); ``complete`` True when the search
    finished within ``node_limit`` nodes, so that no box cheaper than ``radius`` (to a
    relative 1e-12) reaches ``need``; ``nodes`` the nodes visited."""
    from robustscope.solvers.exact.trees.leaf_search import (
        cheapest_leaves,  # (loads Numba on first use)
    )

    up, down = (np.ascontiguousarray(c[:-1]) for c in crossing_costs(costs))
    p_kind = 0 if p == np.inf else (1 if p == 1 else 2)
    power = 2.0 if p_kind == 2 else 1.0
    done, cost, lo, hi, nodes = cheapest_leaves(
        boxes.tree_start, boxes.lo, boxes.hi, boxes.feat_flat, boxes.feat_start,
        boxes.feat_mask, np.ascontiguousarray(reach <= eps),
        np.ascontiguousarray(gain, dtype=np.float64), float(need), p_kind, up, down,
        float(eps) ** power, int(node_limit))
    radius = float(cost) ** (1.0 / power) if cost < float(eps) ** power else float(eps)
    return bool(done), radius, lo, hi, int(nodes)
