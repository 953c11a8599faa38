"""Gradient-free cascade: random search first, then the decision-based boundary search.

Both stages share one :class:`~robustscope.solvers.attacks.decision.scaled_oracle.ScaledOracle`,
hence one per-input
budget and one record of the best verified counterexample: the cube random search
(:mod:`~robustscope.solvers.attacks.decision.cube_search`) shrinks a counterexample cheaply and
stops when its
radius bracket closes; HopSkipJump (:mod:`~robustscope.solvers.attacks.decision.hop_skip_jump`)
then spends what is
left of the budget from that counterexample, escaping the random search's local optima.
"""

from __future__ import annotations

import torch

from robustscope.core.checks import make_generator
from robustscope.core.space import FeatureSpace
from robustscope.core.statement import DECISION_CHANGE, Statement
from robustscope.models.base import Classifier, QueryLedger
from robustscope.solvers.attacks.decision.cube_search import cube_search
from robustscope.solvers.attacks.decision.hop_skip_jump import hop_skip_jump
from robustscope.solvers.attacks.decision.scaled_oracle import ScaledOracle
from robustscope.solvers.output import SolverOutput
from robustscope.solvers.problem import SolverProblem
from robustscope.threats import LpThreat, get_threat


def gradient_free(
    model: Classifier,
    x: torch.Tensor,
    y: torch.Tensor,
    space: FeatureSpace,
    threat: LpThreat | str = "linf",
    eps: torch.Tensor | float | None = None,
    statement: Statement = DECISION_CHANGE,
    generator: torch.Generator | None = None,
    *,
    budget: int = 5000,
    x_init: torch.Tensor | None = None,
    X_pool: torch.Tensor | None = None,
    y_pool: torch.Tensor | None = None,
    ledger: QueryLedger | None = None,
    cube_opts: dict | None = None,
    boundary_opts: dict | None = None,
) -> SolverOutput:
    """Cube random search, then HopSkipJump with the rest of the per-input ``budget``.

    ``x`` ``(n, *shape)`` original units, ``y`` ``(n,)`` labels. Returns a
    :class:`~robustscope.solvers.output.SolverOutput` (its candidates were each confirmed by a
    query; the search verifies them again).
    """
    threat = get_threat(threat)
    generator = generator or make_generator(0, x.device)
    oracle = ScaledOracle(model, x, y, space, threat, statement, budget, ledger)
    common = dict(x_init=x_init, X_pool=X_pool, y_pool=y_pool, oracle=oracle)
    cube_search(model, x, y, space, threat, eps, statement, generator, **common,
                **(cube_opts or {}))
    hop_skip_jump(model, x, y, space, threat, eps, statement, generator, **common,
                  **(boundary_opts or {}))
    return oracle.output()


def solve(problem: SolverProblem, **options) -> SolverOutput:
    """:func:`gradient_free` on ``problem`` (the registry's calling convention), its model calls
    charged to ``problem.budget`` through ``problem.model``, the view the search built."""
    return gradient_free(problem.model, problem.x, problem.y, problem.space,
                         problem.threat, problem.eps, problem.statement,
                         problem.generator, **options)
