"""The ledger's binding to a call: which inputs the search charges a model call to.

Model adapters are stateless; a call is charged through a metered view
(:class:`~robustscope.models.metered.MeteredModel`). The search decides the binding: every
view it hands out (to its verification, its own clean and ranking calls, and as
``SolverProblem.model`` to each solver) is made here, charged to the search's ledger for the
inputs the rows belong to, with the search's thread policy
(:func:`~robustscope.search.threads.fit_threads`) as its thread hook. Solvers only use (and
narrow) the views they are handed.

The rows wrapping called a model on to learn its number of classes (``probed_rows``, a fact
of the wrapping) are charged by the first search that opens a ledger on that adapter
(:func:`charge_probe`): the search remembers which adapters it billed (weakly, so adapters
are freed as usual), the adapter itself is never changed.
"""

from __future__ import annotations

import weakref

import numpy as np

from robustscope.models.base import Classifier, QueryLedger
from robustscope.models.metered import MeteredModel, unmetered
from robustscope.search.threads import fit_threads


def charged(model: Classifier, ledger: QueryLedger | None,
            owners: np.ndarray | None = None) -> MeteredModel:
    """``model`` (an adapter, or a view: its adapter) charged to inputs ``owners`` of
    ``ledger`` (default: all of them, in order; ``ledger=None``: nobody), under the search's
    thread policy."""
    return MeteredModel(model, ledger, owners, threads=fit_threads)


#: Adapters whose wrapping probe a search has charged already.
_PROBES_CHARGED: weakref.WeakSet[Classifier] = weakref.WeakSet()


def charge_probe(model: Classifier, ledger: QueryLedger) -> None:
    """Charge the rows wrapping ``model`` called it on (one forward pass each) to the first
    inputs of ``ledger``, once per adapter: the first search on it pays for its wrapping."""
    adapter = unmetered(model)
    if not adapter.probed_rows or adapter in _PROBES_CHARGED:
        return
    _PROBES_CHARGED.add(adapter)
    rows = min(adapter.probed_rows, len(ledger.forward))
    ledger.forward[:rows] += 1
