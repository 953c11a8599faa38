"""Progress bars with ETA for long work: one bar for the threats of a run, one per stage
that advances as inputs finish: inputs of committed shards, plus those the shards in flight
report as searched (:meth:`RunProgress.searching`, fed by ``radius(..., progress=callback)``
in the workers), so the bar and its ETA move from the first batch on.

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
    Progress,
    ProgressColumn,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

log = logging.getLogger("robustscope.runs.progress")


class RunProgress:
    """Bars of one run. Use ``with progress.stage(name, total) as advance: ...``; ``advance(k)``
    counts ``k`` more inputs committed (their shard written) and updates the bar and its ETA;
    :meth:`searching` adds the inputs that shards still in flight have finished."""

    def __init__(self, n_stages: int, progress: Progress | None,
                 reports: bool | None = None) -> None:
        self._progress = progress
        #: Whether the run should collect progress from shards in flight (default: when
        #: there is a bar to move; silent runs spare the workers the reports).
        self.reports = progress is not None if reports is None else bool(reports)
        self._overall = (progress.add_task("threats", total=n_stages)
                         if progress is not None and n_stages > 1 else None)
        self._task = None
        self._committed = 0
        self._in_flight: dict[str, tuple[int, float]] = {}

    def searching(self, key: str, done: int | None, working: float | None = None) -> None:
        """Shard ``key`` has finished ``done`` of its inputs so far and come ``working``
        inputs' worth of the way (``done`` plus the open inputs' share of their planned
        passes; default ``done``); ``done=None``: the shard is committed or lost, forget it.
        Moves the current stage's bar (by ``working``) and its count (by ``done``)."""
        if done is None:
            self._in_flight.pop(key, None)
        else:
            old = self._in_flight.get(key, (0, 0.0))
            self._in_flight[key] = (max(int(done), old[0]),
                                    max(float(done if working is None else working), old[1]))
        self._show()

    def finished(self) -> int:
        """Inputs of the current stage finished: committed, plus those done in flight."""
        return self._committed + sum(d for d, _ in self._in_flight.values())

    def _show(self) -> None:
        if self._task is not None:
            self._progress.update(
                self._task, finished=self.finished(),
                completed=self._committed + sum(w for _, w in self._in_flight.values()))

    @contextlib.contextmanager
    def stage(self, name: str, total: int) -> Iterator[Callable[[int], None]]:
        t0 = time.perf_counter()
        self._committed = 0
        self._in_flight = {}
        log.info("%s: %d inputs", name, total)
        task = (self._progress.add_task(name, total=total, finished=0)
                if self._progress is not None else None)
        self._task = task

        def advance(k: int) -> None:
            self._committed += k
            log.debug("%s: %d/%d inputs", name, self._committed, total)
            self._show()

        try:
            yield advance
        finally:
            self._task = None
            if task is not None:
                self._progress.remove_task(task)
            if self._overall is not None:
                self._progress.advance(self._overall, 1)
            log.info("%s: done in %.1f s", name, time.perf_counter() - t0)


class FinishedColumn(ProgressColumn):
    """``finished/total``: the task's ``finished`` field (inputs whose search is over), or
    its completed count when it has none."""

    def render(self, task) -> Text:
        done = task.fields.get("finished", int(task.completed))
        total = "?" if task.total is None else f"{task.total:.0f}"
        return Text(f"{done}/{total}", style="progress.download")


@contextlib.contextmanager
def run_progress(n_stages: int, quiet: bool = False, console: Console | None = None
                 ) -> Iterator[RunProgress]:
    """A :class:`RunProgress` with rich bars on stderr, or silent ones when ``quiet`` or when
    stderr is not a terminal."""
    console = console or Console(stderr=True)
    if quiet or not (console.is_terminal or sys.stderr.isatty()):
        yield RunProgress(n_stages, None)
        return
    # the count is of finished inputs; the bar (and the ETA) also moves with the work done
    # on open ones, so it advances before the first input finishes
    columns = (SpinnerColumn(), TextColumn("{task.description:<12}"), BarColumn(),
               FinishedColumn(),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        yield RunProgress(n_stages, progress)
