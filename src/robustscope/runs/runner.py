"""Run an evaluation spec: load the model, data and feature space, search the radius of every
input under every threat, compute the readings, write the run folder and the report, and
record the run in the results store.

A run folder holds::

    run.json              manifest: spec, provenance, per-threat summary, scores, files
    radii_<threat>.csv    one row per input (see RadiusResult.to_dataframe)
    adv_<threat>.npz      counterexamples (when outputs.adversarial)
    report.html           the report (name from outputs.report)

``robustscope compare`` reads run folders back with :func:`load_run_dir`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from robustscope.core.errors import InputError
from robustscope.core.fileio import atomic_write
from robustscope.core.result import RadiusResult
from robustscope.core.space import FeatureSpace
from robustscope.report.html import render_report
from robustscope.runs import journal
from robustscope.runs.progress import RunProgress, run_progress
from robustscope.runs.shards import (
    _JOINED_META,
    _ROW_FIELDS,
    _SUMMED_META,
    FAILED,
    Shard,
    ThreatJob,
    plan_shards,
    read_shard,
    shard_path,
    write_shard,
)
from robustscope.runs.spec import EvaluationSpec, load_spec
from robustscope.scores.evaluation import (
    Evaluation,
    ReadingOptions,
    build_evaluation,
    optional_module,
)

log = logging.getLogger(__name__)

#: Version of the run.json layout.
MANIFEST_VERSION = 1


@dataclass
class LoadedInputs:
    """What a spec's model/data/features blocks resolve to."""

    model: object
    model_name: str
    X: np.ndarray
    y: np.ndarray
    X_reference: np.ndarray | None
    space: FeatureSpace | None
    names: list[str] | None
    data_name: str


@dataclass
class RunOutcome:
    """A finished run: its folder, report, manifest and the evaluation behind them."""

    out_dir: Path
    report: Path
    manifest: dict
    evaluation: Evaluation


@functools.lru_cache(maxsize=2)
def _demo_models(seed: int):
    """The demo's data split and fitted models (trained once per process and seed; they are
    never modified afterwards)."""
    from robustscope.runs.demo import train_models

    return train_models(seed)


def _builtin(spec: EvaluationSpec) -> tuple[object | None, LoadedInputs]:
    data, X_train, X_test, _, y_test, models = _demo_models(spec.seed)
    from robustscope.runs.demo import LOGISTIC, TREES, demo_space

    space = demo_space(data, X_train, X_test)

    key = {"breast-cancer-gbm": TREES, "breast-cancer-logreg": LOGISTIC}
    model = models[key[spec.model.builtin]] if spec.model.builtin else None
    return model, LoadedInputs(model, spec.model.display_name, X_test, y_test, X_train, space,
                               list(data.feature_names), "breast-cancer (test split)")


def load_inputs(spec: EvaluationSpec) -> LoadedInputs:
    """Model, evaluated inputs, reference data and feature space of ``spec`` (paths already
    resolved)."""
    from robustscope.models.loaders import load_model
    from robustscope.runs.data import load_data

    cache: list = []

    def builtin() -> tuple[object | None, LoadedInputs]:
        if not cache:
            cache.append(_builtin(spec))  # trains the demo models once
        return cache[0]

    if spec.data.builtin is not None:
        _, inputs = builtin()
    else:
        ds = _load_data(spec)
        X, y, X_ref = ds.X, ds.y, None
        if spec.data.split is not None:
            from sklearn.model_selection import train_test_split

            sp = spec.data.split
            strat = y if sp.stratify else None
            try:
                X_ref, X, _, y = train_test_split(X, y, test_size=sp.test_size,
                                                  random_state=sp.seed, stratify=strat)
            except ValueError as exc:
                raise InputError(f"data.split: cannot split {spec.data.path} ({exc})") from exc
        elif spec.data.reference is not None:
            X_ref = load_data(spec.data.reference, spec.data.label_column).X
            if X_ref.shape[1:] != X.shape[1:]:
                raise InputError(f"data.reference: rows of shape {X_ref.shape[1:]} but the "
                                 f"data has {X.shape[1:]}")
        inputs = LoadedInputs(None, spec.model.display_name, X, y, X_ref, None,
                              ds.feature_names, Path(str(spec.data.path)).name)
    if spec.data.limit is not None:
        inputs.X, inputs.y = inputs.X[:spec.data.limit], inputs.y[:spec.data.limit]
    if spec.model.builtin is not None:
        inputs.model = builtin()[0]
    else:
        inputs.model = load_model(spec.model.path, trust_pickle=spec.model.trust_pickle,
                                  device=spec.model.device, example=np.array(inputs.X[:2]))
    inputs.space = _space(spec, inputs)
    return inputs


