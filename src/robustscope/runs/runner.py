"""Run an evaluation spec: load the model, data and feature space, search the radius of every
input under every threat, compute the readings, write the run folder and the report, and
record the run in the results store.

A run folder holds::

    run.json              manifest: spec, provenance, per-threat summary, scores, files
    radii_<threat>.csv    one row per input (see RadiusResult.to_dataframe)
    adv_<threat>.npz      counterexamples (when outputs.adversarial)
    report.html           the report (name from outputs.report)

``robustscope compare`` reads run folders back with :func:`robustscope.runs.compare.load_run`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import signal
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from robustscope.core.checks import check_labels
from robustscope.core.errors import InputError
from robustscope.core.fileio import atomic_write
from robustscope.core.result import STORED_COLUMNS, RadiusResult, join_meta
from robustscope.report.html import render_report
from robustscope.runs import journal
from robustscope.runs.backends import run_shards
from robustscope.runs.binding import input_identity
from robustscope.runs.inputs import load_inputs
from robustscope.runs.locations import hide_password
from robustscope.runs.lock import run_folder_lock
from robustscope.runs.outputs import check_run_outputs
from robustscope.runs.progress import RunProgress, run_progress
from robustscope.runs.shards import (
    Shard,
    ShardDamaged,
    ShardOutput,
    ThreatJob,
    plan_shards,
    read_shard,
    shard_path,
    write_shard,
)
from robustscope.runs.spec import EvaluationSpec, load_spec
from robustscope.runs.stopping import RunInterrupted, Terminated, resume_command
from robustscope.runs.store import STORE_FAILURES, open_store
from robustscope.scores.evaluation import Evaluation, ReadingOptions, build_evaluation
from robustscope.threats.registry import implemented_threat

log = logging.getLogger(__name__)

#: Version of the run.json layout.
MANIFEST_VERSION = 1


@dataclass
class RunOutcome:
    """A finished run: its folder, report, manifest and the evaluation behind them."""

    out_dir: Path
    report: Path
    manifest: dict
    evaluation: Evaluation


def run_spec(spec: EvaluationSpec, spec_text: str | None = None, quiet: bool = False,
             progress: RunProgress | None = None, resume: bool | None = None,
             spec_path: str | Path = "SPEC") -> RunOutcome:
    """Run every threat of ``spec`` shard by shard, write the run folder and the report,
    record the store. Paths in ``spec`` must already be resolved (see
    :func:`robustscope.runs.spec.load_spec`).

    ``resume``: ``True`` continues the incomplete run in ``outputs.dir`` (an error when there
    is none); ``None`` (the default) continues it when the folder holds one and starts afresh
    otherwise; ``False`` always starts afresh. Finished shards are never run again.
    ``spec_path`` names the spec file in the resume command of an error message.
    """
    started = time.time()
    check_run_outputs(spec)
    out_dir = Path(spec.outputs.dir)
    again = resume_command(spec_path, out_dir)
    with run_folder_lock(out_dir):
        # hashed before and after the model and data are read: what was loaded is what
        # the hashes say unless a file changed while being read, which is refused
        identity = input_identity(spec)
        inputs = load_inputs(spec)
        for key, now in input_identity(spec)["files"].items():
            if now != identity["files"].get(key):
                raise InputError(f"{key} {now['path']} changed while it was being read; "
                                 "run again once it is written")
        identity["n"] = len(inputs.X)
        try:
            return _run_locked(spec, spec_text, quiet, progress, resume, identity, inputs,
                               again, started)
        except STORE_FAILURES as exc:
            raise RunIncomplete(f"the results store {hide_password(str(spec.outputs.store))} "
                                f"failed ({_first_line(exc)}); the shards written so far are "
                                f"kept in {out_dir}: resume with: {again}") from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _run_locked(spec: EvaluationSpec, spec_text: str | None, quiet: bool,
                progress: RunProgress | None, resume: bool | None, identity: dict,
                inputs, again: str, started: float) -> RunOutcome:
    """:func:`run_spec` once the run folder is locked and the inputs are loaded."""
    out_dir = Path(spec.outputs.dir)
    ex = spec.execution
    log.info("evaluating %s on %d inputs of %s", inputs.model_name, len(inputs.X),
             inputs.data_name)
    _check_channels(spec, inputs.X.shape)
    jobs = _threat_jobs(spec)
    plan = journal.open_run(out_dir, spec, len(inputs.X), resume, identity)
    if plan.get("resumed"):
        log.info("resuming the run in %s", out_dir)
    if plan.get("replaced"):
        log.warning("%s held a completed run: this run replaces it (give another --out-dir "
                    "to keep it)", out_dir)
    shards = plan_shards(len(inputs.X), [t.name for t in spec.threats], ex.shard_size,
                         spec.seed)
    store = _StoreWriter(spec, plan, out_dir, jobs)
    todo = journal.pending(out_dir, shards)
    errors: dict[str, str] = {}
    n_rows = sum(len(s) for s in todo)
    try:
        # closing: an exception in the loop (Ctrl-C, SIGTERM) stops the workers at once
        with (run_progress(1, quiet) if progress is None else _given(progress)) as prog, \
                prog.stage(f"inputs ({len(todo)} shards)", n_rows) as advance, \
                contextlib.closing(run_shards(inputs, jobs, todo, ex.backend, ex.workers,
                                              ex.address, spec,
                                              on_progress=(prog.searching if prog.reports
                                                           else None))) as outputs:
            store.catch_up(shards, todo)
            for shard, out in outputs:
                prog.searching(shard.key, None)  # committed below, or failed: not in flight
                if isinstance(out, BaseException):
                    errors[shard.key] = _shard_error(shard, out)
                    log.error("%s", errors[shard.key])
                    with contextlib.suppress(OSError):  # the journal is a log; the error
                        journal.record(out_dir, shard, "failed", error=errors[shard.key])
                    continue
                try:
                    where = shard_path(out_dir, shard)
                    write_shard(out_dir, out)
                    where = out_dir / journal.JOURNAL
                    journal.record(out_dir, shard, "done", failed_rows=len(out.result.errors))
                except OSError as exc:
                    raise RunIncomplete(
                        f"cannot write {exc.filename or where} "
                        f"({exc.strerror or exc}; shard {shard.key}); the shards written so far "
                        f"are kept in {out_dir}: free space, then resume with: {again}"
                    ) from exc
                store.record(out)
                advance(len(shard))
    finally:
        store.close()
    if errors:
        lines = "\n".join(errors.values())
        raise RunIncomplete(f"{len(errors)} of {len(shards)} shard(s) failed; the others are "
                            f"kept in {out_dir}:\n{lines}\nresume with: {again}")
    try:
        return _finish(spec, spec_text, plan, shards, inputs, store, started)
    except ShardDamaged as exc:
        exc.path.unlink(missing_ok=True)
        raise RunIncomplete(f"{exc}; it was removed: resume the run to compute its rows "
                            f"again: {again}") from exc
    except OSError as exc:
        where = exc.filename or out_dir
        raise RunIncomplete(f"cannot write {where} ({exc.strerror or exc}); every shard is "
                            f"kept in {out_dir}: free space, then resume with: {again}"
                            ) from exc


def _finish(spec: EvaluationSpec, spec_text: str | None, plan: dict, shards: list[Shard],
            inputs, store: _StoreWriter, started: float) -> RunOutcome:
    """Every shard done: assemble the tables, compute the readings, write the run folder and
    the report, finish the store runs and mark the plan complete."""
    out_dir = Path(spec.outputs.dir)
    ex = spec.execution
    results, seconds = assemble(out_dir, spec, shards, inputs.X.shape[1:], inputs.y)
    strengths = {}
    for t in spec.threats:
        grid = t.strength_values()
        res = results[t.name]
        strengths[t.name] = (np.asarray(res.meta["grid"]) if t.is_grid else
                             np.asarray(grid) if grid else
                             np.linspace(res.max_radius / 20, res.max_radius, 20))
    sc = spec.scores
    options = ReadingOptions(intrinsic=sc.intrinsic, n_bootstrap=sc.n_bootstrap,
                             confidence=sc.confidence, censored=sc.censored, ood=sc.ood,
                             pad=sc.pad, cr_reference=sc.cr.reference if sc.cr else None,
                             fragile=sc.fragile, seed=spec.seed)
    title = spec.name or f"{inputs.model_name} on {inputs.data_name}"
    uid = plan["uid"]
    # readings over the inputs that were searched (failed rows are listed, not scored)
    keep = np.ones(len(inputs.X), dtype=bool)
    for res in results.values():
        keep &= ~res.failed
    evaluated = results if keep.all() else {k: r.subset(keep) for k, r in results.items()}
    X_eval, y_eval = (inputs.X, inputs.y) if keep.all() else (inputs.X[keep], inputs.y[keep])
    ev = build_evaluation(title, evaluated, X_eval, y_eval, inputs.space,
                          inputs.X_reference, options, strengths, seconds, started,
                          provenance_extra={"run_uid": uid, "model": inputs.model_name,
                                            "data": inputs.data_name,
                                            "inputs": plan["inputs"]["files"],
                                            "execution": {"backend": ex.backend,
                                                          "workers": ex.workers,
                                                          "shard_size": ex.shard_size,
                                                          "shards": len(shards),
                                                          "resumed": bool(plan.get("resumed"))}})
    ev.notes.update(inputs.notes)
    for sec in ev.sections:
        sec.store_run_id = plan.get("store_runs", {}).get(sec.name)
        n_failed = len(results[sec.name].errors)
        if n_failed:
            sec.notes["failed"] = (f"{n_failed} input(s) failed (the model "
                                   "raised); they are listed in the radius table with status "
                                   "'failed' and left out of the readings")
    store.finish(results, {sec.name: sec.summary() for sec in ev.sections})
    manifest = _write_run_dir(spec, ev, out_dir, uid, results)
    report = render_report(ev, out_dir / spec.outputs.report,
                           None if spec_text is None else hide_password(spec_text))
    journal.mark_complete(out_dir, plan)
    log.info("report written to %s", report)
    return RunOutcome(out_dir, report, manifest, ev)


class RunIncomplete(InputError):
    """Some shards could not be run or written; the rest is kept and the run can be resumed."""


def _shard_error(shard: Shard, exc: BaseException) -> str:
    return (f"threat {shard.threat}, shard {shard.index} (rows {shard.start}..{shard.stop - 1})"
            f": {type(exc).__name__}: {exc}")


def _check_channels(spec: EvaluationSpec, shape: tuple[int, ...]) -> None:
    """Before any shard runs: an image threat that needs colour channels the images
    ``(n, C, H, W)`` lack (a colour threat on grayscale images) is an :class:`InputError`
    naming it."""
    if len(shape) != 4:
        return
    for i, t in enumerate(spec.threats):
        need = implemented_threat(t.name).channels if t.is_grid else None
        if need is not None and need != shape[1]:
            raise InputError(f"threats[{i}] ({t.name}): needs {need} colour channels (RGB); "
                             f"the images have {shape[1]}")


def _threat_jobs(spec: EvaluationSpec) -> dict[str, ThreatJob]:
    jobs = {}
    for t in spec.threats:
        jobs[t.name] = ThreatJob(threat=t.name, is_grid=t.is_grid, grid=t.strength_values(),
                                 options=spec.search_options(t))
    return jobs


def assemble(out_dir: Path, spec: EvaluationSpec, shards: list[Shard],
             input_shape: tuple[int, ...] | None = None, y: np.ndarray | None = None
             ) -> tuple[dict[str, RadiusResult], dict[str, float]]:
    """The per-threat results from the shard files (every shard must be done) and the
    seconds each threat took (sum of its shard times). Failed rows keep status ``failed`` and
    their messages in the result's ``errors``; with the labels ``y`` ``(n,)``, their label
    column holds the true class (index) where the model's classes are known.

    Every stored column of :data:`~robustscope.core.result.ROW_SCHEMA`, counterexamples
    included, is copied shard by shard into a memory-mapped ``.npy`` file in
    ``shards/<threat>/columns/``: one shard is in memory at a time, and the assembled
    result's arrays are pages of those files, which the kernel can drop, so memory stays
    bounded however many inputs the run has."""
    results, seconds = {}, {}
    for t in spec.threats:
        mine = [s for s in shards if s.threat == t.name]
        results[t.name], seconds[t.name] = _assemble_threat(out_dir, mine, input_shape, y)
    return results, seconds


#: Width of a text column's memory map (every status name is shorter).
_TEXT_WIDTH = 16


def _column_file(folder: Path, name: str, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """A new memory-mapped ``.npy`` column ``folder/<name>.npy`` of ``shape``; text as
    fixed-width strings (no Python object per row).

    The file's blocks are reserved before it is mapped (``posix_fallocate`` where the OS has
    it): numpy creates it sparse, and a write into a mapped page that a full disk cannot back
    kills the process with SIGBUS (exit 135, no message). A full disk is an ``OSError``
    naming the file instead."""
    kind = f"<U{_TEXT_WIDTH}" if dtype == "str" else np.dtype(dtype)
    path = folder / f"{name}.npy"
    try:
        del_me = np.lib.format.open_memmap(path, mode="w+", dtype=kind, shape=shape)
        del del_me                                   # the header written, the rest sparse
        if hasattr(os, "posix_fallocate"):
            with open(path, "r+b") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size:
                    os.posix_fallocate(fh.fileno(), 0, size)
        return np.lib.format.open_memmap(path, mode="r+")
    except OSError as exc:  # numpy's writes and the reservation raise without a file name
        raise OSError(exc.errno, exc.strerror, str(path)) from exc


def _assemble_threat(out_dir: Path, mine: list[Shard], input_shape: tuple[int, ...] | None,
                     y: np.ndarray | None) -> tuple[RadiusResult, float]:
    """One threat's shards joined into memory-mapped columns (see :func:`assemble`)."""
    n = mine[-1].stop if mine else 0
    folder = shard_path(out_dir, mine[0]).parent / "columns"
    folder.mkdir(parents=True, exist_ok=True)
    columns: dict[str, np.ndarray] = {}
    # rows of shards with failed rows only, read before any searched row gave the width of
    # the per-row columns that such shards leave empty (class probabilities)
    unsized: list[slice] = []
    first: RadiusResult | None = None
    metas: list[tuple[dict, int]] = []  # (meta, rows) of each shard
    secs, errors = 0.0, {}
    for shard in mine:
        path = shard_path(out_dir, shard)
        res, sec = read_shard(path)
        rows = slice(shard.start, shard.stop)
        if len(res) != len(shard) or not np.array_equal(
                np.asarray(res.sample), np.arange(shard.start, shard.stop)):
            raise RunIncomplete(f"shard file {path} does not hold rows "
                                f"{shard.start}..{shard.stop - 1}; delete it and resume the run")
        searched = bool((~res.failed).any())
        for col in STORED_COLUMNS:
            value = np.asarray(getattr(res, col.name))
            if col.name == "x_adv" and input_shape is not None:
                value = value.reshape(len(shard), *input_shape)
            if col.name not in columns:
                if col.per_row and col.fill is not None and not searched:
                    continue              # sized by the first shard with a searched row
                columns[col.name] = _column_file(folder, col.name, col.dtype,
                                                 (n, *value.shape[1:]))
                for r in unsized:
                    columns[col.name][r] = col.fill
            column = columns[col.name]
            if col.dtype == "str" and len(value) and max(map(len, set(value))) > _TEXT_WIDTH:
                raise ValueError(f"a {col.name} in shard {shard.key} is longer than "
                                 f"{_TEXT_WIDTH} characters")
            if value.shape[1:] != column.shape[1:]:
                if searched or col.fill is None:
                    raise RunIncomplete(f"shard file {path}: column {col.name} has rows of "
                                        f"shape {value.shape[1:]}, the others "
                                        f"{column.shape[1:]}; delete it and resume the run")
                value = np.full((len(shard), *column.shape[1:]), col.fill)  # failed rows only
            column[rows] = value
        if not searched and len(columns) < len(STORED_COLUMNS):
            unsized.append(rows)
        if first is None or (not (~first.failed).any() and searched):
            first = res
        metas.append((res.meta, len(res)))
        secs += sec
        errors.update(res.errors)
    for col in STORED_COLUMNS:  # no shard had a searched row: per-row columns of width 0
        if col.name not in columns:
            columns[col.name] = _column_file(folder, col.name, col.dtype, (n, 0))
            columns[col.name][:] = col.fill
    assert first is not None
    result = RadiusResult(**columns, threat=first.threat, solver=first.solver,
                          max_radius=first.max_radius, classes=first.classes,
                          meta=join_meta(first.meta, metas), errors=errors)
    if y is not None:
        _label_failed_rows(result, y)
    for column in columns.values():
        column.flush()
    return result, secs


