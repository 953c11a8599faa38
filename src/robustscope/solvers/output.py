"""The one output type of every solver, and the calling convention they share.

Every registered solver, attacks and exact solvers alike, is one function over a batch::

    solve(problem: SolverProblem, **options) -> SolverOutput

:class:`~robustscope.solvers.problem.SolverProblem` carries the model, ``x`` ``(n, *shape)``
inputs in original units, ``y`` ``(n,)`` class indices, the space, threat and statement,
``eps`` ``(n,)`` per-input strengths (the ball searched by fixed-strength solvers; a verified
upper bound of the radius for the exact solvers that search below one; ``None`` where not
needed), the budget (ledger and owners of the rows; attacks charge their calls to it), the
generator (the only source of randomness), the clean logits and the one verification
callback ``verify(rows, candidates, params=None) -> (classes, logits, size)``. The registry
entry's function is that ``solve`` (``get_solver(name).solve``); the search calls solvers
only through it.

A solver proposes; it never decides: the search verifies every candidate with the model
(:class:`robustscope.search.verify.Verifier`, behind ``problem.verify``). The exact solvers
verify their own candidates through ``problem.verify`` (the tree solver one row at a time,
inside its loop) and return a certified ``lower_bound``; status ``exact`` says their
certificate closes the bracket, and the search's one exact stage
(:meth:`robustscope.search.state.BatchState.apply_exact`) calls an input exact only where the
verified radius meets that bound within ``solvers.tolerances.BRACKET_RTOL``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from robustscope.core.space import FeatureSpace
from robustscope.core.statuses import ATTACKED, CENSORED, EXACT
from robustscope.threats.lp import LpThreat


@dataclass
class SolverOutput:
    """What a solver found, per input of its batch (arrays of length ``n``).

    x_adv : ``(n, *shape)`` candidate counterexamples in original units (the input itself
        where the solver has none).
    radius : ``(n,)`` the scaled norm of ``x_adv - x`` as the solver measured it; ``inf``
        where it has no candidate. The search measures again after verifying.
    lower_bound : ``(n,)`` certified lower bound of the radius (exact solvers), else 0.
    status : ``(n,)`` the solver's claim: ``exact`` (its certificate closes the bracket: at
        its candidate, or, for a solver that certifies the whole ball of a verified radius
        ``eps`` — the network MILP, bound propagation —, wherever a verified radius meets
        ``lower_bound``), ``attacked`` (a candidate, bracket open), ``censored`` (none), or
        ``misclassified`` (the clean input already satisfies the statement).
    adv_prediction : ``(n,)`` the class the solver saw at ``x_adv`` (-1 where unknown).
    forward_queries : ``(n,)`` model calls the solver made on its own account (charged to
        no caller's ledger); 0 where every call was charged to the caller.
    seconds : ``(n,)`` wall time per input (the batch's time shared out where the solver
        works on the batch as a whole).
    meta : solver-specific details (per-input arrays under documented keys).
    """

    x_adv: torch.Tensor
    radius: np.ndarray
    lower_bound: np.ndarray
    status: np.ndarray
    adv_prediction: np.ndarray
    forward_queries: np.ndarray
    seconds: np.ndarray
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.radius)

    @property
    def found(self) -> np.ndarray:
        """``(n,)`` bool: the solver proposes a candidate."""
        return np.isfinite(self.radius)

    @property
    def closed(self) -> np.ndarray:
        """``(n,)`` bool: the solver's certificate closes the bracket."""
        return self.status == EXACT

    @classmethod
    def of_candidates(cls, x: torch.Tensor, x_adv: torch.Tensor, found: np.ndarray | None,
                      space: FeatureSpace, threat: LpThreat, seconds: float = 0.0,
                      meta: dict | None = None) -> SolverOutput:
        """The output of an attack: candidates ``x_adv`` for inputs ``x`` (``found`` marks
        those the solver stands behind; ``None`` = all). Radii are measured here."""
        n = x.shape[0]
        found = np.ones(n, dtype=bool) if found is None else np.asarray(found, dtype=bool)
        with torch.no_grad():
            r = threat.norm(space.scaled_delta(x_adv.to(x.dtype), x)).detach().cpu().numpy()
        radius = np.where(found, r.astype(np.float64), np.inf)
        return cls(x_adv=x_adv, radius=radius, lower_bound=np.zeros(n),
                   status=np.where(found, ATTACKED, CENSORED).astype(object),
                   adv_prediction=np.full(n, -1, dtype=np.int64),
                   forward_queries=np.zeros(n, dtype=np.int64),
                   seconds=np.full(n, seconds / max(n, 1)), meta=dict(meta or {}))