def _load_data(spec: EvaluationSpec):
    """The spec's data file; a CSV or Parquet file of at least
    :data:`robustscope.runs.datastream.STREAM_BYTES` is read in chunks into a memory-mapped cache
    in the run folder (``data/``)."""
    from robustscope.runs import datastream
    from robustscope.runs.data import load_data

    path = Path(str(spec.data.path))
    suffix = path.suffix.lower()
    if suffix == ".parquet" or (suffix == ".csv" and path.is_file()
                                and path.stat().st_size >= datastream.STREAM_BYTES):
        return datastream.load_streamed(path, spec.data.label_column,
                                        Path(spec.outputs.dir) / "data")
    return load_data(path, spec.data.label_column)


def _space(spec: EvaluationSpec, inputs: LoadedInputs) -> FeatureSpace:
    X = inputs.X
    d = int(X[0].size)
    shape = X.shape[1:] if X.ndim > 2 else None
    if spec.features is not None:
        if spec.features.file is not None:
            return FeatureSpace.from_yaml(spec.features.file, d, inputs.names, shape)
        return FeatureSpace.from_dict(spec.features.inline(), d, inputs.names, shape,
                                      source="spec features")
    if inputs.space is not None:
        return inputs.space
    if X.ndim > 2:
        return FeatureSpace.box(X.shape[1:])
    both = X if inputs.X_reference is None else np.vstack([inputs.X_reference, X])
    return FeatureSpace.from_data(both, names=inputs.names)


def run_spec(spec: EvaluationSpec, spec_text: str | None = None, quiet: bool = False,
             progress: RunProgress | None = None, resume: bool | None = None) -> RunOutcome:
    """Run every threat of ``spec`` shard by shard, write the run folder and the report,
    record the store. Paths in ``spec`` must already be resolved (see
    :func:`robustscope.runs.spec.load_spec`).

    ``resume``: ``True`` continues the incomplete run in ``outputs.dir`` (an error when there
    is none); ``None`` (the default) continues it when the folder holds one and starts afresh
    otherwise; ``False`` always starts afresh. Finished shards are never run again.
    """
    from robustscope.runs.backends import run_shards

    started = time.time()
    inputs = load_inputs(spec)
    out_dir = Path(spec.outputs.dir)
    ex = spec.execution
    log.info("evaluating %s on %d inputs of %s", inputs.model_name, len(inputs.X),
             inputs.data_name)
    jobs = _threat_jobs(spec)
    plan = journal.open_run(out_dir, spec, len(inputs.X), resume)
    if plan.get("resumed"):
        log.info("resuming the run in %s", out_dir)
    shards = plan_shards(len(inputs.X), [t.name for t in spec.threats], ex.shard_size,
                         spec.seed)
    store = _StoreWriter(spec, plan, out_dir, jobs)
    todo = [s for s in shards if not journal.shard_done(out_dir, s)]
    errors: dict[str, str] = {}
    n_rows = sum(len(s) for s in todo)
    try:
        with (run_progress(1, quiet) if progress is None else _given(progress)) as prog, \
                prog.stage("shards", n_rows) as advance:
            store.catch_up(shards, todo)
            for shard, out in run_shards(inputs, jobs, todo, ex.backend, ex.workers,
                                         ex.address, spec):
                if isinstance(out, BaseException):
                    errors[shard.key] = _shard_error(shard, out)
                    log.error("%s", errors[shard.key])
                    with contextlib.suppress(OSError):  # the journal is a log; the error
                        journal.record(out_dir, shard, "failed", error=errors[shard.key])
                    continue
                try:
                    write_shard(out_dir, out)
                    journal.record(out_dir, shard, "done", failed_rows=len(out.failed))
                except OSError as exc:
                    raise RunIncomplete(
                        f"cannot write shard {shard.key} to {out_dir} ({exc}); the shards "
                        f"written so far are kept: free space, then resume with "
                        f"robustscope run SPEC --resume {out_dir}") from exc
                store.record(out)
                advance(len(shard))
                journal.after_commit_hook()
    finally:
        store.close()
    if errors:
        lines = "\n".join(errors.values())
        raise RunIncomplete(f"{len(errors)} of {len(shards)} shard(s) failed; the others are "
                            f"kept in {out_dir}:\n{lines}\nresume with: robustscope run SPEC "
                            f"--resume {out_dir}")
    results, seconds, failed = assemble(out_dir, spec, shards, inputs.X.shape[1:])
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
    for rows in failed.values():
        keep[list(rows)] = False
    evaluated = results if keep.all() else {k: _subset(r, keep) for k, r in results.items()}
    X_eval, y_eval = (inputs.X, inputs.y) if keep.all() else (inputs.X[keep], inputs.y[keep])
    ev = build_evaluation(title, evaluated, X_eval, y_eval, inputs.space,
                          inputs.X_reference, options, strengths, seconds, started,
                          provenance_extra={"run_uid": uid, "model": inputs.model_name,
                                            "data": inputs.data_name,
                                            "execution": {"backend": ex.backend,
                                                          "workers": ex.workers,
                                                          "shard_size": ex.shard_size,
                                                          "shards": len(shards),
                                                          "resumed": bool(plan.get("resumed"))}})
    for sec in ev.sections:
        sec.store_run_id = plan.get("store_runs", {}).get(sec.name)
        if failed.get(sec.name):
            sec.notes["failed"] = (f"{len(failed[sec.name])} input(s) failed (the model "
                                   "raised); they are listed in the radius table with status "
                                   "'failed' and left out of the readings")
    store_note = store.finish(results, failed)
    manifest = _write_run_dir(spec, ev, out_dir, uid, store_note, results, failed, inputs.y)
    report = render_report(ev, out_dir / spec.outputs.report, spec_text)
    journal.mark_complete(out_dir, plan)
    log.info("report written to %s", report)
    return RunOutcome(out_dir, report, manifest, ev)


