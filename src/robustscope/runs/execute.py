"""Searching one shard: the radius of each of its rows under its threat, with its seed.

A shard whose model raises (:class:`~robustscope.core.errors.ModelError`) is bisected until the
failing rows are isolated: those rows get status ``failed`` (their messages in the result's
``errors``), the others keep their radii (searched within the smaller pieces, so with a
smaller pool of other inputs).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
import torch

from robustscope.core.checks import check_labels
from robustscope.core.errors import InputError, ModelError
from robustscope.core.result import RadiusResult
from robustscope.models.wrap import wrap_model
from robustscope.runs.inputs import LoadedInputs
from robustscope.runs.shards import Shard, ShardOutput, ThreatJob
from robustscope.search.engine import radius
from robustscope.search.grid import grid_robustness

#: Seconds between two progress reports of a shard (the bar needs no more; a pool's queue
#: and Ray's queue actor carry fewer messages).
REPORT_EVERY = 0.25


class ShardReporter:
    """A :class:`~robustscope.search.progress.SearchProgress` for one shard of ``size``
    inputs: passes ``report(done, working)`` on, at most every :data:`REPORT_EVERY` seconds
    (the first report at once). ``done``: inputs finished so far; ``working``: ``done`` plus
    the open inputs of the batch in search times the share of their planned passes spent
    (a float, for the bar and its ETA). Neither exceeds ``size``, also when rows are
    searched again after a model error."""

    def __init__(self, report: Callable[[int, float], None], size: int) -> None:
        self.report = report
        self.size = size
        self.done = 0
        self._last = -math.inf

    def finished(self, k: int) -> None:
        self.done = min(self.size, self.done + int(k))
        self._send(float(self.done))

    def searching(self, n_open: int, fraction: float) -> None:
        self._send(self.done + n_open * fraction)

    def _send(self, working: float) -> None:
        now = time.monotonic()
        if now - self._last >= REPORT_EVERY:
            self._last = now
            self.report(self.done, min(float(self.size), working))


def run_shard(inputs: LoadedInputs, job: ThreatJob, shard: Shard,
              report: Callable[[int, float], None] | None = None) -> ShardOutput:
    """Search the radius of rows ``shard.start:shard.stop`` of ``inputs`` under ``job``.
    A :class:`ModelError` bisects the rows until the failing ones are isolated; any other
    error propagates (the whole shard fails). ``report(done, working)``, when given, hears
    how far the shard is as it goes (throttled, see :class:`ShardReporter`; image-grid
    threats report nothing before the shard ends)."""
    t0 = time.perf_counter()
    rows = np.arange(shard.start, shard.stop)
    progress = None if report is None else ShardReporter(report, len(shard))
    pieces = _search_rows(lambda r: _search(inputs, job, shard.seed, r, progress), rows)
    parts = [res for _, res in pieces if isinstance(res, RadiusResult)]
    errors = {int(r[0]): str(res) for r, res in pieces if isinstance(res, ModelError)}
    if errors:
        template = parts[0] if parts else None
        failed = np.array(sorted(errors), dtype=np.int64)
        parts.append(RadiusResult.failures(
            failed, np.asarray(inputs.X[failed], dtype=np.float64), errors,
            threat=job.threat, solver=job.solver,
            max_radius=(template.max_radius if template is not None
                        else float(job.max_radius or math.nan)),
            n_classes=0 if template is None else template.proba.shape[1],
            classes=None if template is None else template.classes,
            meta=None if template is None else template.meta))
    return ShardOutput(shard, RadiusResult.concatenate(parts), time.perf_counter() - t0)


def _search_rows(fn: Callable[[np.ndarray], RadiusResult], rows: np.ndarray
                 ) -> list[tuple[np.ndarray, RadiusResult | ModelError]]:
    """``fn(rows)``, or, when it raises a :class:`ModelError`, ``fn`` on each half, down to
    single rows (which keep their error)."""
    try:
        return [(rows, fn(rows))]
    except ModelError as exc:
        if len(rows) == 1:
            return [(rows, exc)]
        mid = len(rows) // 2
        return _search_rows(fn, rows[:mid]) + _search_rows(fn, rows[mid:])


def _search(inputs: LoadedInputs, job: ThreatJob, seed: int, rows: np.ndarray,
            progress: ShardReporter | None = None) -> RadiusResult:
    """One radius search over ``rows`` (consecutive global indices) with ``seed``, telling
    ``progress`` how far it is."""
    # a copy: the data may be a read-only memory map, which torch will not wrap
    X = np.array(inputs.X[rows[0]:rows[-1] + 1])
    y = np.array(inputs.y[rows[0]:rows[-1] + 1])
    if job.is_grid:
        res = grid_threat_result(inputs.model, X, y, job.threat, job.grid, seed,
                                 job.batch_size, job.device, f"threat {job.threat}")
    else:
        res = radius(inputs.model, X, y, space=inputs.space, progress=progress,
                     **job.radius_kwargs(seed))
    res.sample = rows.copy()
    return res


def grid_threat_result(model: object, X: np.ndarray, y: np.ndarray, threat: str,
                       grid: list[float] | None, seed: int, batch_size: int, device: str,
                       where: str) -> RadiusResult:
    """An image threat searched on its strength grid (:func:`robustscope.search.grid.
    grid_robustness`, bisection over the levels) for images ``X`` ``(n, C, H, W)`` in [0, 1]
    with labels ``y`` ``(n,)``, as a :class:`RadiusResult` (:meth:`GridResult.to_result`:
    the radius is the smallest grid level broken; queries are charged per input)."""
    if X.ndim != 4:
        raise InputError(f"{where}: image threat '{threat}' needs images (N, C, H, W); the "
                         f"data has shape {X.shape}")
    clf = wrap_model(model, input_shape=X.shape[1:], device=device, example=X[:2])
    labels = check_labels(y, len(X), clf.n_classes, getattr(clf, "classes", None))
    gr = grid_robustness(clf, torch.as_tensor(X, dtype=torch.float32), labels, threat, grid,
                         seed=seed, batch_size=batch_size, device=device)
    return gr.to_result(classes=getattr(clf, "classes", None),
                        meta={"seed": seed, "budget": None, "rtol": None, "model": clf.name})
