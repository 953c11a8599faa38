"""One batch of the radius search, from its clean logits to its statuses.

:class:`SearchSettings` holds what one :func:`robustscope.radius` call resolved (model,
space, threat, statement, strategy, exact kind, ``max_radius``, ``rtol``, plan settings,
ledger, generator, certifier), passed down as one object; :func:`search_batch` runs the
stages on a batch (clean pass, exact stage, attack cascade, the network MILP, certification,
the check of each counterexample alone) and writes the batch's rows of :class:`Outputs`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from robustscope.core.numerics import cross_entropy
from robustscope.core.result import ATTACKED, CENSORED, EXACT, INVALID, MISCLASSIFIED, SATISFIED
from robustscope.core.space import FeatureSpace
from robustscope.core.statement import Statement
from robustscope.models.base import Classifier, QueryLedger
from robustscope.search.cascade import BLACKBOX_BUDGET, run_attacks
from robustscope.search.certification import Certifier, certify_bounds
from robustscope.search.convergence import converge
from robustscope.search.exact import certify_relu, run_exact
from robustscope.search.metering import charged
from robustscope.search.plan import ALONE_PASSES, AttackPlan, SearchConfig, StageLedger
from robustscope.search.progress import BatchWatch, SearchProgress
from robustscope.search.state import BatchState
from robustscope.threats import LpThreat


@dataclass(frozen=True)
class SearchSettings:
    """The resolved settings of one search: what is searched (``model``, ``space``,
    ``threat``, ``statement``), how (``solver``: the strategy; ``kind``: the exact solver
    that serves the model, see :func:`~robustscope.search.exact.exact_kind`;
    ``max_radius``; ``rtol``; ``config``), and what every batch shares (``ledger`` of all
    inputs, ``generator``, ``stages``, ``certifier`` or ``None``, and ``progress``: told of
    inputs as they finish within a batch and of the open inputs' passes, or ``None``)."""

    model: Classifier
    space: FeatureSpace
    threat: LpThreat
    statement: Statement
    solver: str
    kind: str | None
    max_radius: float
    rtol: float
    config: SearchConfig
    ledger: QueryLedger
    generator: torch.Generator
    stages: StageLedger
    certifier: Certifier | None = None
    progress: SearchProgress | None = None

    def finished(self, k: int) -> None:
        """Report ``k`` more inputs of the batch finished (nothing when ``k`` is 0)."""
        if self.progress is not None and k > 0:
            self.progress.finished(int(k))

    def planned_passes(self) -> int:
        """Model passes one input is expected to take: the budget, else the default plan's
        (gradients) or the black-box cascade's queries."""
        if self.ledger.budget is not None:
            return int(self.ledger.budget)
        if self.model.differentiable:
            return int(self.config.default_gradients
                       * self.model.gradient_cost(self.space.n_features))
        return BLACKBOX_BUDGET

    @contextlib.contextmanager
    def watching(self, owners: np.ndarray) -> Iterator[BatchWatch | None]:
        """While the block runs, report how far inputs ``owners`` are (every model call
        checks the clock; ``None`` when nobody listens)."""
        if self.progress is None:
            yield None
            return
        watch = BatchWatch(self.progress, self.ledger, owners, self.planned_passes())
        self.ledger.watch = watch
        try:
            yield watch
        finally:
            self.ledger.watch = None


def rounds_ran(settings: SearchSettings, state: BatchState) -> bool:
    """Whether the convergence rounds searched the batch (a differentiable model under
    ``solver="auto"`` or ``"exact"``, with a ceiling)."""
    return (settings.config.converge_ceiling is not None and state.plan is not None
            and settings.model.differentiable and settings.solver in ("auto", "exact"))


class Outputs:
    """The per-input arrays of a search's result, filled batch by batch."""

    def __init__(self, n: int, shape: tuple[int, ...], k: int) -> None:
        self.radius = np.full(n, np.inf)
        self.lower = np.zeros(n)
        self.status = np.empty(n, dtype=object)
        self.x_adv = np.zeros((n, *shape))
        self.prediction = np.zeros(n, dtype=np.int64)
        self.adv_prediction = np.zeros(n, dtype=np.int64)
        self.proba = np.zeros((n, k))
        self.proba_adv = np.zeros((n, k))
        self.loss = np.zeros(n)
        self.seconds = np.zeros(n)
        #: per input (``RadiusResult.converged``): 1 the radius converged (exact, a closed
        #: certified bracket, no search needed, or the evidence of the convergence rounds or
        #: of the black-box step-down search), -1 the rounds or the step-down search ran and
        #: stopped at the ceiling or the budget first, 0 not assessed (censored, or a solver
        #: other than auto / exact)
        self.converged = np.zeros(n, dtype=np.int64)
        self.plan: AttackPlan | None = None

    def mark_invalid(self, rows: np.ndarray, X: np.ndarray) -> None:
        """Rows whose clean input breaks a relation: no search, no radius."""
        self.radius[rows] = np.nan
        self.lower[rows] = np.nan
        self.status[rows] = INVALID
        self.x_adv[rows] = X[rows]
        self.prediction[rows] = -1
        self.adv_prediction[rows] = -1
        self.proba[rows] = np.nan
        self.proba_adv[rows] = np.nan
        self.loss[rows] = np.nan


def search_batch(settings: SearchSettings, X: np.ndarray, labels: np.ndarray, idx: np.ndarray,
                 out: Outputs) -> None:
    """Search the inputs ``X`` ``(m, *shape)`` (labels: class indices ``(m,)``; ``idx``
    ``(m,)``: their positions in the ledger and in ``out``)."""
    s = settings
    model, ledger, statement, solver, kind = s.model, s.ledger, s.statement, s.solver, s.kind
    x = torch.as_tensor(X, dtype=torch.float64, device=model.device)
    y = torch.as_tensor(labels, device=model.device)
    with s.stages.stage("clean", ledger):
        logits = charged(model, ledger, idx).logits(x).detach().to(torch.float64)
    proba = torch.softmax(logits, dim=1)
    pred = logits.argmax(dim=1)
    out.prediction[idx] = pred.cpu().numpy()
    out.proba[idx] = proba.cpu().numpy()
    # accurate also for confident inputs, where -log(p_y) rounds to 0 (the scores need g(loss))
    out.loss[idx] = cross_entropy(logits.cpu().numpy(), labels)
    misclassified = pred != y
    # a targeted statement whose target is the label holds already: radius 0, not an error
    satisfied = statement.holds(pred, y) & ~misclassified
    wrong = misclassified | satisfied
    state = BatchState(model, s.space, s.threat, statement, ledger, x, y, idx, logits, wrong,
                       max_radius=s.max_radius, rtol=s.rtol, generator=s.generator,
                       config=s.config, stages=s.stages)
    active = ~wrong
    s.finished(int(wrong.sum()))  # misclassified inputs are done after the clean pass
    if active.any():
        # under a budget the search leaves each input the passes of its calls alone
        with state.keeping_aside(ALONE_PASSES), \
                s.watching(idx[active.cpu().numpy()]) as watch:
            # linear models and trees: exact by default; networks: a MILP only when asked for
            if kind in ("linear", "trees") and solver in ("exact", "auto"):
                with state.stage("exact"):
                    open_before = int(active.sum())
                    active = run_exact(state, kind, active)
                s.finished(open_before - int(active.sum()))
                if watch is not None:
                    watch.follow(idx[active.cpu().numpy()])
            if active.any():
                run_attacks(state, "auto" if solver == "exact" else solver, active)
            if kind == "relu" and solver == "exact":
                with state.stage("exact"):
                    certify_relu(state, active)
            if s.certifier is not None:
                certify_bounds(state, active, s.certifier)
            # after the certificates: a bracket they closed takes no round
            if rounds_ran(s, state):
                with state.stage("convergence rounds"):
                    converge(state, torch.nonzero(active).reshape(-1), state.plan,
                             model.gradient_cost(s.space.n_features))
        # float32 rounding differs between batch sizes: each counterexample verified in a
        # batch is called again alone, pushed outward or withdrawn where that call disagrees
        with state.stage("check alone"):
            state.confirm_alone(torch.nonzero(~wrong).reshape(-1), ALONE_PASSES)
    out.plan = state.plan or out.plan
    s.finished(int(active.sum()))

    r = state.forget_beyond(s.max_radius)  # beyond the largest strength tried: censored
    found = np.isfinite(r)
    out.radius[idx] = r
    out.lower[idx] = np.where(wrong.cpu().numpy(), 0.0, state.lower.cpu().numpy())
    status = np.where(found, ATTACKED, CENSORED).astype(object)
    status[state.exact.cpu().numpy() & found] = EXACT
    status[misclassified.cpu().numpy()] = MISCLASSIFIED
    status[satisfied.cpu().numpy()] = SATISFIED
    out.status[idx] = status
    settled = (state.converged | state.exact | wrong).cpu().numpy()
    settled |= ~state.still_open(torch.arange(len(idx), device=state.x.device),
                                 probes=False).cpu().numpy()
    falling = rounds_ran(s, state) | state.still_falling.cpu().numpy()
    out.converged[idx] = np.where(found & settled, 1, np.where(found & falling, -1, 0))
    out.x_adv[idx] = state.best_x.cpu().numpy().reshape(len(idx), *X.shape[1:])
    out.proba_adv[idx] = torch.softmax(state.best_logits, dim=1).cpu().numpy()
    out.adv_prediction[idx] = state.best_logits.argmax(dim=1).cpu().numpy()