class RunIncomplete(InputError):
    """Some shards could not be run or written; the rest is kept and the run can be resumed."""


def _shard_error(shard: Shard, exc: BaseException) -> str:
    return (f"threat {shard.threat}, shard {shard.index} (rows {shard.start}..{shard.stop - 1})"
            f": {type(exc).__name__}: {exc}")


def _threat_jobs(spec: EvaluationSpec) -> dict[str, ThreatJob]:
    jobs = {}
    for t in spec.threats:
        solver = spec.solver_for(t)
        grid = t.strength_values()
        jobs[t.name] = ThreatJob(
            threat=t.name, is_grid=t.is_grid, solver=solver.name, budget=solver.budget,
            rtol=solver.rtol, batch_size=solver.batch_size,
            max_radius=t.max_radius or (max(grid) if grid else None), grid=grid,
            device=spec.model.device)
    return jobs


def _subset(res: RadiusResult, keep: np.ndarray | slice) -> RadiusResult:
    fields = {name: np.asarray(getattr(res, name))[keep] for name in _ROW_FIELDS}
    meta = dict(res.meta)
    if "attack_runs" in meta:
        meta["attack_runs"] = np.asarray(meta["attack_runs"])[keep].tolist()
    return RadiusResult(**fields, threat=res.threat, solver=res.solver,
                        max_radius=res.max_radius, classes=res.classes, meta=meta)


def assemble(out_dir: Path, spec: EvaluationSpec, shards: list[Shard],
             input_shape: tuple[int, ...] | None = None
             ) -> tuple[dict[str, RadiusResult], dict[str, float], dict[str, dict[int, str]]]:
    """The per-threat results from the shard files (every shard must be done): results,
    seconds (sum of shard times) and the failed rows with their errors.

    Every per-input column, counterexamples included, is copied shard by shard into a
    memory-mapped ``.npy`` file in ``shards/<threat>/columns/``: one shard is in memory at a
    time, and the assembled result's arrays are pages of those files, which the kernel can
    drop, so memory stays bounded however many inputs the run has."""
    results, seconds, failed = {}, {}, {}
    for t in spec.threats:
        mine = [s for s in shards if s.threat == t.name]
        result, secs, fails = _assemble_threat(out_dir, mine, input_shape)
        results[t.name] = result
        seconds[t.name] = secs
        failed[t.name] = fails
    return results, seconds, failed


