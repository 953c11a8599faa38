"""The exact tree solver in the registry's calling convention (``solve(problem)``)."""

from __future__ import annotations

from robustscope.solvers.exact.trees.driver import exact_tree_radius
from robustscope.solvers.output import SolverOutput
from robustscope.solvers.problem import SolverProblem


def solve(problem: SolverProblem, time_limit: float = 10.0, max_radius: float | None = None,
          **options) -> SolverOutput:
    """:func:`~robustscope.solvers.exact.trees.driver.exact_tree_radius` on the problem's
    tree ensemble, verifying inside its loop through ``problem.verify`` (one row at a time)
    where the problem has one, and reading the clean decisions from ``problem.clean_logits``.
    ``time_limit`` seconds per input; beyond ``max_radius`` an input is censored."""
    verify = None
    if problem.verify is not None:
        def verify(i, x_adv):
            return problem.verify_one(i, x_adv)[0]
    clean = (None if problem.clean_logits is None
             else problem.clean_logits.argmax(dim=1).cpu().numpy())
    return exact_tree_radius(problem.model, problem.x.cpu().numpy(), problem.y.cpu().numpy(),
                             problem.space, problem.threat, time_limit=time_limit,
                             max_radius=max_radius, target=problem.statement.target,
                             verify=verify, clean_class=clean, **options)
