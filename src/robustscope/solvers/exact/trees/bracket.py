"""A cheap bracket of one input's radius before any program is solved.

:func:`prune_input`: the independent-trees lower bound over the leaves' reach
(:func:`~robustscope.solvers.exact.trees.leaf_bounds.certified_index`) and beam leaf walks
(:func:`~robustscope.solvers.exact.trees.leaf_bounds.walk`) for a verified counterexample,
pulled towards the input (:func:`shrink`) and, for L1 / L2, polished (:func:`polish`).
:func:`exhaust` then tries to close the bracket by a branch and bound over leaf choices
(:func:`~robustscope.solvers.exact.trees.leaf_bounds.cheapest`) below that counterexample;
most inputs close there, and the MILP search
(:mod:`~robustscope.solvers.exact.trees.milp_search`) runs only on the open bracket.

Ties: the pruning's independent-trees bound certifies against a lower class only a deficit of
at least ``tie_tol``: an exact tie (a forest's 0.5 / 0.5), summed in floating point, can come
out a hair below zero (:func:`decides`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from robustscope.core.space import FeatureSpace
from robustscope.models.trees import TreeEnsemble
from robustscope.solvers.exact.trees import settings
from robustscope.solvers.exact.trees.compiled import Compiled
from robustscope.solvers.exact.trees.leaf_bounds import (
    box_point,
    certified_index,
    cheapest,
    leaf_reach,
    max_gain,
    walk,
)
from robustscope.solvers.exact.trees.program import (
    INTEGRAL_TYPES,
    Costs,
    Program,
    input_costs,
    norm,
)
from robustscope.solvers.tolerances import TREE_BRACKET_RTOL as EXACT_RTOL

#: ``check(x_adv) -> class``: the model's class at a counterexample ``(d,)`` of the input
#: being solved when the statement holds there, else -1.
Check = Callable[[np.ndarray], int]


@dataclass
class Bracket:
    """What :func:`prune_input` settled for one input: ``cand[index]`` (Linf candidate radii of
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


def prune_input(comp: Compiled, ens: TreeEnsemble, check: Check, space: FeatureSpace,
           x0: np.ndarray, yi: int,
           target: int | None, p: float, max_radius: float | None) -> Bracket:
    """Bracket one input's radius without a program: the independent-trees bound over the
    leaves' Lp reach certifies the largest radius it can; leaf walks (a beam search over
    the trees' reachable leaves) then look for the smallest candidate radius at which they
    find a counterexample: at the bound first, then at candidates ``1, 2, 4, ...`` steps
    above it (for L1 / L2 at least twice the last radius tried: their candidates are dense
    and the bound loose), then by bisection between the last miss and the first find (at
    most ``settings.MAX_WALKS`` walks). An L1 / L2 counterexample is polished (:func:`polish`)
    before its radius counts. Counterexamples are verified with ``check``, smallest first.
    For Linf the candidates are the input's crossing costs (the radius is one of them), and
    ``index`` is set for :func:`search_linf`; for L1 / L2 they are the leaves' reaches."""
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
    bracket = Bracket(index if p == math.inf else -1, lower, np.inf, x0.copy(), -1, clean,
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
                        settings.WALK_WIDTH, p, costs, need=margins[j] - boxes.const[j]
                        + boxes.const[yi])
            if path is None or not decides(path[2], yi, target, prog.tie_tol):
                continue
            x_adv = box_point(prog, x0, path[0], path[1])
            if not one_hot_ok(space, x_adv) or not space.relations_hold(x_adv[None])[0]:
                continue  # (the MILP holds the relations; a walk does not)
            if norm((x_adv - x0) / space.scale, p) > lower * (1 + EXACT_RTOL):
                x_adv = shrink(ens, space, x0, x_adv, cand[miss + 1:k + 1], yi, target,
                                prog.tie_tol)
                if p != math.inf:
                    x_adv = polish(prog, ens, space, x0, x_adv, p, yi, target)
            r = norm((x_adv - x0) / space.scale, p)
            if max_radius is not None and r > max_radius:
                continue  # beyond the radius of interest (L1 / L2 only)
            found.append((r, x_adv))
            return r
        return None

    # up from the bound in steps of 1, 2, 4, ... candidates, then bisect miss .. hit
    miss, hit, step, walks = index, len(cand), 1, 0
    while walks < settings.MAX_WALKS and miss + 1 < len(cand):
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
    while walks < settings.MAX_WALKS and hit - miss > 1:
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


def exhaust(comp: Compiled, ens: TreeEnsemble, check: Check, space: FeatureSpace,
             x0: np.ndarray, yi: int, target: int | None, p: float,
             bracket: Bracket, deadline: float) -> bool:
    """Close an open bracket without a program, by branch and bound over leaf choices
    (:func:`~robustscope.solvers.exact.trees.leaf_bounds.cheapest`) below its counterexample's
    radius,
    one rival class at a time. A cheaper box found on the way becomes the counterexample
    once the model confirms it; when every class's search finishes within
    ``settings.SEARCH_NODES`` nodes (fewer when the input's ``deadline`` is near, see
    ``settings.SEARCH_NODES_PER_SECOND``), no counterexample is cheaper and the bracket closes
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
        nodes = min(settings.SEARCH_NODES,
                    int((deadline - time.perf_counter()) * settings.SEARCH_NODES_PER_SECOND))
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
            if decides(ens.class_scores(x_adv[None])[0], yi, target, prog.tie_tol):
                cls = check(x_adv)
            if cls < 0:
                return False  # (the model settles a near tie the other way: the MILP decides)
            bracket.radius, bracket.x, bracket.cls = norm((x_adv - x0) / space.scale, p), \
                x_adv, cls
    if complete:
        bracket.lower = max(bracket.lower, bracket.radius * (1 - 1e-12))
    return complete


def shrink(ens: TreeEnsemble, space: FeatureSpace, x0: np.ndarray, x_adv: np.ndarray,
            radii: np.ndarray, yi: int, target: int | None, tie_tol: float) -> np.ndarray:
    """Pull a counterexample ``(d,)`` towards ``x0``: its move clipped to each Linf radius in
    ``radii`` (at most ``settings.SHRINK_STEPS`` of them, one batch through the parsed ensemble);
    the smallest that still decides is returned (``x_adv`` when none does). Clipping keeps
    every feature between ``x0`` and ``x_adv`` (inside the bounds; immutable features do not
    move); a clipped point that would give an integer, binary or one-hot feature a value
    other than the input's or the counterexample's is not tried."""
    if len(radii) == 0:
        return x_adv
    radii = radii[np.unique(np.linspace(0, len(radii) - 1, settings.SHRINK_STEPS).astype(np.int64))]
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
        if decides(sc, yi, target, tie_tol):
            return row
    return x_adv


def polish(prog: Program, ens: TreeEnsemble, space: FeatureSpace, x0: np.ndarray,
            x_adv: np.ndarray, p: float, yi: int, target: int | None) -> np.ndarray:
    """Lower an L1 / L2 counterexample's norm by moving single features back towards the
    input (to any cell in between, or all the way) while the decision stays changed.

    Every moved feature offers the nearest valid values of the cells between the input and
    the counterexample (and the input's own value); one batch through the parsed ensemble
    scores them all, the cheapest that still decides is taken, and the round repeats (at
    most ``settings.POLISH_ROUNDS``). Features of one-hot groups stay as they are; points that
    break a relation are not taken. Returns a point ``(d,)`` whose norm is at most
    ``x_adv``'s (``x_adv`` itself when nothing helps), to be verified by the model."""
    grouped = np.zeros(len(x0), dtype=bool)
    for g in space.groups:
        grouped[np.asarray(g)] = True
    scale = space.scale
    best = x_adv.copy()
    for _ in range(settings.POLISH_ROUNDS):
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
        ok = np.array([decides(s, yi, target, prog.tie_tol) for s in scores])
        if space.relations is not None and ok.any():
            ok[ok] = space.relations_hold(pts[ok])
        if not ok.any():
            break
        best = pts[np.flatnonzero(ok)[np.argmin(cost[ok])]]
    return best


def decides(scores: np.ndarray, yi: int, target: int | None, tie_tol: float) -> bool:
    """Whether class scores ``(K,)`` change the decision (reach the target), with a margin
    of ``tie_tol`` wherever argmax's tie rule would not already settle it."""
    winner = int(np.argmax(scores))
    if target is not None and winner != target:
        return False
    if winner == yi:
        return False
    others = np.delete(scores, winner)
    return bool(scores[winner] - others.max() >= tie_tol)


def one_hot_ok(space: FeatureSpace, x: np.ndarray) -> bool:
    return all(np.isclose(x[np.asarray(g)].sum(), 1.0) for g in space.groups)
