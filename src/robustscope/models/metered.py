"""A metered view of a model: one call's binding of a stateless adapter to a query ledger.

Model adapters (:class:`~robustscope.models.base.Classifier` subclasses) only compute. What a
call costs is charged by a :class:`MeteredModel`, a view made for the call: it has the
Classifier interface (delegating ``n_classes``, ``device``, ``dtype``, ``differentiable``,
``linear_parameters`` ... to the adapter), charges every batch of rows to the inputs it is
worked on for (``owners``) *before* the adapter is called, refusing a batch that would take
an input past its budget (:class:`~robustscope.core.errors.BudgetExhausted`, nothing
charged), runs finite differences through itself so that their rows are charged too, and
calls its thread hook (``threads(elements, adapter)``) before each call. A solver that
continues on some of its inputs asks for a new view (:meth:`MeteredModel.narrowed`,
:meth:`MeteredModel.charged_to`); no view and no adapter is ever changed by a call.

Why the class sits here, in ``models/``, and not in ``search/``: solvers (a layer below the
search) are handed views (``SolverProblem.model``) and derive views from them, and public
solvers that take a ledger from their caller (``ledger=`` of the decision-based attacks, the
tree solver's own verification) bind it with :func:`metered`; all of them must import the
class. It holds no policy: which ledger, which inputs own which rows, and which thread policy
applies are its constructor's arguments. The search decides them
(:func:`robustscope.search.metering.charged`: the search's ledger, the batch's owners, the
search's :func:`~robustscope.search.threads.fit_threads`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from robustscope.core.errors import BudgetExhausted
from robustscope.models.base import (
    Classifier,
    QueryLedger,
    autograd_gradient,
    central_differences,
)

#: ``threads(elements, model)``: the thread policy's hook, called before every model call of
#: ``elements`` (rows × features) with the adapter (``None`` for a solver's own batch).
ThreadHook = Callable[[int, Classifier | None], None]


class MeteredModel(Classifier):
    """``adapter`` seen through a charge: every call is charged to inputs ``owners`` of
    ``ledger`` (``None``: to nobody; the thread hook still applies).

    A call on ``B`` rows while ``m = len(owners)`` inputs are worked on charges ``B / m``
    passes to each of them (``B`` must be a multiple of ``m``): solvers that expand a batch
    (restarts, finite differences) keep rows grouped per input. Owners may repeat (an input
    working on several targets at once): each row is then charged to its owner, and the budget
    check counts every repeat. A view of a view binds the same adapter (the new charge
    replaces the old; the thread hook is kept unless one is given).

    ``forward_rows`` / ``backward_rows``: the rows this view has passed (all charges).
    """

    def __init__(self, adapter: Classifier, ledger: QueryLedger | None = None,
                 owners: np.ndarray | None = None, threads: ThreadHook | None = None) -> None:
        if isinstance(adapter, MeteredModel):
            threads = adapter.threads if threads is None else threads
            adapter = adapter.adapter
        self.adapter = adapter
        self.ledger = ledger
        if owners is None:
            owners = np.arange(0 if ledger is None else len(ledger.forward))
        self.owners = np.asarray(owners, dtype=np.int64)
        counts = np.bincount(self.owners) if len(self.owners) else self.owners
        #: how often each owner appears among the owners (``None``: each once, the usual case)
        self.repeats = (counts[self.owners] if len(self.owners) and counts.max() > 1
                        else None)
        self.threads = threads
        self.forward_rows = 0
        self.backward_rows = 0

    # -- the adapter's description ------------------------------------------------------
    def __getattr__(self, name: str):
        if name == "adapter":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.adapter, name)

    def __repr__(self) -> str:
        return f"MeteredModel({self.adapter!r}, owners={len(self.owners)})"

    n_classes = property(lambda self: self.adapter.n_classes)
    input_shape = property(lambda self: self.adapter.input_shape)
    device = property(lambda self: self.adapter.device)
    dtype = property(lambda self: self.adapter.dtype)
    name = property(lambda self: self.adapter.name)
    differentiable = property(lambda self: self.adapter.differentiable)
    is_linear = property(lambda self: self.adapter.is_linear)
    feature_names = property(lambda self: self.adapter.feature_names)
    native = property(lambda self: self.adapter.native)
    thread_count = property(lambda self: self.adapter.thread_count)
    probed_rows = property(lambda self: self.adapter.probed_rows)

    def linear_parameters(self) -> tuple[np.ndarray, np.ndarray]:
        return self.adapter.linear_parameters()

    def gradient_cost(self, n_features: int) -> int:
        return self.adapter.gradient_cost(n_features)

    def thread_setter(self):
        return self.adapter.thread_setter()

    # -- new views ----------------------------------------------------------------------
    def charged_to(self, owners: np.ndarray) -> MeteredModel:
        """A view of the same adapter, ledger and thread hook charged to ``owners``."""
        return MeteredModel(self.adapter, self.ledger, owners, self.threads)

    def narrowed(self, rows: np.ndarray | torch.Tensor) -> MeteredModel:
        """A view charged to the subset ``rows`` (positions ``0..m-1``) of this view's
        owners: for solvers that continue on some of their inputs only."""
        rows = rows.cpu().numpy() if torch.is_tensor(rows) else np.asarray(rows)
        return self.charged_to(self.owners[rows.astype(np.int64)])

    # -- accounting ---------------------------------------------------------------------
    def fit_threads(self, elements: int) -> None:
        """Apply the call's thread policy to a solver's own batch of ``elements``."""
        if self.threads is not None:
            self.threads(int(elements), None)

    def _charge(self, rows: int, backward: bool) -> None:
        """Charge ``rows`` passes before they are made: a call that would take an input past
        its budget is refused (:class:`BudgetExhausted`) and charges nothing."""
        ledger = self.ledger
        if ledger is not None and len(self.owners):
            m = len(self.owners)
            if rows % m:
                raise RuntimeError(f"batch of {rows} rows cannot be charged to {m} inputs")
            if ledger.budget is not None:
                share = rows // m if self.repeats is None else self.repeats * (rows // m)
                if (ledger.used(self.owners) + share).max() > ledger.budget:
                    raise BudgetExhausted(
                        f"query budget of {ledger.budget} passes per input exceeded")
            counts = ledger.backward if backward else ledger.forward
            np.add.at(counts, self.owners, rows // m)
            if ledger.watch is not None:
                ledger.watch()
        if backward:
            self.backward_rows += rows
        else:
            self.forward_rows += rows

    # -- calls --------------------------------------------------------------------------
    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """The adapter's logits, charged as one forward pass per row."""
        self._charge(x.shape[0], backward=False)
        if self.threads is not None:
            self.threads(math.prod(x.shape), self.adapter)
        return self.adapter.logits(x)

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits(x)

    def value_and_grad(self, x, objective, fd_step=None):
        """:meth:`Classifier.value_and_grad` with every pass charged: autograd charges one
        forward and one backward pass per row, finite differences their ``2·d + 1`` forward
        passes (run through this view)."""
        if self.differentiable:
            return autograd_gradient(self, x, objective,
                                     lambda rows: self._charge(rows, backward=True))
        return central_differences(self, x, objective, fd_step)


def metered(model: Classifier, ledger: QueryLedger | None,
            owners: np.ndarray | None = None) -> Classifier:
    """``model`` charged to ``owners`` of ``ledger`` when a ledger is given (a view; a view's
    thread hook is kept), else ``model`` as it is (a view keeps its own charge)."""
    if ledger is None:
        return model
    return MeteredModel(model, ledger, owners)


def narrowed(model: Classifier, rows: np.ndarray | torch.Tensor) -> Classifier:
    """A view of ``model`` charged to its rows ``rows`` (:meth:`MeteredModel.narrowed`);
    an unmetered model is returned as it is."""
    return model.narrowed(rows) if isinstance(model, MeteredModel) else model


def charge_of(model: Classifier) -> tuple[QueryLedger | None, np.ndarray | None]:
    """``(ledger, owners)`` a view charges (``(None, None)`` for an unmetered model or a
    view charged to nobody)."""
    if isinstance(model, MeteredModel) and model.ledger is not None and len(model.owners):
        return model.ledger, model.owners
    return None, None


def unmetered(model: Classifier) -> Classifier:
    """The adapter behind a view (``model`` itself when it is one)."""
    return model.adapter if isinstance(model, MeteredModel) else model
