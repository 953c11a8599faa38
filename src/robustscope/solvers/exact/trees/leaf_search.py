"""The beam search of :func:`robustscope.solvers.exact.trees.leaf_bounds.walk`, compiled.

A walk visits the trees one at a time and, per tree, tries every leaf within reach against
every partial choice of the beam: a few dozen small boxes per tree, a hundred trees per walk,
ten walks per input. In NumPy each step is a handful of array operations on a few hundred
numbers, so the interpreter's overhead is most of the cost; here the same loops run as one
Numba-compiled function (about 30x faster on the breast-cancer ensembles of
``benchmarks/exact_trees.py``). The compiled code is cached on disk (``cache=True``), so a
process pays the compilation once per installation, not per call.

Only :func:`robustscope.solvers.exact.trees.leaf_bounds.walk` calls :func:`beam_walk`; it imports
this
module when the first walk runs, so that loading robustscope does not load Numba.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _cost_at(up: np.ndarray, down: np.ndarray, lo: int, hi: int, n_pred: int) -> float:
    """Crossing cost (scaled units) of one feature of the box ``[cut[lo], cut[hi])``."""
    c = 0.0
    if lo >= 0:
        c += up[lo]
    if hi < n_pred:
        c += down[hi]
    return c


@njit(cache=True)
def _stable_order(keys: np.ndarray, n: int, limit: int) -> np.ndarray:
    """Indices of the ``min(n, limit)`` smallest of ``keys[:n]``, ascending; ties keep
    their order (an insertion into a sorted prefix: ``n`` is at most a few hundred)."""
    m = min(n, limit)
    out = np.empty(m, np.int64)
    filled = 0
    for i in range(n):
        k = keys[i]
        if filled == m and k >= keys[out[m - 1]]:
            continue
        j = filled if filled < m else m - 1
        while j > 0 and keys[out[j - 1]] > k:
            out[j] = out[j - 1]
            j -= 1
        out[j] = i
        if filled < m:
            filled += 1
    return out


@njit(cache=True)
def _trees_with_choice(tree_start, n_leaf, within, gain):
    """Per tree, its leaves within reach: ``(counts, best, only, multi)``: how many (``(T,)``),
    the most ``gain`` among them (``(T,)``), the single one of a tree that has one (``(T,)``,
    -1 elsewhere), and the trees with more than one, those whose gains spread most first
    (ties in tree order)."""
    n_tree = len(tree_start)
    counts = np.zeros(n_tree, np.int64)
    best = np.full(n_tree, -np.inf)
    worst = np.full(n_tree, np.inf)
    only = np.full(n_tree, -1, np.int64)
    for t in range(n_tree):
        end = tree_start[t + 1] if t + 1 < n_tree else n_leaf
        for leaf in range(tree_start[t], end):
            if within[leaf]:
                counts[t] += 1
                only[t] = leaf
                best[t] = max(best[t], gain[leaf])
                worst[t] = min(worst[t], gain[leaf])
        if counts[t] != 1:
            only[t] = -1
    n_multi = 0
    for t in range(n_tree):
        if counts[t] > 1:
            n_multi += 1
    multi = np.empty(n_multi, np.int64)
    spread = np.empty(n_multi)
    n_multi = 0
    for t in range(n_tree):
        if counts[t] > 1:
            multi[n_multi] = t
            spread[n_multi] = worst[t] - best[t]
            n_multi += 1
    return counts, best, only, multi[_stable_order(spread, n_multi, n_multi)]


@njit(cache=True)
def beam_walk(tree_start, lo, hi, leaf_scores, const, feat_flat, feat_start, within, gain,
              width, finite, power, up, down, limit, need):
    """One beam walk; see :func:`robustscope.solvers.exact.trees.leaf_bounds.walk` for its meaning.

    ``tree_start`` ``(T,)``; ``lo`` / ``hi`` ``(L, d)`` the leaves' boxes as cut indices
    (``-1`` / ``n_pred`` for no bound); ``leaf_scores`` ``(L, K)``; ``const`` ``(K,)``;
    ``feat_flat`` / ``feat_start`` ``(L + 1,)``: per leaf, the features its box bounds;
    ``within`` ``(L,)`` the leaves within reach; ``gain`` ``(L,)``; ``finite``: an L1 / L2
    walk (``power`` 1 or 2, per-cut crossing costs ``up`` / ``down`` ``(n_pred,)``, the
    summed cost at most ``limit``); ``need`` the total gain to reach.

    Returns ``(found, lo, hi, scores)``: the common box ``(d,)`` twice and its class scores
    ``(K,)``; ``found`` False when no choice of leaves reaches ``need``.
    """
    n_leaf, d = lo.shape
    n_cls = leaf_scores.shape[1]
    n_tree = len(tree_start)
    n_pred = len(up)
    fail = (False, np.zeros(d, np.int64), np.zeros(d, np.int64), np.zeros(n_cls))

    # trees with one leaf within reach keep it (the whole ball lies in it); the others are
    # walked, those whose reachable gains spread most first
    counts, best, only, multi = _trees_with_choice(tree_start, n_leaf, within, gain)
    own = const.copy()
    single_gain = 0.0
    for t in range(n_tree):
        if only[t] >= 0:
            own += leaf_scores[only[t]]
            single_gain += gain[only[t]]
    need = need - single_gain
    rest = np.zeros(len(multi))  # the best the later trees can add
    for i in range(len(multi) - 2, -1, -1):
        rest[i] = rest[i + 1] + best[multi[i + 1]]

    box_lo = np.full((width, d), -1, np.int64)
    box_hi = np.full((width, d), n_pred, np.int64)
    per = np.zeros((width, d))      # per feature, the cost (L2: squared) of each box
    total = np.zeros(width)         # their sum
    value = np.zeros(width)
    scores = np.zeros((width, n_cls))
    scores[0] = own
    n_state = 1
    max_leaves = 1
    for t in multi:
        max_leaves = max(max_leaves, counts[t])
    cap = width * max_leaves
    cand_v = np.empty(cap)
    cand_state = np.empty(cap, np.int64)
    cand_leaf = np.empty(cap, np.int64)
    new_lo = np.empty((width, d), np.int64)
    new_hi = np.empty((width, d), np.int64)
    new_per = np.empty((width, d))
    new_total = np.empty(width)
    new_value = np.empty(width)
    new_scores = np.empty((width, n_cls))

    for i in range(len(multi)):
        t = multi[i]
        later = rest[i]
        end = tree_start[t + 1] if t + 1 < n_tree else n_leaf
        n_cand = 0
        top = -np.inf
        for s in range(n_state):
            for leaf in range(tree_start[t], end):
                if not within[leaf]:
                    continue
                ok = True
                cost = total[s]
                for q in range(feat_start[leaf], feat_start[leaf + 1]):
                    f = feat_flat[q]
                    a = max(box_lo[s, f], lo[leaf, f])
                    b = min(box_hi[s, f], hi[leaf, f])
                    if a >= b:
                        ok = False
                        break
                    if finite:
                        cost += _cost_at(up, down, a, b, n_pred) ** power - per[s, f]
                if not ok or (finite and cost > limit):
                    continue
                v = value[s] + gain[leaf] + later
                cand_v[n_cand] = v
                cand_state[n_cand] = s
                cand_leaf[n_cand] = leaf
                n_cand += 1
                top = max(top, v)
        if n_cand == 0 or top < need:
            return fail
        if n_cand > width:
            for j in range(n_cand):
                cand_v[j] = -cand_v[j]
            keep = _stable_order(cand_v, n_cand, width)
            for j in range(n_cand):
                cand_v[j] = -cand_v[j]
        else:
            keep = np.arange(n_cand)
        for j in range(len(keep)):
            s = cand_state[keep[j]]
            leaf = cand_leaf[keep[j]]
            new_lo[j] = box_lo[s]
            new_hi[j] = box_hi[s]
            new_per[j] = per[s]
            new_total[j] = total[s]
            for q in range(feat_start[leaf], feat_start[leaf + 1]):
                f = feat_flat[q]
                a = max(box_lo[s, f], lo[leaf, f])
                b = min(box_hi[s, f], hi[leaf, f])
                new_lo[j, f] = a
                new_hi[j, f] = b
                if finite:
                    c = _cost_at(up, down, a, b, n_pred) ** power
                    new_total[j] += c - per[s, f]
                    new_per[j, f] = c
            new_value[j] = cand_v[keep[j]] - later
            new_scores[j] = scores[s] + leaf_scores[leaf]
        n_state = len(keep)
        box_lo, new_lo = new_lo, box_lo
        box_hi, new_hi = new_hi, box_hi
        per, new_per = new_per, per
        total, new_total = new_total, total
        value, new_value = new_value, value
        scores, new_scores = new_scores, scores

    i = np.argmax(value[:n_state])
    if value[i] < need:
        return fail
    return True, box_lo[i].copy(), box_hi[i].copy(), scores[i].copy()


@njit(cache=True)
def cheapest_leaves(tree_start, lo, hi, feat_flat, feat_start, feat_mask, within, gain, need,
                    p_kind, up, down, incumbent, node_limit):
    """Branch and bound for the cheapest choice of one leaf per tree that reaches ``need``.

    A choice is one leaf within reach per tree (``within`` ``(L,)``) whose boxes meet; its
    cost is the Lp reach of the common box (``p_kind`` 0: Linf, 1: L1, 2: squared L2, from
    the per-cut crossing costs ``up`` / ``down`` ``(n_pred,)``), its value the sum of the
    chosen leaves' ``gain``. Trees with one leaf within reach hold the whole ball and are
    left out (their gain is counted). The search visits the other trees depth first, the
    leaves of most gain first, and prunes a partial choice whose cost is at least
    ``incumbent * (1 - 1e-12)`` (the cost to beat) or whose value plus, per remaining tree,
    the most gain among its leaves that still meet the box within that cost, falls short of
    ``need``. ``lo`` / ``hi`` ``(L, d)`` are the leaves' boxes as cut indices; ``feat_flat``
    / ``feat_start`` ``(L + 1,)`` list, per leaf, the features its box bounds, and
    ``feat_mask`` ``(L,)`` holds them as bits (:class:`~robustscope.solvers.exact.trees.leaf_bounds.
    LeafBoxes`): where the pick that made a node cut the box on none of a leaf's features,
    the leaf's cost there follows from its cost at the parent node.

    Returns ``(complete, cost, lo, hi, nodes)``: ``complete`` True when the whole tree of
    choices was searched (within ``node_limit`` nodes), so that no choice costs less than
    ``cost``; ``cost`` the cheapest choice found (``incumbent`` when none beat it) and its
    box (``lo`` / ``hi`` ``(d,)``, cut indices, sentinels when none was found).
    """
    n_leaf, d = lo.shape
    n_tree = len(tree_start)
    n_pred = len(up)
    tree_end = np.empty(n_tree, np.int64)
    for t in range(n_tree):
        tree_end[t] = tree_start[t + 1] if t + 1 < n_tree else n_leaf
    counts, best, only, multi = _trees_with_choice(tree_start, n_leaf, within, gain)
    fixed_gain = 0.0
    for t in range(n_tree):
        if only[t] >= 0:
            fixed_gain += gain[only[t]]
    need = need - fixed_gain
    n_multi = len(multi)
    # per depth, the tree's leaves within reach, most gain first
    offset = np.zeros(n_multi + 1, np.int64)
    for i in range(n_multi):
        offset[i + 1] = offset[i] + counts[multi[i]]
    leaves = np.empty(offset[n_multi], np.int64)
    for i in range(n_multi):
        t = multi[i]
        k = 0
        for leaf in range(tree_start[t], tree_end[t]):
            if within[leaf]:
                leaves[offset[i] + k] = leaf
                k += 1
        block = leaves[offset[i]:offset[i + 1]]
        neg = np.empty(len(block))
        for j in range(len(block)):
            neg[j] = -gain[block[j]]
        leaves[offset[i]:offset[i + 1]] = block[_stable_order(neg, len(block), len(block))]
    rest = np.zeros(n_multi + 1)  # the most the trees from depth i on can add
    for i in range(n_multi - 1, -1, -1):
        rest[i] = rest[i + 1] + best[multi[i]]

    box_lo = np.full((n_multi + 1, d), -1, np.int64)
    box_hi = np.full((n_multi + 1, d), n_pred, np.int64)
    per = np.zeros((n_multi + 1, d))  # per feature, the box's cost (L2: squared)
    total = np.zeros(n_multi + 1)      # the box's cost (Linf: the largest of per)
    value = np.zeros(n_multi + 1)
    ptr = np.full(n_multi + 1, -1, np.int64)
    # first[k, i]: at the node of depth k, tree i's first leaf (most gain first) that meets
    first = np.zeros((n_multi + 1, n_multi), np.int64)
    # ... and its cost with that node's box; chosen[k]: the features on which the leaf picked
    # to reach depth k cut the box down (a bit per feature, as LeafBoxes.feat_mask)
    first_cost = np.zeros((n_multi + 1, n_multi))
    chosen = np.zeros(n_multi + 1, np.int64)
    best_cost = incumbent
    beat = incumbent * (1 - 1e-12)
    best_lo = np.full(d, -1, np.int64)
    best_hi = np.full(d, n_pred, np.int64)
    nodes = 0
    depth = 0
    while depth >= 0:
        if ptr[depth] < 0:  # entering a node
            nodes += 1
            if nodes > node_limit:
                return False, best_cost, best_lo, best_hi, nodes
            if depth == n_multi:
                if value[depth] >= need:  # (its cost is below beat: children are)
                    best_cost = total[depth]
                    beat = best_cost * (1 - 1e-12)
                    best_lo[:] = box_lo[depth]
                    best_hi[:] = box_hi[depth]
                depth -= 1
                continue
            # bound: per remaining tree, the most gain among leaves still within the cost;
            # a leaf that misses a box misses every smaller one at a lower cost to beat, so
            # each tree's scan starts where the parent's stopped
            bound = value[depth]
            pruned = False
            for i in range(depth, n_multi):
                j = offset[i] if depth == 0 else first[depth - 1, i]
                cost = np.inf
                if depth > 0 and j < offset[i + 1] and (feat_mask[leaves[j]] & chosen[depth]) == 0:
                    # the last pick left the box alone on this leaf's features: only the box's
                    # cost elsewhere grew, so the leaf's cost follows from the parent's. It
                    # only ever keeps a leaf (rounded, it could drop one at the cost to beat;
                    # kept by mistake, a leaf only loosens the bound)
                    if p_kind == 0:
                        cost = max(first_cost[depth - 1, i], total[depth])
                    else:
                        cost = first_cost[depth - 1, i] + (total[depth] - total[depth - 1])
                    if not cost < beat:
                        cost = np.inf  # (computed exactly below)
                while j < offset[i + 1] and not cost < beat:
                    cost = _cost_with(up, down, box_lo[depth], box_hi[depth], per[depth],
                                      total[depth], lo, hi, leaves[j], feat_flat, feat_start,
                                      n_pred, p_kind)
                    if not cost < beat:
                        j += 1
                first[depth, i] = j
                first_cost[depth, i] = cost
                bound += gain[leaves[j]] if j < offset[i + 1] else -np.inf
                if bound + rest[i + 1] < need:
                    pruned = True
                    break
            if pruned:
                depth -= 1
                continue
            ptr[depth] = first[depth, depth]
        # the next child of the node at this depth
        moved = False
        while ptr[depth] < offset[depth + 1]:
            leaf = leaves[ptr[depth]]
            ptr[depth] += 1
            if value[depth] + gain[leaf] + rest[depth + 1] < need:
                break  # (most gain first: no later leaf does)
            cost = _cost_with(up, down, box_lo[depth], box_hi[depth], per[depth],
                              total[depth], lo, hi, leaf, feat_flat, feat_start, n_pred, p_kind)
            if not cost < beat:
                continue
            box_lo[depth + 1] = box_lo[depth]
            box_hi[depth + 1] = box_hi[depth]
            per[depth + 1] = per[depth]
            changed = 0
            for q in range(feat_start[leaf], feat_start[leaf + 1]):
                f = feat_flat[q]
                a = max(box_lo[depth, f], lo[leaf, f])
                b = min(box_hi[depth, f], hi[leaf, f])
                if a != box_lo[depth, f] or b != box_hi[depth, f]:
                    changed |= (1 << f) if f < 63 else -1
                box_lo[depth + 1, f] = a
                box_hi[depth + 1, f] = b
                v = _cost_at(up, down, a, b, n_pred)
                per[depth + 1, f] = v * v if p_kind == 2 else v
            total[depth + 1] = cost
            chosen[depth + 1] = changed
            value[depth + 1] = value[depth] + gain[leaf]
            ptr[depth + 1] = -1
            depth += 1
            moved = True
            break
        if not moved:
            ptr[depth] = -1
            depth -= 1
    return True, best_cost, best_lo, best_hi, nodes


@njit(cache=True)
def _cost_with(up, down, box_lo, box_hi, per, total, lo, hi, leaf, feat_flat, feat_start,
               n_pred, p_kind):
    """The cost of the box ``(box_lo, box_hi)`` (per-feature costs ``per``, cost
    ``total``) cut down to ``leaf``'s box on the features that box bounds
    (``feat_flat[feat_start[leaf]:feat_start[leaf + 1]]``; elsewhere the leaf is unbounded);
    ``inf`` when the two boxes do not meet. Costs only grow as a box shrinks, so Linf's is
    the larger of ``total`` and the new per-feature costs."""
    cost = total
    for q in range(feat_start[leaf], feat_start[leaf + 1]):
        f = feat_flat[q]
        a = max(box_lo[f], lo[leaf, f])
        b = min(box_hi[f], hi[leaf, f])
        if a >= b:
            return np.inf
        if a == box_lo[f] and b == box_hi[f]:
            continue
        v = _cost_at(up, down, a, b, n_pred)
        if p_kind == 0:
            cost = max(cost, v)
        elif p_kind == 1:
            cost += v - per[f]
        else:
            cost += v * v - per[f]
    return cost