def _label_failed_rows(res: RadiusResult, y: np.ndarray) -> None:
    """Write the true class (index) of ``res``'s failed rows into its label column, where
    their labels ``y[sample]`` are among the model's classes (otherwise they stay -1)."""
    rows = np.flatnonzero(res.failed)
    if not len(rows):
        return
    n_classes = len(res.classes) if res.classes is not None else res.proba.shape[1]
    with contextlib.suppress(InputError):  # not a known class: the label stays unknown
        res.label[rows] = check_labels(np.asarray(y)[res.sample[rows]], len(rows), n_classes,
                                       res.classes)


class _StoreWriter:
    """Streams finished shards into the results store: one store run per threat (started
    with the plan, ids kept in it), one transaction per shard. Failed rows are not stored
    (the store only holds searched inputs); a run with failed rows ends ``failed``."""

    def __init__(self, spec: EvaluationSpec, plan: dict, out_dir: Path,
                 jobs: dict[str, ThreatJob]) -> None:
        self.spec, self.plan, self.out_dir = spec, plan, out_dir
        self.store = None
        self.stored: dict[str, np.ndarray] = {}
        if spec.outputs.store is None:
            return
        self.store = open_store(spec.outputs.store)
        runs = plan.setdefault("store_runs", {})
        if not all(t.name in runs for t in spec.threats):
            for t in spec.threats:
                job = jobs[t.name]
                if t.name in runs:
                    continue
                runs[t.name] = self.store.start_run(
                    spec.model.display_name, kind="radius", threat=t.name,
                    solver="grid-bisection" if job.is_grid else job.solver,
                    source=str(out_dir.resolve()),
                    config={"evaluation": plan["uid"], "seed": spec.seed,
                            "inputs": plan["inputs"]["files"],
                            "budget": job.budget, "rtol": None if job.is_grid else job.rtol,
                            "shard_size": spec.execution.shard_size})
            journal.save_plan(out_dir, plan)

    def catch_up(self, shards: list[Shard], todo: list[Shard]) -> None:
        """After a crash between a shard's file and its store transaction: record the done
        shards whose rows the store lacks."""
        if self.store is None:
            return
        for name, run_id in self.plan["store_runs"].items():
            self.stored[name] = np.sort(self.store.radii(run_id)["sample"].to_numpy())
        pending = set(todo)
        for shard in shards:
            if shard in pending:
                continue
            stored = self.stored[shard.threat]
            lo, hi = np.searchsorted(stored, [shard.start, shard.stop])
            res, _ = read_shard(shard_path(self.out_dir, shard), light=True)
            if hi - lo < int((~res.failed).sum()):
                self._record(shard, res)

    def record(self, out: ShardOutput) -> None:
        if self.store is not None:
            self._record(out.shard, out.result)

    def _record(self, shard: Shard, res: RadiusResult) -> None:
        keep = ~res.failed
        stored = self.stored.get(shard.threat)
        if stored is not None and len(stored):
            keep &= ~np.isin(res.sample, stored)
        if not keep.any():
            return
        part = res if keep.all() else res.subset(keep)
        self.store.record_radii(self.plan["store_runs"][shard.threat], part)

    def finish(self, results: dict[str, RadiusResult],
               readings: dict[str, dict] | None = None) -> None:
        """Mark each threat's store run ``finished`` (``failed`` when it has failed rows),
        with its readings (the section's summary, as run.json has it) in its config, so that
        ``compare`` reads them back rather than computing them again."""
        if self.spec.outputs.store is None:
            return
        with open_store(self.spec.outputs.store) as store:
            for name, run_id in self.plan["store_runs"].items():
                res = results[name]
                extra: dict = {}
                if readings and name in readings:
                    extra["readings"] = _plain_numbers(readings[name])
                if res.errors:
                    extra["failed_rows"] = len(res.errors)
                store.finish_run(run_id, "failed" if res.errors else "finished", extra)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None


