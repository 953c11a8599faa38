"""The one problem every registered solver is handed: ``solve(problem, **options)``.

A :class:`SolverProblem` carries what is searched (model, inputs, labels, feature space,
threat, statement), the per-input strengths, what the inputs may still spend (a
:class:`Budget`: the ledger and the owners of the rows), the generator, the clean logits and
the one verification callback. A solver proposes candidates and bounds; the search decides
(:class:`robustscope.search.verify.Verifier` behind ``verify``).

The problem's ``model`` is the view the solver calls: a
:class:`~robustscope.models.metered.MeteredModel` charged to the budget's inputs, built by the
search with its thread policy (a problem made with a bare adapter and a budget binds it to the
budget itself, without a thread policy). Solvers call it, narrow it to the inputs they keep
working on, and never bind a ledger of their own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from robustscope.core.space import FeatureSpace
from robustscope.core.statement import DECISION_CHANGE, Statement
from robustscope.models.base import Classifier, QueryLedger
from robustscope.models.metered import MeteredModel

#: ``verify(rows, candidates, params=None) -> (classes, logits, size)``: ``rows`` ``(m,)``
#: positions ``0..n-1`` in the problem, ``candidates`` ``(m, *shape)`` original units,
#: ``params`` ``(m, ...)`` an image threat's parameters; returns the model's class where the
#: statement holds at the (projected) candidate, else -1, ``(m,)``; the logits there ``(m, K)``
#: (NaN rows where not queried); the candidate's size ``(m,)`` (``inf`` where not queried).
Verify = Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class Budget:
    """What the problem's rows may spend: row ``i`` is input ``owners[i]`` of ``ledger``."""

    ledger: QueryLedger
    owners: np.ndarray

    def remaining(self, rows: np.ndarray | None = None) -> np.ndarray:
        """``(m,)`` passes left to the rows (all rows by default; ``inf`` without a budget)."""
        owners = self.owners if rows is None else self.owners[np.asarray(rows)]
        return self.ledger.remaining(owners)


@dataclass(frozen=True)
class SolverProblem:
    """One batch of ``n`` inputs for a solver.

    model : the model to call: a :class:`~robustscope.models.metered.MeteredModel` charged
        to ``budget`` (a bare :class:`~robustscope.models.base.Classifier` given with a
        budget is bound to it here).
    x : ``(n, *shape)`` inputs in original units; y : ``(n,)`` class indices (int64).
    space, threat, statement : the feature space, the threat (Lp or image) and what counts
        as a counterexample.
    eps : ``(n,)`` float64 per-input strengths: the ball searched by fixed-strength solvers, a
        verified upper bound of the radius for the exact solvers that search below one (the
        network MILP, bound propagation); ``None`` where the solver needs none.
    budget : the ledger and the owners of the rows (``None``: calls are charged to nobody);
        attacks charge their calls to it.
    generator : the only source of randomness.
    clean_logits : ``(n, K)`` float64 logits of the model at ``x`` (already charged), or
        ``None``.
    verify : the one verification (:data:`Verify`), batch form; exact solvers that verify
        inside their own loop call it with one row. ``None``: the solver's candidates are
        verified by the caller only.
    """

    model: Classifier
    x: torch.Tensor
    y: torch.Tensor
    space: FeatureSpace
    threat: object
    statement: Statement = DECISION_CHANGE
    eps: torch.Tensor | None = None
    budget: Budget | None = None
    generator: torch.Generator | None = None
    clean_logits: torch.Tensor | None = None
    verify: Verify | None = None

    def __post_init__(self) -> None:
        if self.budget is not None and not isinstance(self.model, MeteredModel):
            object.__setattr__(self, "model", MeteredModel(self.model, self.budget.ledger,
                                                           self.budget.owners))

    def __len__(self) -> int:
        return len(self.x)

    def fit_threads(self, elements: int) -> None:
        """Apply the search's thread policy to a solver's own batch of ``elements``
        (rows × features; nothing when the model is not a view with a thread policy)."""
        fit = getattr(self.model, "fit_threads", None)
        if fit is not None:
            fit(elements)

    def verify_one(self, row: int, candidate) -> tuple[int, float]:
        """Verify one candidate (original units, any shape of ``d`` entries) of row ``row``:
        ``(class, size)``, the class -1 and the size ``inf`` where it is no counterexample
        (or its budget is spent)."""
        rows = torch.tensor([row], device=self.x.device)
        cand = torch.as_tensor(candidate).to(device=self.x.device, dtype=self.x.dtype)
        classes, _, size = self.verify(rows, cand.reshape(1, *self.x.shape[1:]))
        cls = int(classes[0])
        return cls, (float(size[0]) if cls >= 0 else float("inf"))
