"""The exact stage of the search: any exact solver's output applied to the batch.

Which exact solver serves a model is :func:`exact_kind`; the solver is called through the
registry on a :class:`~robustscope.solvers.problem.SolverProblem` of the batch's open inputs
and its output applied by :meth:`~robustscope.search.state.BatchState.apply_exact` (lower
bound; exact where its certificate closes the bracket and the verified radius meets the
bound within ``BRACKET_RTOL``; proven unbreakable; certified beyond ``max_radius``). Linear
models and trees run it before the attacks, on every open input; a ReLU network's MILP runs
after them, over the ball of the attack's radius (``solver="exact"``).
"""

from __future__ import annotations

import math

import torch

from robustscope.core.statement import Statement
from robustscope.models.base import Classifier
from robustscope.models.torch_model import TorchClassifier
from robustscope.search.state import BatchState, registered
from robustscope.solvers.registry import get_solver
from robustscope.threats import LpThreat

#: The registry's exact solver of each kind :func:`exact_kind` names.
EXACT_SOLVERS = {"linear": "exact-linear", "trees": "exact-trees", "relu": "exact-relu"}


def exact_kind(model: Classifier, threat: LpThreat, statement: Statement) -> str | None:
    """Which exact solver serves ``model``: ``linear``, ``trees``, ``relu`` or ``None``."""
    if model.is_linear:
        return "linear" if statement.target is None or model.n_classes == 2 else None
    if getattr(model, "is_tree_ensemble", False):
        return "trees"
    if isinstance(model, TorchClassifier) and threat.p in (1.0, math.inf):
        if statement.target is not None or get_solver("exact-relu").read(model) is None:
            return None
        return "relu"
    return None


def run_exact(state: BatchState, kind: str, active: torch.Tensor) -> torch.Tensor:
    """The exact solver of ``kind`` (linear, trees) on the open inputs ``active`` ``(n,)``
    (the tree solver within ``config.exact_time_limit`` seconds per input, censoring beyond
    ``max_radius``); returns the inputs whose bracket stays open (for the attacks)."""
    sub = torch.nonzero(active).reshape(-1)
    options = {} if kind == "linear" else {"time_limit": state.config.exact_time_limit,
                                           "max_radius": state.max_radius}
    out = registered(EXACT_SOLVERS[kind])(state.problem(sub), **options)
    still = active.clone()
    still[sub] = state.apply_exact(sub, out)
    return still


def certify_relu(state: BatchState, active: torch.Tensor) -> None:
    """ReLU networks: a MILP over the ball of the attack's radius certifies a lower bound
    (and may find a smaller counterexample) for the inputs of ``active`` with one."""
    sub = torch.nonzero(active & torch.isfinite(state.best_r)).reshape(-1)
    if len(sub) == 0:
        return
    out = registered("exact-relu")(state.problem(sub, state.best_r[sub].clone()),
                                   time_limit=state.config.exact_time_limit)
    state.apply_exact(sub, out)