#: Width of the status column's memory map (every status name is shorter).
_STATUS_WIDTH = 16


def _assemble_threat(out_dir: Path, mine: list[Shard], input_shape: tuple[int, ...] | None
                     ) -> tuple[RadiusResult, float, dict[int, str]]:
    """One threat's shards joined into memory-mapped columns (see :func:`assemble`)."""
    n = mine[-1].stop if mine else 0
    folder = shard_path(out_dir, mine[0]).parent / "columns"
    folder.mkdir(parents=True, exist_ok=True)
    columns: dict[str, np.ndarray] = {}
    first: RadiusResult | None = None
    joined: dict[str, list] = {}
    summed: dict[str, int] = {}
    secs, fails = 0.0, {}
    for shard in mine:
        res, f, sec = read_shard(shard_path(out_dir, shard))
        rows = slice(shard.start, shard.stop)
        if len(res) != len(shard) or not np.array_equal(
                np.asarray(res.sample), np.arange(shard.start, shard.stop)):
            raise RunIncomplete(f"shard file {shard_path(out_dir, shard)} does not hold rows "
                                f"{shard.start}..{shard.stop - 1}; delete it and resume the run")
        for name in _ROW_FIELDS:
            value = np.asarray(getattr(res, name))
            if name == "x_adv":
                shape = input_shape if input_shape is not None else value.shape[1:]
                value = value.reshape(len(shard), *shape)
            if name not in columns:
                # statuses as a fixed-width text column: no Python object per row
                dtype = (f"<U{_STATUS_WIDTH}" if name == "status"
                         else np.float64 if name == "x_adv" else value.dtype)
                columns[name] = np.lib.format.open_memmap(
                    folder / f"{name}.npy", mode="w+", dtype=dtype, shape=(n, *value.shape[1:]))
            if name == "status" and len(value) and max(map(len, set(value))) > _STATUS_WIDTH:
                raise ValueError(f"a status in shard {shard.key} is longer than "
                                 f"{_STATUS_WIDTH} characters")
            columns[name][rows] = value
        if first is None or ((first.status == FAILED).all() and (res.status != FAILED).any()):
            first = res
        for key in _SUMMED_META:
            if key in res.meta:
                summed[key] = summed.get(key, 0) + int(res.meta[key])
        for key in _JOINED_META:
            joined.setdefault(key, []).extend(
                np.asarray(res.meta.get(key, [0] * len(res))).tolist())
        secs += sec
        fails.update(f)
    for col in columns.values():
        col.flush()
    assert first is not None
    meta = dict(first.meta)
    meta.update({k: v for k, v in summed.items() if k in meta})
    meta.update({k: v for k, v in joined.items() if k in meta})
    result = RadiusResult(**columns, threat=first.threat, solver=first.solver,
                          max_radius=first.max_radius, classes=first.classes, meta=meta)
    return result, secs, fails


class _StoreWriter:
    """Streams finished shards into the results store: one store run per threat (started
    with the plan, ids kept in it), one transaction per shard. Failed rows are not stored
    (the store only holds searched inputs); a run with failed rows ends ``failed``."""

    def __init__(self, spec: EvaluationSpec, plan: dict, out_dir: Path,
                 jobs: dict[str, ThreatJob]) -> None:
        self.spec, self.plan, self.out_dir = spec, plan, out_dir
        self.store = None
        self.note: str | None = None
        self.stored: dict[str, np.ndarray] = {}
        if spec.outputs.store is None:
            return
        store_mod = optional_module("robustscope.runs.store")
        if store_mod is None:
            self.note = "robustscope.runs.store is not installed; the run was not recorded"
            return
        self.store = store_mod.open_store(spec.outputs.store)
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
            res, failed, _ = read_shard(shard_path(self.out_dir, shard), light=True)
            if hi - lo < len(res) - len(failed):
                self._record(shard, res, failed)

    def record(self, out) -> None:
        if self.store is not None:
            self._record(out.shard, out.result, out.failed)

    def _record(self, shard: Shard, res: RadiusResult, failed: dict[int, str]) -> None:
        keep = res.status != FAILED
        stored = self.stored.get(shard.threat)
        if stored is not None and len(stored):
            keep &= ~np.isin(res.sample, stored)
        if not keep.any():
            return
        part = res if keep.all() else _subset(res, keep)
        self.store.record_radii(self.plan["store_runs"][shard.threat], part)

    def finish(self, results: dict[str, RadiusResult], failed: dict[str, dict[int, str]]
               ) -> str | None:
        if self.spec.outputs.store is None or self.note is not None:
            return self.note
        store_mod = optional_module("robustscope.runs.store")
        with store_mod.open_store(self.spec.outputs.store) as store:
            for name, run_id in self.plan["store_runs"].items():
                res = results[name]
                extra = ({"queries_per_input": False,
                          "forward_total": res.meta["forward_total"],
                          "backward_total": res.meta["backward_total"]}
                         if res.meta.get("queries_per_input") is False else {})
                if failed.get(name):
                    extra["failed_rows"] = len(failed[name])
                store.finish_run(run_id, "failed" if failed.get(name) else "finished", extra)
        return None

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None