def _plain_numbers(summary: dict) -> dict:
    """The numbers of a summary, NaN as ``None`` (JSON has no NaN)."""
    out = {}
    for k, v in summary.items():
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            continue
        out[k] = None if math.isnan(float(v)) else (int(v) if isinstance(v, (int, np.integer))
                                                    else float(v))
    return out


class _given:
    def __init__(self, progress: RunProgress) -> None:
        self.progress = progress

    def __enter__(self) -> RunProgress:
        return self.progress

    def __exit__(self, *exc: object) -> None:
        return None


def run_spec_file(path: str | Path, quiet: bool = False, out_dir: Path | None = None,
                  resume: bool | None = None, backend: str | None = None,
                  workers: int | None = None, address: str | None = None) -> RunOutcome:
    """Load, validate and run the spec at ``path``; ``out_dir`` overrides ``outputs.dir``,
    ``backend``/``workers``/``address`` the spec's ``execution`` block.

    Ctrl-C (:class:`KeyboardInterrupt`) or SIGTERM (:class:`~robustscope.runs.stopping.
    Terminated`, under :func:`~robustscope.runs.stopping.terminate_raises`) raise
    :class:`~robustscope.runs.stopping.RunInterrupted`, which gives the resume command."""
    spec = load_spec(path)
    if out_dir is not None:
        spec.outputs.dir = Path(out_dir)
    if backend is not None:
        spec.execution.backend = backend
    if workers is not None:
        spec.execution.workers = workers
    if address is not None:
        spec.execution.address = address
    check_run_outputs(spec, path)
    text = Path(path).read_text()
    try:
        return run_spec(spec, text, quiet=quiet, resume=resume, spec_path=path)
    except KeyboardInterrupt as exc:
        raise RunInterrupted(signal.SIGINT, spec.outputs.dir,
                             resume_command(path, spec.outputs.dir)) from exc
    except Terminated as exc:
        raise RunInterrupted(exc.signum, spec.outputs.dir,
                             resume_command(path, spec.outputs.dir)) from exc


