"""The exact linear solver in the registry's calling convention (``solve(problem)``)."""

from __future__ import annotations

import torch

from robustscope.solvers.exact.linear.closed_form import exact_linear_radius
from robustscope.solvers.output import SolverOutput
from robustscope.solvers.problem import SolverProblem


def solve(problem: SolverProblem, **options) -> SolverOutput:
    """:func:`~robustscope.solvers.exact.linear.closed_form.exact_linear_radius` on the
    model's weights; every candidate (the input itself where there is none) goes through
    ``problem.verify`` when the problem has one. Status ``exact`` where the closed form
    closes the bracket at its candidate."""
    weights, bias = problem.model.linear_parameters()
    problem.fit_threads(len(problem) * weights.size)  # sorts over (rows, classes, features)
    out = exact_linear_radius(weights, bias, problem.x.cpu().numpy(),
                              problem.y.cpu().numpy(), problem.space, problem.threat,
                              problem.statement.target, **options)
    if problem.verify is not None:
        rows = torch.arange(len(problem), device=problem.x.device)
        problem.verify(rows, out.x_adv.to(problem.x.device))
    return out