def grid_threat_result(inputs: LoadedInputs, threat: str, grid: list[float] | None, seed: int,
                       batch_size: int, device: str, where: str) -> RadiusResult:
    """An image threat searched on its strength grid (:func:`robustscope.search.grid.
    grid_robustness`, bisection over the levels), as a :class:`RadiusResult`.

    The radius of an input is the smallest grid level at which a verified counterexample was
    found (``inf`` = censored above the grid). Grid searches count model passes for the whole
    batch only, so the per-input query columns are 0 and ``meta`` holds the totals
    (``forward_total``, ``backward_total``; ``queries_per_input = False``).
    """
    import torch

    from robustscope.core.checks import check_labels
    from robustscope.models.base import PROBA_FLOOR
    from robustscope.models.wrap import wrap_model
    from robustscope.search.grid import grid_robustness

    X = inputs.X
    if X.ndim != 4:
        raise InputError(f"{where}: image threat '{threat}' needs images (N, C, H, W); the "
                         f"data has shape {X.shape}")
    clf = wrap_model(inputs.model, input_shape=X.shape[1:], device=device, example=X[:2])
    labels = check_labels(inputs.y, len(X), clf.n_classes, getattr(clf, "classes", None))
    x = torch.as_tensor(X, dtype=torch.float32)
    gr = grid_robustness(clf, x, labels, threat, grid, seed=seed, batch_size=batch_size,
                         device=device)
    x_adv = gr.x_adv.detach().cpu()
    with torch.no_grad():
        proba = clf.predict_proba(clf.as_tensor(X)).detach().cpu().double().numpy()
        proba_adv = clf.predict_proba(x_adv.to(clf.device, clf.dtype)).detach().cpu() \
            .double().numpy()
    n = len(X)
    rows = np.arange(n)
    return RadiusResult(
        radius=gr.radius, lower_bound=np.zeros(n), status=gr.status.astype(object),
        x_adv=x_adv.double().numpy(), label=labels, prediction=proba.argmax(1),
        adv_prediction=proba_adv.argmax(1), proba=proba, proba_adv=proba_adv,
        loss=-np.log(np.maximum(proba[rows, labels], PROBA_FLOOR)),
        forward_queries=np.zeros(n, dtype=np.int64), backward_queries=np.zeros(n, np.int64),
        seconds=np.full(n, gr.seconds / max(n, 1)), threat=threat, solver="grid-bisection",
        max_radius=float(gr.grid[-1]), classes=getattr(clf, "classes", None),
        meta={"seed": seed, "budget": None, "rtol": None, "grid": gr.grid.tolist(),
              "queries_per_input": False, "forward_total": int(gr.forward_passes),
              "backward_total": int(gr.backward_passes), "attack_runs": gr.runs.tolist(),
              "attack_name": gr.attack_name,
              "model": clf.name})


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
    ``backend``/``workers``/``address`` the spec's ``execution`` block."""
    spec = load_spec(path)
    if out_dir is not None:
        spec.outputs.dir = Path(out_dir)
    if backend is not None:
        spec.execution.backend = backend
    if workers is not None:
        spec.execution.workers = workers
    if address is not None:
        spec.execution.address = address
    return run_spec(spec, Path(path).read_text(), quiet=quiet, resume=resume)


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


#: Rows per chunk when the run folder's tables are written (bounded memory).
TABLE_CHUNK = 65536