# -- outputs ---------------------------------------------------------------------------------
def _finite(x: object) -> object:
    if isinstance(x, float) and not math.isfinite(x):
        return None if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if isinstance(x, np.generic):
        return _finite(x.item())
    return x


#: Rows per chunk when the run folder's tables are written (bounded memory). At 16,384 the
#: CSV's peak is 8.4 MiB for 25,000 and for 100,000 rows, the counterexamples' (30 features)
#: 1.0 and 2.4 MiB (their radius and status columns are written whole; traced with
#: tracemalloc); at 65,536 both grew with the rows up to the chunk (12.6 and 15.5 MiB at
#: 100,000 rows).
TABLE_CHUNK = 16384


def _write_table(res: RadiusResult, path: Path) -> None:
    """The radius CSV of ``res`` (:meth:`RadiusResult.to_dataframe`), written
    :data:`TABLE_CHUNK` rows at a time (bounded memory)."""
    def write(p: Path) -> None:
        with open(p, "w", newline="") as fh:
            for start in range(0, max(len(res), 1), TABLE_CHUNK):
                frame = res.subset(slice(start, start + TABLE_CHUNK)).to_dataframe()
                frame.to_csv(fh, index=False, header=start == 0)

    atomic_write(path, write)


def _save_adversarial(res: RadiusResult, path: Path) -> None:
    """Like :meth:`RadiusResult.save_adversarial` (compressed NPZ: ``X_adv``, ``radius``,
    ``status``), with ``X_adv`` copied :data:`TABLE_CHUNK` rows at a time from its
    memory map."""
    def write(p: Path) -> None:
        with zipfile.ZipFile(p, "w", zipfile.ZIP_DEFLATED, allowZip64=True) as zf:
            x = res.x_adv
            with zf.open("X_adv.npy", "w", force_zip64=True) as fh:
                np.lib.format.write_array_header_2_0(
                    fh, {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float64)),
                         "fortran_order": False, "shape": tuple(x.shape)})
                for start in range(0, len(x), TABLE_CHUNK):
                    chunk = np.ascontiguousarray(x[start:start + TABLE_CHUNK], np.float64)
                    fh.write(chunk.data)  # (a view: no copy, unlike tobytes)
            status = np.asarray(res.status)
            # a fixed-width column (a memory map) is written as it is, buffered by numpy
            status = status if status.dtype.kind == "U" else status.astype(str)
            for name, arr in (("radius", np.asarray(res.radius, np.float64)),
                              ("status", status)):
                with zf.open(f"{name}.npy", "w", force_zip64=True) as fh:
                    np.lib.format.write_array(fh, arr, allow_pickle=False)

    atomic_write(path, write)


