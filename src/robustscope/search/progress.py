"""What a search tells its caller while it runs: inputs finished, and how far the open ones
have come.

``radius(..., progress=...)`` takes a callable ``progress(k)`` (``k`` more inputs finished)
or a :class:`SearchProgress`, which also hears :meth:`SearchProgress.searching`: how many
inputs of the batch are still open and the share of their planned model passes spent so far
(an estimate of the batch's progress, for an ETA before any input has finished).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import numpy as np

from robustscope.models.base import QueryLedger

#: Seconds between two :meth:`SearchProgress.searching` reports of a batch.
WORKING_EVERY = 0.25


@runtime_checkable
class SearchProgress(Protocol):
    """Receives a search's progress."""

    def finished(self, k: int) -> None:
        """``k`` more inputs are finished (their radius or status is final)."""

    def searching(self, n_open: int, fraction: float) -> None:
        """``n_open`` inputs of the batch are still searched and have spent ``fraction``
        (0..1) of the model passes planned for them."""


class _Counting:
    """A plain ``progress(k)`` callable seen as a :class:`SearchProgress`."""

    def __init__(self, fn: Callable[[int], None]) -> None:
        self.fn = fn

    def finished(self, k: int) -> None:
        self.fn(k)

    def searching(self, n_open: int, fraction: float) -> None:
        pass


def as_search_progress(progress: Callable[[int], None] | SearchProgress | None
                       ) -> SearchProgress | None:
    """``progress`` as a :class:`SearchProgress` (``None`` stays ``None``)."""
    if progress is None or isinstance(progress, SearchProgress):
        return progress
    return _Counting(progress)


class BatchWatch:
    """Reports, at most every :data:`WORKING_EVERY` seconds, how far a batch's open inputs
    ``owners`` (ledger positions) are: the passes they spent since the watch began over
    ``planned`` passes per input. Installed as the ledger's ``watch`` (called after every
    charge) by :meth:`watching`."""

    def __init__(self, progress: SearchProgress, ledger: QueryLedger, owners: np.ndarray,
                 planned: int) -> None:
        self.progress = progress
        self.ledger = ledger
        self.owners = owners
        self.planned = max(1, int(planned))
        self.start = ledger.used(owners).copy()
        self._last = time.monotonic()

    def follow(self, owners: np.ndarray) -> None:
        """Watch ``owners`` from now on (the inputs still open)."""
        keep = np.isin(self.owners, owners)
        self.owners, self.start = self.owners[keep], self.start[keep]

    def __call__(self) -> None:
        now = time.monotonic()
        if now - self._last < WORKING_EVERY or not len(self.owners):
            return
        self._last = now
        spent = (self.ledger.used(self.owners) - self.start).mean()
        self.progress.searching(len(self.owners), min(0.99, float(spent) / self.planned))