def _table_chunk(res: RadiusResult, y: np.ndarray | None, rows: slice) -> pd.DataFrame:
    part = _subset(res, rows)
    failed = part.status == FAILED
    if not failed.any():
        return part.to_dataframe()
    ok = _subset(part, ~failed).to_dataframe()
    bad = pd.DataFrame({"sample": part.sample[failed], "status": FAILED})
    frame = pd.concat([ok, bad.astype({"sample": ok["sample"].dtype})], ignore_index=True)
    frame = frame.sort_values("sample", kind="stable").reset_index(drop=True)
    if y is not None:
        frame.loc[frame["status"] == FAILED, "label"] = np.asarray(y)[part.sample[failed]]
    return frame


def _write_table(res: RadiusResult, y: np.ndarray | None, path: Path) -> None:
    """The radius CSV of ``res``, written :data:`TABLE_CHUNK` rows at a time; failed rows
    keep their sample and label, with no prediction."""
    def write(p: Path) -> None:
        with open(p, "w", newline="") as fh:
            for start in range(0, max(len(res), 1), TABLE_CHUNK):
                frame = _table_chunk(res, y, slice(start, start + TABLE_CHUNK))
                frame.to_csv(fh, index=False, header=start == 0)

    atomic_write(path, write)


def _save_adversarial(res: RadiusResult, path: Path) -> None:
    """Like :meth:`RadiusResult.save_adversarial` (compressed NPZ: ``X_adv``, ``radius``,
    ``status``), with ``X_adv`` copied :data:`TABLE_CHUNK` rows at a time from its
    memory map."""
    import zipfile

    def write(p: Path) -> None:
        with zipfile.ZipFile(p, "w", zipfile.ZIP_DEFLATED, allowZip64=True) as zf:
            x = res.x_adv
            with zf.open("X_adv.npy", "w", force_zip64=True) as fh:
                np.lib.format.write_array_header_2_0(
                    fh, {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float64)),
                         "fortran_order": False, "shape": tuple(x.shape)})
                for start in range(0, len(x), TABLE_CHUNK):
                    chunk = np.ascontiguousarray(x[start:start + TABLE_CHUNK], np.float64)
                    fh.write(chunk.tobytes())
            status = np.asarray(res.status)
            # a fixed-width column (a memory map) is written as it is, buffered by numpy
            status = status if status.dtype.kind == "U" else status.astype(str)
            for name, arr in (("radius", np.asarray(res.radius, np.float64)),
                              ("status", status)):
                with zf.open(f"{name}.npy", "w", force_zip64=True) as fh:
                    np.lib.format.write_array(fh, arr, allow_pickle=False)

    atomic_write(path, write)


def _write_run_dir(spec: EvaluationSpec, ev: Evaluation, out_dir: Path, uid: str,
                   store_note: str | None, results: dict[str, RadiusResult] | None = None,
                   failed: dict[str, dict[int, str]] | None = None,
                   y: np.ndarray | None = None) -> dict:
    threats = {}
    failed = failed or {}
    for sec in ev.sections:
        res = (results or {}).get(sec.name, sec.result)
        radii = f"radii_{sec.name}.csv"
        _write_table(res, y, out_dir / radii)
        adv = None
        if spec.outputs.adversarial:
            adv = f"adv_{sec.name}.npz"
            _save_adversarial(res, out_dir / adv)
        fails = failed.get(sec.name, {})
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
            "failed": [{"sample": int(k), "error": v} for k, v in sorted(fails.items())],
        }
    manifest = {
        "robustscope_run": MANIFEST_VERSION, "uid": uid, "title": ev.title,
        "spec": json.loads(spec.model_dump_json()), "threats": threats, "cr": ev.cr,
        "notes": {**ev.notes, **({"store": store_note} if store_note else {})},
        "provenance": ev.provenance, "report": spec.outputs.report,
        "store": None if spec.outputs.store is None else str(spec.outputs.store),
        "complete": True,
        "execution": {"shard_size": spec.execution.shard_size,
                      "shards_dir": "shards", "journal": journal.JOURNAL},
    }
    manifest = _finite(manifest)
    text = json.dumps(manifest, indent=1, default=str)
    atomic_write(out_dir / "run.json", lambda p: Path(p).write_text(text))
    return manifest
