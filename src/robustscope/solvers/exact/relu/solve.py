"""The network MILP in the registry's calling convention (``solve(problem)``)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from robustscope.core.errors import InputError
from robustscope.core.statuses import EXACT
from robustscope.solvers.bounds.certify import BOUNDARY_PUSHES, network_or_none
from robustscope.solvers.exact.relu.milp import exact_relu_radius, relu_layers
from robustscope.solvers.output import SolverOutput
from robustscope.solvers.problem import SolverProblem

#: The MILP searches the ball a relative hair above the verified radius it is given.
BALL_MARGIN = 1e-6


def relu_network(model):
    """What the network MILP reads: the layers of a plain ReLU MLP (any saved format), else
    the graph of a network with ReLUs (convolutions, pooling, residual sums), else None."""
    try:
        return relu_layers(model.module)
    except InputError:
        pass
    net = network_or_none(model.module, tuple(model.input_shape or ()), model.device)
    return net if net is not None and net.relus else None


def solve(problem: SolverProblem, time_limit: float = 10.0) -> SolverOutput:
    """A MILP over the ball of radius ``problem.eps`` (a verified radius per input, a
    relative :data:`BALL_MARGIN` wider; ``None``: the whole box) around each input.

    Its incumbent sits on the decision boundary: pushed a hair outwards
    (``BOUNDARY_PUSHES``), each push goes through ``problem.verify``. ``lower_bound`` is the
    MILP's certified bound, at most the ball's radius and the smallest verified size (HiGHS's
    tolerances, about 1e-7 on rows, can put it a hair above a verified counterexample).
    Status ``exact`` on every input: the program covers the whole ball, which holds a
    verified counterexample, so the bracket closes wherever that meets the bound (the MILP's
    own status is ``meta["milp_status"]``)."""
    x = problem.x
    n = len(problem)
    eps = (torch.full((n,), math.inf, dtype=torch.float64, device=x.device)
           if problem.eps is None else problem.eps)
    upper = (eps * (1 + BALL_MARGIN)).cpu().numpy()
    res = exact_relu_radius(relu_network(problem.model), x.cpu().numpy(),
                            problem.y.cpu().numpy(), upper, problem.space, problem.threat,
                            time_limit=time_limit)
    best = eps.to(torch.float64).clone()
    has = torch.as_tensor(res.found, device=x.device)
    if has.any() and problem.verify is not None:
        rows = torch.nonzero(has).reshape(-1)
        x_sub = x[rows]
        space = problem.space
        u = space.scaled_delta(res.x_adv.to(x.device)[has].reshape(x_sub.shape), x_sub)
        for push in BOUNDARY_PUSHES:
            classes, _, size = problem.verify(rows, space.apply_delta(x_sub, u * push))
            best[rows] = torch.minimum(best[rows],
                                       torch.where(classes >= 0, size, math.inf))
    lower = torch.as_tensor(np.minimum(res.lower_bound, upper), dtype=torch.float64,
                            device=x.device)
    lower = torch.minimum(lower, best)
    return dataclasses.replace(res, lower_bound=lower.cpu().numpy(),
                               status=np.full(n, EXACT, dtype=object),
                               meta={**res.meta, "milp_status": res.status})