def _write_run_dir(spec: EvaluationSpec, ev: Evaluation, out_dir: Path, uid: str,
                   results: dict[str, RadiusResult] | None = None) -> dict:
    """The radius tables, counterexamples and ``run.json`` of a run; ``results`` (all
    inputs, failed rows included) default to the sections' results."""
    threats = {}
    for sec in ev.sections:
        res = (results or {}).get(sec.name, sec.result)
        radii = f"radii_{sec.name}.csv"
        _write_table(res, out_dir / radii)
        adv = None
        if spec.outputs.adversarial:
            adv = f"adv_{sec.name}.npz"
            _save_adversarial(res, out_dir / adv)
        threats[sec.name] = {
            "threat": res.threat, "solver": res.solver, "max_radius": res.max_radius,
            "strengths": [float(e) for e in sec.strengths], "radii": radii,
            "adversarial": adv, "summary": sec.summary(),
            "scores": None if sec.scores is None else sec.scores.to_dict(),
            "ood": None if sec.ood is None else sec.ood.summary(),
            "pad": None if sec.pad is None else {"pad": sec.pad.pad, "error": sec.pad.error,
                                                  "interval": list(sec.pad.interval)},
            "classes": None if res.classes is None else np.asarray(res.classes).tolist(),
            "store_run_id": sec.store_run_id, "notes": sec.notes,
            "failed": [{"sample": int(k), "error": v} for k, v in sorted(res.errors.items())],
        }
    manifest = {
        "robustscope_run": MANIFEST_VERSION, "uid": uid, "title": ev.title,
        "spec": json.loads(hide_password(spec.model_dump_json())), "threats": threats,
        "cr": ev.cr,
        "notes": dict(ev.notes),
        "provenance": ev.provenance, "report": spec.outputs.report,
        "store": None if spec.outputs.store is None else hide_password(spec.outputs.store),
        "complete": True,
        "execution": {"shard_size": spec.execution.shard_size,
                      "shards_dir": journal.SHARDS, "journal": journal.JOURNAL},
    }
    manifest = _finite(manifest)
    text = json.dumps(manifest, indent=1, default=str)
    atomic_write(out_dir / "run.json", lambda p: Path(p).write_text(text))
    return manifest
