"""Projected gradient descent at a fixed, per-input strength (Linf, L2, L1)."""

from __future__ import annotations

import torch

from robustscope.core.space import FeatureSpace
from robustscope.core.statement import Statement
from robustscope.models.base import Classifier
from robustscope.solvers.attacks.gradient.scaled_problem import ScaledProblem, cosine_schedule
from robustscope.solvers.output import SolverOutput
from robustscope.solvers.problem import SolverProblem
from robustscope.threats.lp import LpThreat


def pgd(
    model: Classifier,
    x: torch.Tensor,
    y: torch.Tensor,
    space: FeatureSpace,
    threat: LpThreat,
    eps: torch.Tensor,
    statement: Statement,
    generator: torch.Generator,
    steps: int = 25,
    restarts: int = 1,
    towards: list[torch.Tensor | None] | None = None,
    init: torch.Tensor | None = None,
    step_start: float = 0.5,
    step_end: float = 0.02,
) -> SolverOutput:
    """Search ``{u : ||u||_p <= eps, u in box}`` for a counterexample.

    Minimises the statement's margin with steepest-descent steps in the threat's norm, of
    size ``step · eps`` annealed (cosine) from ``step_start`` to ``step_end``. Restart ``r``
    starts from ``init`` (restart 0, if given; scaled perturbations ``(n, d)``), else 0
    (restart 0) or a uniform point of the ball, and pushes towards class ``towards[r]`` when
    given (``None`` = any other class).

    Returns per input the smallest-norm iterate that satisfied the statement (``found``),
    else the iterate of lowest margin (``meta['margin']`` ``(n,)``). Costs
    ``steps · restarts`` gradient calls.
    """
    n = x.shape[0]
    eps = eps.to(x.dtype).reshape(n)
    best_u = torch.zeros(n, space.n_features, dtype=x.dtype, device=x.device)
    best_norm = torch.full((n,), float("inf"), dtype=x.dtype, device=x.device)
    best_margin = torch.full((n,), float("inf"), dtype=x.dtype, device=x.device)
    found = torch.zeros(n, dtype=torch.bool, device=x.device)
    towards = towards or [None]
    for r in range(restarts):
        problem = ScaledProblem(model, x, y, space, statement, towards[r % len(towards)])
        if r == 0 and init is not None:
            u = problem.clip(threat.project(init.reshape(n, -1).to(x.dtype), eps), threat, eps)
        elif r == 0:
            u = torch.zeros_like(best_u)
        else:
            u = threat.random_in_ball(n, problem.n_features, eps, generator, x.dtype, x.device)
            u = problem.clip(u, threat, eps)
        for k in range(steps + 1):
            logits, margin, grad = problem.margin_and_grad(u) if k < steps else (
                *_forward_only(problem, u), None)
            ok = ScaledProblem.success(problem, logits)
            norm = threat.norm(u)
            better_found = ok & (~found | (norm < best_norm))
            better_margin = ~found & ~ok & (margin < best_margin)
            take = better_found | better_margin
            best_u = torch.where(take[:, None], u, best_u)
            best_norm = torch.where(better_found, norm, best_norm)
            best_margin = torch.where(take, margin, best_margin)
            found |= ok
            if grad is None:
                break
            grad = problem.descent_gradient(u, grad)
            alpha = cosine_schedule(k, steps, step_start, step_end)
            step = u - alpha * eps[:, None] * threat.steepest_direction(grad)
            u = problem.clip(threat.project(step, eps), threat, eps, anchor=u)
    return SolverOutput.of_candidates(x, problem.candidate(best_u), found.cpu().numpy(), space,
                                      threat, meta={"margin": best_margin})


def _forward_only(problem: ScaledProblem, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.no_grad():
        logits = problem.model.logits(problem.candidate(u))
        margin = problem.statement.margin(logits.to(torch.float64), problem.y, problem.towards)
    return logits, margin.to(u.dtype)


def solve(problem: SolverProblem, **options) -> SolverOutput:
    """:func:`pgd` on ``problem`` (the registry's calling convention), its model calls
    charged to ``problem.budget`` through ``problem.model``, the view the search built."""
    return pgd(problem.model, problem.x, problem.y, problem.space, problem.threat,
               problem.eps, problem.statement, problem.generator, **options)
