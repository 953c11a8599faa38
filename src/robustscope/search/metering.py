"""The ledger's binding to a call: which inputs the search charges a model call to.

Model adapters are stateless; a call is charged through a metered view
(:class:`~robustscope.models.metered.MeteredModel`). The search decides the binding: every
view it hands out (to its verification, its own clean and ranking calls, and as
``SolverProblem.model`` to each solver) is made here, charged to the search's ledger for the
inputs the rows belong to, with the search's thread policy
(:func:`~robustscope.search.threads.fit_threads`) as its thread hook. Solvers only use (and
narrow) the views they are handed.
"""

from __future__ import annotations

import numpy as np

from robustscope.models.base import Classifier, QueryLedger
from robustscope.models.metered import MeteredModel
from robustscope.search.threads import fit_threads


def charged(model: Classifier, ledger: QueryLedger | None,
            owners: np.ndarray | None = None) -> MeteredModel:
    """``model`` (an adapter, or a view: its adapter) charged to inputs ``owners`` of
    ``ledger`` (default: all of them, in order; ``ledger=None``: nobody), under the search's
    thread policy."""
    return MeteredModel(model, ledger, owners, threads=fit_threads)


def charge_probe(model: Classifier, ledger: QueryLedger) -> None:
    """Charge the rows wrapping ``model`` called it on (one forward pass each) to the first
    inputs of ``ledger``: for a model the search wrapped itself."""
    rows = min(model.probed_rows, len(ledger.forward))
    ledger.forward[:rows] += 1
