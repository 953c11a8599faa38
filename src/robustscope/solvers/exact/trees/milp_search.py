"""The MILP search of one input's radius, where the bracket stayed open.

Programs are solved with a radius cutoff (``milp_rows.reduce_program`` fixes every cut whose
crossing alone costs more). :func:`solve_input` (L1, L2; Linf under relations) starts the
cutoff at twice the cheapest crossing and doubles it while no class can win (each such level
certifies a lower bound), then minimises the norm at the first level that admits a
counterexample. For Linf the radius is one of the finitely
many crossing costs, and :func:`search_linf`, a geometric then binary search over them with
objective-free feasibility programs, is faster than minimising (``linf_search='bisect'``).

Ties: a class with a lower index than the label wins a tie (as ``argmax`` does), so its
score need only reach the label's; a class with a higher index must lead by ``tie_tol``
(:class:`Goal`). Every counterexample is re-checked with the model (:func:`solve_goal`);
when the library settles a near-tie the other way, the program is solved again with a 100x
and then 10^4x larger margin, and a counterexample that still fails is dropped
(``verification_failed``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from robustscope.core.space import FeatureSpace
from robustscope.models.trees import TreeEnsemble
from robustscope.solvers.exact.trees import settings
from robustscope.solvers.exact.trees.bracket import Bracket, Check, polish
from robustscope.solvers.exact.trees.milp import Backend, Solve, build_point, solve_class
from robustscope.solvers.exact.trees.milp_rows import Reduced, reduce_program, relation_input
from robustscope.solvers.exact.trees.program import Program, construct, input_costs, norm
from robustscope.solvers.tolerances import TREE_BRACKET_RTOL as EXACT_RTOL
from robustscope.threats import LpThreat


class InputResult(NamedTuple):
    """What the search settled for one input."""

    radius: float                 # norm of the verified counterexample (inf: none)
    x_adv: np.ndarray             # (d,) the counterexample (the input where none)
    adv_class: int                # the model's class there (-1: none)
    lower_bound: float            # certified lower bound on the radius
    verification_failed: bool     # a program's counterexample failed the model's check
    bound_refused: bool = False   # a program's bound lay above a verified counterexample


def solve_input(prog: Program, check: Check, ens: TreeEnsemble,
                 space: FeatureSpace, threat: LpThreat, x0: np.ndarray, yi: int,
                 target: int | None, deadline: float, max_radius: float | None,
                 backend: Backend, growth: float, start: Bracket | None = None,
                 ) -> InputResult:
    """Radius search for one correctly classified input, by minimising programs.

    Returns an :class:`InputResult`.
    Programs are solved at growing cutoffs ``eps`` (radius units): at each level every other
    class is tried (closest clean score first) with the cutoff lowered to the best radius
    found; a level where no class is feasible certifies ``radius > eps``. With a ``start``
    bracket (from :func:`prune_input`) holding a counterexample, one level at its radius remains.
    """
    linf = threat.p == math.inf
    power = 2.0 if threat.p == 2.0 else 1.0
    costs = input_costs(prog, x0, space, threat.p)
    rel = relation_input(space, x0)
    cap = np.inf if rel is None else settings.REL_RADIUS_CAP ** power
    free = costs.cost[~costs.frozen]
    if len(free) == 0:  # nothing can move: no counterexample at any radius
        return InputResult(np.inf, x0.copy(), -1, np.inf, False, False)
    goals = input_goals(ens.class_scores(x0[None])[0] if start is None else start.clean, yi,
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
    reduced: dict[float, Reduced] = {}
    for level in levels:
        bounds = []
        for goal in goals:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                bounds.append(lower ** power)
                continue
            cutoff = min(level, best_r) ** power
            if cutoff not in reduced:
                reduced[cutoff] = reduce_program(prog, costs, cutoff, linf, rel=rel)
            red = reduced[cutoff]
            known = in_goal.get(goal.pairs, np.inf) ** power
            incumbent = None
            if known <= cutoff * (1 + settings.BOUND_SLACK):
                # the minimisation prunes against the verified counterexample's cost from the
                # start (a MIP start with its cell did the same, but HiGHS 1.16 with presolve
                # then returned that start's values beside a better optimal objective)
                incumbent = known
            else:
                # a feasibility program first: cheap to refute, and when it finds a move its
                # cost tightens the cutoff of the minimisation that follows
                probe = solve_class(red, goal.with_margin(prog.tie_tol), cutoff, remaining,
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
                        red = reduce_program(prog, costs, cutoff, linf)
            res, x_adv, cls, ok = solve_goal(prog, red, check, x0, goal, cutoff, deadline,
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
            slack = 1 + settings.BOUND_SLACK
            if known <= cutoff * slack and claimed > known * slack:
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
        near = polish(prog, ens, space, x0, best_x, threat.p, yi, target)
        r = norm((near - x0) / space.scale, threat.p)
        if r < best_r * (1 - 1e-12):
            cls = check(near)
            if cls >= 0:
                best_r, best_x, best_cls = r, near, cls
    return InputResult(best_r, best_x, best_cls, lower, failed, refused)


@dataclass(frozen=True)
class Goal:
    """What a counterexample must achieve: every ``(winner, loser)`` pair's winner scores at
    least the loser (a tie counts when the winner has the lower index, as in argmax)."""

    pairs: tuple[tuple[int, int], ...]

    def with_margin(self, tie_tol: float, factor: float = 1.0) -> list[tuple[int, int, float]]:
        return [(w, lo, 0.0 if (w < lo and factor == 1.0) else tie_tol * factor)
                for w, lo in self.pairs]


def input_goals(clean: np.ndarray, yi: int, target: int | None) -> list[Goal]:
    """Decision change: one goal per other class, closest clean score first. Targeted: one
    goal, the target above every other class."""
    if target is not None:
        return [Goal(tuple((target, k) for k in range(len(clean)) if k != target))]
    order = [int(j) for j in np.argsort(clean[yi] - clean, kind="stable") if j != yi]
    return [Goal(((j, yi),)) for j in order]


def solve_goal(prog: Program, red: Reduced, check: Check, x0: np.ndarray,
             goal: Goal, cutoff: float, deadline: float,
             backend: Backend, incumbent: float | None = None,
             ) -> tuple[Solve, np.ndarray, int, bool]:
    """Solve for ``goal``, build the counterexample and verify it with ``check`` (the model,
    called again); when the model disagrees (a score tie settled the other way), ask for a
    clearer margin. Returns ``(solve, x_adv, adv_class, verified)``."""
    res = solve_class(red, goal.with_margin(prog.tie_tol), cutoff,
                       deadline - time.perf_counter(), backend, incumbent=incumbent)
    if res.p is None or not np.isfinite(res.objective):
        return res, x0, -1, False
    x_adv = build_point(prog, x0, res, red)
    cls = check(x_adv)
    ok = cls >= 0
    for tries in (1, 2):
        if ok or deadline - time.perf_counter() <= 0:
            break
        retry = solve_class(red, goal.with_margin(prog.tie_tol, 100.0 ** tries), cutoff,
                             deadline - time.perf_counter(), backend)
        if retry.p is None or not np.isfinite(retry.objective):
            break
        x_adv = build_point(prog, x0, retry, red)
        cls = check(x_adv)
        ok = cls >= 0
    return res, x_adv, cls, ok


def search_linf(prog: Program, check: Check, ens: TreeEnsemble,
                 space: FeatureSpace, x0: np.ndarray, yi: int, target: int | None,
                 deadline: float, max_radius: float | None, backend: Backend, growth: float,
                 start: Bracket | None = None,
                 ) -> InputResult:
    """Linf radius by search over the finitely many candidate values (an
    :class:`InputResult`; no bound is refused here).

    The Linf radius is the crossing cost of some cut, so it is one of the sorted distinct
    costs ``C``. A *feasibility* program at ``C[k]`` (only cuts costing at most ``C[k]`` may
    move; no objective) says whether some class can win; the search grows ``k``
    geometrically, then bisects. An infeasible ``C[k]`` certifies ``radius >= C[k+1]``; a
    feasible one gives a verified counterexample whose norm is itself in ``C``. A ``start``
    bracket (from :func:`prune_input`) opens the search between its certified index and its
    counterexample, so programs only hold the cuts within its radius.
    """
    costs = input_costs(prog, x0, space, math.inf)
    all_costs = np.unique(costs.cost[~costs.frozen])
    if len(all_costs) == 0:  # nothing can move
        return InputResult(np.inf, x0.copy(), -1, np.inf, False)
    cand = all_costs if max_radius is None else all_costs[all_costs <= max_radius]
    clean = ens.class_scores(x0[None])[0] if start is None else start.clean
    goals = input_goals(clean, yi, target)
    best = [np.inf, x0.copy(), -1] if start is None else [start.radius, start.x, start.cls]
    failed = False

    def probe(k: int) -> bool | None:
        nonlocal failed
        red = reduce_program(prog, costs, float(cand[k]), True, feasibility=True)
        for goal in goals:
            if deadline - time.perf_counter() <= 0:
                return None
            res, x_adv, cls, ok = solve_goal(prog, red, check, x0, goal, float(cand[k]),
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
    return InputResult(best[0], best[1], best[2], lower, failed)
