"""The gradient search on spaces with discrete features: real features moved by gradients,
integer and one-hot features on their own lattice.

A gradient run over the continuous relaxation moves integers and one-hot arms by fractions
that the verification's projection rounds away (or rounds into a whole arm switch): on the
credit-like table of issue 40 a minimum-norm run alone ended 8.7x above the exact radius at
the median, and the cascade left 22 of 55 inputs censored that a black box broke. Here:

1. a minimum-norm run with binary and one-hot features held at the input's values and integer
   features relaxed to reals, its end verified rounded to the nearest integers and rounded
   away from the input (:func:`outward`);
2. every lattice neighbour of the input — each integer or binary feature one step up or
   down, each other arm of each one-hot group — verified as it is (a pass per neighbour);
3. from the :data:`NEIGHBOURS` neighbours nearest the boundary (smallest logit margin at the
   neighbour, among those whose step costs less than the best radius so far), a run on the
   real features with every discrete feature held at the neighbour's values; its
   size is measured from the input, so a step plus a small real move competes with a larger
   real move alone.

Every candidate goes through the one verification, which keeps the best.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from robustscope.core.space import FeatureSpace
from robustscope.search.state import BatchState, registered

#: The registry's minimum-norm solver, looked up at each call.
MINNORM = registered("minnorm")
#: Lattice neighbours per input a minimum-norm run starts from.
NEIGHBOURS = 3
#: Runs per input around its best counterexample's integer values (:func:`polish`).
POLISH_RUNS = 3


def held(space: FeatureSpace) -> FeatureSpace:
    """``space`` with every discrete feature held where it is (real features move)."""
    return FeatureSpace(space.lower, space.upper, space.scale, space.types,
                        space.mutable & (space.types == "real"), space.names, space.groups,
                        space.shape, space.relations)


def relaxed(space: FeatureSpace) -> FeatureSpace:
    """``space`` as the gradient runs here see it: integer features real (rounded at the
    verification, see :func:`outward`), binary and one-hot features held where they are."""
    integer = space.types == "integer"
    types = np.where(integer, "real", space.types).astype(object)
    held = space.mutable & np.isin(space.types, ("binary", "categorical"))
    return FeatureSpace(space.lower, space.upper, space.scale, types, space.mutable & ~held,
                        space.names, space.groups, space.shape, space.relations)


def outward(space: FeatureSpace, cand: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``cand`` ``(m, d)`` with its integer features rounded away from ``x`` (the input,
    ``(m, d)``), within the bounds: a run that ends just across the boundary in the
    relaxation stays across it where rounding to the nearest integer would step back."""
    integer = torch.as_tensor(space.types == "integer", device=cand.device)
    step = cand - x
    away = x + torch.sign(step) * torch.ceil(step.abs() - 1e-9)
    lo = torch.as_tensor(np.ceil(space.lower), dtype=cand.dtype, device=cand.device)
    hi = torch.as_tensor(np.floor(space.upper), dtype=cand.dtype, device=cand.device)
    away = torch.minimum(torch.maximum(away, lo), hi)
    return torch.where(integer, away, cand)


def _run(state: BatchState, rows: torch.Tensor, space: FeatureSpace, steps: int,
         start: torch.Tensor | None = None) -> None:
    """A minimum-norm run over ``space`` (:func:`relaxed`) for inputs ``rows``, from the
    inputs or from ``start`` ``(m, d)`` (its size is still measured from the input); its
    candidates verified rounded to the nearest integers and rounded outward."""
    shape = state.x.shape[1:]
    problem = dataclasses.replace(state.problem(rows), space=space)
    if start is not None:
        problem = dataclasses.replace(problem, x=start.reshape(len(rows), *shape),
                                      clean_logits=None)
    cand = MINNORM(problem, steps=steps).x_adv.to(state.x.dtype).reshape(len(rows), -1)
    state.check(rows, cand.reshape(len(rows), *shape))
    flat = state.x[rows].reshape(len(rows), -1)
    state.check(rows, outward(state.space, cand, flat).reshape(len(rows), *shape))


