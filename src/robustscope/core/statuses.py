"""Per-input statuses of a radius search: what a row's ``radius`` and ``lower_bound`` mean."""

from __future__ import annotations

#: The input's radius is certified exact (lower bound = radius).
EXACT = "exact"
#: A verified counterexample gives an upper bound; the lower bound may be loose.
ATTACKED = "attacked"
#: No counterexample up to the largest strength tried; ``radius`` is ``inf``.
CENSORED = "censored"
#: The clean input is already misclassified: radius 0, the input itself is the counterexample.
MISCLASSIFIED = "misclassified"
#: The clean input is classified correctly and already satisfies the statement (a targeted
#: statement whose target is the input's label): radius 0, the input itself is the
#: counterexample; it counts as correctly classified.
SATISFIED = "satisfied"
#: The clean input breaks a relation of the feature space (``radius(..., invalid='status')``):
#: no search, no radius (``radius`` and ``lower_bound`` are NaN).
INVALID = "invalid"
#: The model raised on this input (sharded runs isolate such rows); no radius.
FAILED = "failed"
#: Statuses a search assigns (``failed`` is assigned by runs, which isolate model errors).
STATUSES = (EXACT, ATTACKED, CENSORED, MISCLASSIFIED, SATISFIED, INVALID)
#: Statuses of radius 0 without a search: the clean input is already a counterexample.
AT_ZERO = (MISCLASSIFIED, SATISFIED)
