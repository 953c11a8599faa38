"""Bound propagation in the registry's calling convention (``solve(problem)``)."""

from __future__ import annotations

import dataclasses

import numpy as np

from robustscope.core.statuses import EXACT
from robustscope.solvers.bounds.certify import BRANCH_TIME_LIMIT, bound_radius
from robustscope.solvers.bounds.graph import Network
from robustscope.solvers.output import SolverOutput
from robustscope.solvers.problem import SolverProblem


def solve(problem: SolverProblem, method: str = "crown", network: Network | None = None,
          time_limit: float = BRANCH_TIME_LIMIT, deadline: float | None = None) -> SolverOutput:
    """:func:`~robustscope.solvers.bounds.certify.bound_radius` below the verified radii
    ``problem.eps`` (``network``: the graph already read, else the model's module is read);
    branch and bound's leaf points go through ``problem.verify`` one at a time. No candidate;
    status ``exact`` on every input: the certificate covers the ball of ``eps``, so the
    bracket closes wherever a verified radius meets ``lower_bound``. ``deadline``
    (``time.perf_counter()`` seconds) ends the bisections and proofs early."""
    verify = None
    if problem.verify is not None:
        def verify(i, candidate):
            return problem.verify_one(i, candidate)[1]
    out = bound_radius(problem.model if network is None else network, problem.x,
                       problem.y.cpu().numpy(), problem.space, problem.threat,
                       problem.eps.cpu().numpy(), statement=problem.statement, method=method,
                       network=network, logits=problem.clean_logits,
                       model_dtype=problem.model.dtype, time_limit=time_limit, verify=verify,
                       deadline=deadline)
    return dataclasses.replace(out, status=np.full(len(problem), EXACT, dtype=object))
