"""Rounds of further minimum-norm runs until each input's radius stops moving (issue #39,
opt-in through ``SearchConfig.converge_ceiling``).

After the planned cascade, every input whose bracket is still open gets rounds of one
minimum-norm run of ``config.converge_steps`` gradient calls and a line search, each round
from another start, in turn: the input itself with another step scale, the best
counterexample's class refined from that counterexample, a targeted run at the next class
beyond the best one's, and a random point of the ball at the best radius. An input stops
when its radius has converged (``config.converge_patience`` rounds in a row improved the best
radius by less than ``config.converge_tol``, and at least two rounds reached within that
tolerance of the best: independent starts agree), when its bracket closes, or when it reaches
the ceiling of passes (``converge_ceiling``; a budget stays a hard ceiling below it).
"""

from __future__ import annotations

import numpy as np
import torch

from robustscope.search.minnorm_runs import MINNORM, refine_best_class, targets_beyond_best
from robustscope.search.plan import AttackPlan
from robustscope.search.refine import line_search
from robustscope.search.state import BatchState

#: The step scales (``minnorm``'s ``step_start``) the rounds from the input take in turn.
STEP_SCALES = (2.5, 0.4, 6.0, 1.0)
#: Kinds of start, in turn.
STARTS = ("input", "refine", "targeted", "random")


def converge(state: BatchState, sub: torch.Tensor, plan: AttackPlan, grad_cost: int) -> None:
    """Convergence rounds for the inputs ``sub`` (see the module's docstring); records
    per input whether its radius converged in ``state.converged``."""
    config = state.config
    ceiling = config.converge_ceiling
    if ceiling is None or len(sub) == 0:
        return
    n = len(state.x)
    device = sub.device
    since = torch.zeros(n, dtype=torch.long, device=device)
    agree = torch.zeros(n, dtype=torch.long, device=device)
    done = torch.zeros(n, dtype=torch.bool, device=device)
    line = plan.line_steps
    cost = config.converge_steps * grad_cost + 1 + line
    k = state.model.n_classes
    for r in range(config.converge_max_rounds):
        open_ = sub[state.still_open(sub, probes=False) & ~done[sub]]
        owners = state.owners[open_.cpu().numpy()]
        left = np.minimum(ceiling - state.ledger.used(owners), state.ledger.remaining(owners))
        open_ = open_[torch.as_tensor(left >= cost, device=device)]
        if len(open_) == 0:
            break
        before = state.best_r[open_].clone()
        kind = STARTS[r % len(STARTS)]
        towards = init = None
        scale = {}
        if kind == "input":
            scale = {"step_start": STEP_SCALES[(r // len(STARTS)) % len(STEP_SCALES)]}
        elif kind == "refine":
            towards, init = refine_best_class(state, open_, targets_beyond_best(state, open_, 1))
            towards = towards[:, 0]
        elif kind == "targeted" and k > 2:
            rank = (r // len(STARTS)) % (k - 2)
            towards = targets_beyond_best(state, open_, rank + 1)[:, rank]
        elif kind == "random":
            init = _random_start(state, open_)
        out = MINNORM(state.problem(open_), steps=config.converge_steps, towards=towards,
                      init=init, **scale)
        _, _, size = state.verify(open_, out.x_adv)
        if line:
            line_search(state, open_, line)
        since[open_], agree[open_], done[open_] = weigh_round(
            before, state.best_r[open_], size, since[open_], agree[open_],
            config.converge_tol, config.converge_patience)
    state.converged[sub] = done[sub] | ~state.still_open(sub, probes=False)


def weigh_round(before: torch.Tensor, after: torch.Tensor, size: torch.Tensor,
                since: torch.Tensor, agree: torch.Tensor, tol: float, patience: int
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The evidence after one round, per input (all ``(m,)``): best radius ``before`` and
    ``after`` the round, the size of the round's own counterexample (``inf``: none), rounds
    ``since`` the last improvement and rounds that ``agree`` with the best (within ``tol``)
    so far. A round improves where it lowers the best radius by more than ``tol`` (or finds
    the first counterexample): that resets both counts (the improving round agrees with the
    new best). Returns the new ``(since, agree, converged)``; converged = ``patience``
    rounds without improvement and two rounds agreeing."""
    improved = (after < before * (1 - tol)) | (~torch.isfinite(before) & torch.isfinite(after))
    near = (torch.isfinite(size) & (size <= after * (1 + tol))).long()
    since = torch.where(improved, torch.zeros_like(since), since + 1)
    agree = torch.where(improved, near, agree + near)
    return since, agree, (since >= patience) & (agree >= 2)


def _random_start(state: BatchState, sub: torch.Tensor) -> torch.Tensor:
    """A random point of the ball at each input's best radius (``max_radius`` without one),
    projected into the feature space: ``(len(sub), *shape)``."""
    x = state.x[sub]
    radius = state.upper_ends(sub)
    u = state.threat.random_in_ball(len(sub), state.space.n_features, radius, state.generator,
                                    x.dtype, x.device)
    return state.space.project(state.space.apply_delta(x, u), x)