def lattice_moves(space: FeatureSpace) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The moves to lattice neighbours: ``(features, delta, arm)`` per move, where integer
    and binary features add ``delta`` (+1 or -1, ``arm`` empty) and a one-hot move sets
    ``arm`` (the group's features) to the one-hot vector ``delta``."""
    moves = []
    for j in np.flatnonzero(space.mutable & np.isin(space.types, ("integer", "binary"))):
        for step in (1.0, -1.0):
            moves.append((np.array([j]), np.array([step]), np.zeros(0, dtype=np.int64)))
    for g in space.groups:
        if not space.mutable[g].all():
            continue
        for k in range(len(g)):
            moves.append((g, np.eye(len(g))[k], g))
    return moves


def _apply(space: FeatureSpace, x: torch.Tensor, move) -> tuple[torch.Tensor, torch.Tensor]:
    """The neighbours ``(m, d)`` of inputs ``x`` ``(m, d)`` by one move, and which are valid
    and differ from the input ``(m,)``."""
    features, delta, arm = move
    out = x.clone()
    f = torch.as_tensor(features, device=x.device)
    dlt = torch.as_tensor(delta, dtype=x.dtype, device=x.device)
    if len(arm):
        out[:, f] = dlt
    else:
        out[:, f] = out[:, f] + dlt
    lo = torch.as_tensor(space.lower[features], dtype=x.dtype, device=x.device)
    hi = torch.as_tensor(space.upper[features], dtype=x.dtype, device=x.device)
    inside = ((out[:, f] >= lo) & (out[:, f] <= hi)).all(dim=1)
    moved = (out[:, f] != x[:, f]).any(dim=1)
    return out, inside & moved


def lattice_search(state: BatchState, sub: torch.Tensor, steps: int, grad_cost: int) -> None:
    """The three parts above on the open inputs of ``sub`` (``steps`` gradient calls per
    minimum-norm run; inputs that cannot pay a part are left out of it)."""
    space = state.space
    frozen = relaxed(space)
    flat = state.x.reshape(len(state.x), -1)
    sub = sub[state.still_open(sub)]
    run = state.affordable(sub, steps * grad_cost + 2)
    if len(run) and frozen.mutable.any():
        _run(state, run, frozen, steps)
    margins, points = neighbours(state, sub)
    if margins is None or not frozen.mutable.any():
        return
    moves_n = margins.shape[1]
    # a step that costs more than the best radius cannot lead to a smaller one
    scale = torch.as_tensor(space.scale, dtype=flat.dtype, device=flat.device)
    for rank in range(min(NEIGHBOURS, moves_n)):
        todo = sub[state.still_open(sub)]
        todo = state.affordable(todo, steps * grad_cost + 2)
        if len(todo) == 0:
            return
        pick = margins[todo].argsort(dim=1)[:, rank]
        ok = torch.isfinite(margins[todo, pick])
        start = points[pick, todo]
        cost = state.threat.norm((start - flat[todo]) / scale)
        ok &= cost < state.best_r[todo]
        todo, start = todo[ok], start[ok]
        if len(todo) == 0:
            continue
        _run(state, todo, held(space), steps, start)
    polish(state, sub, steps, grad_cost)


def neighbours(state: BatchState, sub: torch.Tensor
               ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Verify every lattice neighbour of the open inputs of ``sub`` (one pass each; models
    without gradients too). Returns the logit margin ``(len(state.x), moves)`` at each
    neighbour that is no counterexample (``inf`` elsewhere) and the neighbours
    ``(moves, len(state.x), d)``, projected into the space; ``(None, None)`` without moves."""
    space = state.space
    flat = state.x.reshape(len(state.x), -1)
    moves = lattice_moves(space)
    if not moves:
        return None, None
    margins = torch.full((len(state.x), len(moves)), float("inf"), dtype=torch.float64,
                         device=flat.device)
    points = torch.zeros((len(moves), *flat.shape), dtype=flat.dtype, device=flat.device)
    for k, move in enumerate(moves):
        todo = sub[state.still_open(sub)]
        todo = state.affordable(todo, 1)
        if len(todo) == 0:
            break
        near, valid = _apply(space, flat[todo], move)
        todo, near = todo[valid], near[valid]
        if len(todo) == 0:
            continue
        near = space.project(near, flat[todo])  # relations may move real features along
        points[k, todo] = near
        classes, logits, _ = state.verify(todo, near.reshape(len(todo), *state.x.shape[1:]))
        own = logits.gather(1, state.y[todo][:, None])[:, 0]
        other = logits.scatter(1, state.y[todo][:, None], -float("inf")).max(dim=1).values
        gap = (own - other).to(torch.float64)
        margins[todo, k] = torch.where(classes >= 0, float("inf"),
                                       torch.nan_to_num(gap, nan=float("inf")))
    return margins, points


def polish(state: BatchState, sub: torch.Tensor, steps: int, grad_cost: int) -> None:
    """Around each best counterexample of ``sub``: its integer values, and each of its
    :data:`POLISH_RUNS` largest integer moves one step back towards the input, held while a
    minimum-norm run moves the real features from the input (rounding a relaxed run
    outward can overshoot by a step; the real features then pay less than that step)."""
    space = state.space
    integer = np.flatnonzero(space.mutable & (space.types == "integer"))
    if len(integer) == 0 or not (space.mutable & (space.types == "real")).any():
        return
    fixed = held(space)
    flat = state.x.reshape(len(state.x), -1)
    scale = torch.as_tensor(space.scale, dtype=flat.dtype, device=flat.device)
    cols = torch.as_tensor(integer, device=flat.device)
    for k in range(POLISH_RUNS + 1):
        todo = sub[state.still_open(sub) & torch.isfinite(state.best_r[sub])]
        todo = state.affordable(todo, steps * grad_cost + 2)
        if len(todo) == 0:
            return
        best = state.best_x[todo].reshape(len(todo), -1)
        step = (best - flat[todo])[:, cols]
        start = flat[todo].clone()
        discrete = torch.as_tensor(space.types != "real", device=flat.device)
        start[:, discrete] = best[:, discrete]
        if k > 0:  # the k-th largest integer move, one step back
            order = (step.abs() / scale[cols]).argsort(dim=1, descending=True)
            if k > len(integer):
                return
            j = order[:, k - 1]
            moved = step.gather(1, j[:, None])[:, 0]
            keep = moved != 0
            todo, start, j, moved = todo[keep], start[keep], j[keep], moved[keep]
            if len(todo) == 0:
                continue
            rows = torch.arange(len(todo), device=flat.device)
            start[rows, cols[j]] -= torch.sign(moved)
        _run(state, todo, fixed, steps, start)
