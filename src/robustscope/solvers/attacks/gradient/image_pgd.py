"""PGD on the parameters of an image threat (flow, LUT, DCT offsets, transform parameters).

One batched function: every input has its own strength ``eps[i]``; the objective is the
statement's margin (negative = failure) plus the threat's penalty; each iteration takes the
threat's steepest step on the parameters and projects them back onto ``strength <= eps``.
Per input it keeps the iterate with the lowest margin over all steps and restarts (restart 0
starts at the identity, later ones at a random point of the constraint set), and stops
working on an input once its margin is negative. It never decides success: callers verify
the returned candidates by calling the model again.
"""

from __future__ import annotations

import numpy as np
import torch

from robustscope.core.checks import make_generator
from robustscope.core.errors import InputError
from robustscope.core.statement import DECISION_CHANGE, Statement
from robustscope.core.statuses import ATTACKED, CENSORED
from robustscope.models.base import Classifier
from robustscope.models.metered import narrowed
from robustscope.solvers.output import SolverOutput
from robustscope.solvers.problem import SolverProblem
from robustscope.threats.image import ImageThreat


def image_pgd(
    model: Classifier,
    x: torch.Tensor,
    y: torch.Tensor,
    threat: ImageThreat,
    eps: torch.Tensor,
    statement: Statement = DECISION_CHANGE,
    generator: torch.Generator | None = None,
    steps: int = 20,
    restarts: int = 1,
    scan: int | None = None,
    init: torch.Tensor | None = None,
) -> SolverOutput:
    """Minimise the margin over ``threat``'s parameters within per-input strengths ``eps``.

    Parameters
    ----------
    model : Classifier
        Gives logits and input gradients (autograd or finite differences).
    x : (n, C, H, W) images in [0, 1]; y : (n,) label indices; eps : (n,) strengths.
    steps : gradient steps per restart; the step length is ``2.5 · eps / steps`` times the
        threat's ``step_scale`` (for LPIPS the threat's own pixel step).
    restarts : runs per input; inputs already broken skip the later runs.
    scan : for threats with one parameter per input, first evaluate ``scan`` evenly spaced
        values in ``[-eps, eps]`` (forward passes only; the margin of a colour transform is
        often not monotone along its parameter, where sign steps from 0 get stuck). Default:
        21 for one-parameter threats, else 0. PGD then starts from the best value found.
    init : optional parameters (n, *param_shape) to start restart 0 from (projected onto
        ``eps`` first), e.g. a counterexample found at a larger strength.

    Returns a :class:`~robustscope.solvers.output.SolverOutput`: ``x_adv`` (n, C, H, W) =
    ``threat.apply(x, params)``, ``radius`` its strength where the margin went negative;
    ``meta['params']`` (n, *param_shape) and ``meta['margin']`` (n,) as seen in the search.
    """
    if steps < 1 or restarts < 1:
        raise InputError(f"steps and restarts must be >= 1, got {steps} and {restarts}")
    n = x.shape[0]
    if generator is None:
        generator = make_generator(0, x.device)
    eps = eps.to(device=x.device, dtype=x.dtype)
    size = 2.5 * eps / steps * threat.step_scale
    best_margin = torch.full((n,), float("inf"), dtype=x.dtype, device=x.device)
    best_params = threat.zero_params(x)
    best_x = x.clone()
    if scan is None:
        scan = 21 if threat.param_shape(x[:1]) == (1,) else 0
    if scan:
        _scan(model, x, y, threat, eps, statement, scan, best_margin, best_params, best_x)
    if init is not None:
        if init.shape != best_params.shape:
            raise InputError(f"init has shape {tuple(init.shape)}; expected "
                             f"{tuple(best_params.shape)}")
        init = threat.project(x, init.to(device=x.device, dtype=x.dtype), eps)

    for restart in range(restarts):
        # rows are kept on the host too: the ledger charges host rows, and a device index
        # read back would wait for the device a second time per step
        todo_host = np.flatnonzero((best_margin >= 0).cpu().numpy())
        if len(todo_host) == 0:
            break
        todo = torch.as_tensor(todo_host).to(x.device, non_blocking=True)
        xs = x[todo]
        if restart == 0 and init is not None:
            params = init[todo].clone()
        elif restart == 0 and scan:
            params = best_params[todo].clone()
        elif restart == 0 or not threat.random_start:
            params = threat.zero_params(xs)
        else:
            params = threat.random_params(xs, eps[todo], generator)
        active_host = np.arange(len(todo_host))  # rows of todo still unbroken
        active = torch.arange(len(todo_host), device=x.device)
        for t in range(steps + 1):
            rows = todo[active]
            xa, pa, ya = xs[active], params[active], y[rows]
            last = t == steps
            view = narrowed(model, todo_host[active_host])  # charged to these inputs only
            with torch.enable_grad():
                pg = pa.detach().requires_grad_(not last)
                x_adv = threat.apply(xa, pg)
                if last:
                    with torch.no_grad():
                        logits = view.logits(x_adv)
                    margin = statement.margin(logits, ya)
                else:
                    _, margin, gx = view.value_and_grad(
                        x_adv.detach(), lambda z, ya=ya: statement.margin(z, ya))
                    objective = (x_adv * gx.to(x_adv.dtype)).sum()
                    if threat.penalty_weight > 0:
                        objective = objective + threat.penalty_weight * threat.penalty(pg).sum()
                    (gp,) = torch.autograd.grad(objective, pg)
            margin = margin.to(x.dtype)
            # keep the better iterates without asking the host which they are (a masked
            # write: on a GPU, boolean indexing or .any() would wait for the device)
            better = margin < best_margin[rows]
            best_margin[rows] = torch.where(better, margin, best_margin[rows])
            best_params[rows] = torch.where(_rows_like(better, pa), pa.detach(),
                                            best_params[rows])
            best_x[rows] = torch.where(_rows_like(better, x_adv), x_adv.detach(),
                                       best_x[rows])
            if last:
                break
            new = threat.step(xa, pa.detach(), gp, eps[rows], size[rows])
            params[active] = threat.project(xa, new, eps[rows]).detach()
            # the one host synchronisation of a step: drop the inputs already broken
            active_host = active_host[(margin >= 0).cpu().numpy()]
            if len(active_host) == 0:
                break
            active = torch.as_tensor(active_host).to(x.device, non_blocking=True)
    found = (best_margin < 0).cpu().numpy()
    with torch.no_grad():
        strength = threat.strength(x, best_params, best_x).detach().cpu().double().numpy()
    n = x.shape[0]
    return SolverOutput(
        x_adv=best_x, radius=np.where(found, strength, np.inf), lower_bound=np.zeros(n),
        status=np.where(found, ATTACKED, CENSORED).astype(object),
        adv_prediction=np.full(n, -1, dtype=np.int64), forward_queries=np.zeros(n, np.int64),
        seconds=np.zeros(n), meta={"params": best_params, "margin": best_margin})


def _rows_like(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A per-row mask ``(m,)`` shaped to broadcast against ``like`` ``(m, ...)``."""
    return mask.reshape((-1,) + (1,) * (like.ndim - 1))


@torch.no_grad()
def _scan(model, x, y, threat, eps, statement, points, best_margin, best_params, best_x):
    """Evaluate ``points`` parameter values ``eps · linspace(-1, 1)`` per input (in place)."""
    for t in torch.linspace(-1.0, 1.0, points, dtype=x.dtype, device=x.device):
        params = threat.project(x, (t * eps).reshape(-1, 1), eps)
        x_adv = threat.apply(x, params)
        margin = statement.margin(model.logits(x_adv), y).to(x.dtype)
        better = margin < best_margin
        best_margin[better] = margin[better]
        best_params[better] = params[better]
        best_x[better] = x_adv[better]


def solve(problem: SolverProblem, **options) -> SolverOutput:
    """:func:`image_pgd` on ``problem`` (the registry's calling convention), its model calls
    charged to ``problem.budget`` through ``problem.model``, the view the search built."""
    return image_pgd(problem.model, problem.x, problem.y, problem.threat, problem.eps,
                     problem.statement, problem.generator, **options)
