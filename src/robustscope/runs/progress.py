"""Progress bars with ETA for long work: one bar for the threats of a run, one per threat
that advances per batch of inputs (``radius(..., progress=callback)``).

:func:`run_progress` returns a :class:`RunProgress`; ``quiet`` (or stderr not being a
terminal) gives one whose bars are silent. Messages go through :mod:`logging` either way.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

log = logging.getLogger("robustscope.runs.progress")


class RunProgress:
    """Bars of one run. Use ``with progress.stage(name, total) as advance: ...``; ``advance(k)``
    moves the stage's bar by ``k`` inputs and updates its ETA."""

    def __init__(self, n_stages: int, progress: Progress | None) -> None:
        self._progress = progress
        self._overall = (progress.add_task("threats", total=n_stages)
                         if progress is not None and n_stages > 1 else None)

    @contextlib.contextmanager
    def stage(self, name: str, total: int) -> Iterator[Callable[[int], None]]:
        t0 = time.perf_counter()
        done = [0]
        log.info("%s: %d inputs", name, total)
        task = (self._progress.add_task(name, total=total)
                if self._progress is not None else None)

        def advance(k: int) -> None:
            done[0] += k
            log.debug("%s: %d/%d inputs", name, done[0], total)
            if task is not None:
                self._progress.advance(task, k)

        try:
            yield advance
        finally:
            if task is not None:
                self._progress.remove_task(task)
            if self._overall is not None:
                self._progress.advance(self._overall, 1)
            log.info("%s: done in %.1f s", name, time.perf_counter() - t0)


@contextlib.contextmanager
def run_progress(n_stages: int, quiet: bool = False, console: Console | None = None
                 ) -> Iterator[RunProgress]:
    """A :class:`RunProgress` with rich bars on stderr, or silent ones when ``quiet`` or when
    stderr is not a terminal."""
    console = console or Console(stderr=True)
    if quiet or not (console.is_terminal or sys.stderr.isatty()):
        yield RunProgress(n_stages, None)
        return
    columns = (TextColumn("{task.description:<12}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        yield RunProgress(n_stages, progress)
