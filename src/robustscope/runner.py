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

import functools
import json
import logging
import math
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from robustscope.errors import InputError
from robustscope.evaluation import Evaluation, ReadingOptions, build_evaluation, optional_module
from robustscope.progress import RunProgress, run_progress
from robustscope.report.html import render_report
from robustscope.result import RadiusResult, _atomic_write
from robustscope.space import FeatureSpace
from robustscope.spec import EvaluationSpec, load_spec

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
    from robustscope.demo import train_models

    return train_models(seed)


def _builtin(spec: EvaluationSpec) -> tuple[object | None, LoadedInputs]:
    data, X_train, X_test, _, y_test, models = _demo_models(spec.seed)
    lower = np.minimum(X_train.min(axis=0), X_test.min(axis=0))
    upper = np.maximum(X_train.max(axis=0), X_test.max(axis=0))
    space = FeatureSpace.from_arrays(lower, upper, scale=X_train.max(0) - X_train.min(0),
                                     names=list(data.feature_names))
    from robustscope.demo import LOGISTIC, TREES

    key = {"breast-cancer-gbm": TREES, "breast-cancer-logreg": LOGISTIC}
    model = models[key[spec.model.builtin]] if spec.model.builtin else None
    return model, LoadedInputs(model, spec.model.display_name, X_test, y_test, X_train, space,
                               list(data.feature_names), "breast-cancer (test split)")


def load_inputs(spec: EvaluationSpec) -> LoadedInputs:
    """Model, evaluated inputs, reference data and feature space of ``spec`` (paths already
    resolved)."""
    from robustscope.data import load_data
    from robustscope.models.loaders import load_model

    cache: list = []

    def builtin() -> tuple[object | None, LoadedInputs]:
        if not cache:
            cache.append(_builtin(spec))  # trains the demo models once
        return cache[0]

    if spec.data.builtin is not None:
        _, inputs = builtin()
    else:
        ds = load_data(spec.data.path, spec.data.label_column)
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
                                  device=spec.model.device, example=inputs.X[:2])
    inputs.space = _space(spec, inputs)
    return inputs


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
             progress: RunProgress | None = None) -> RunOutcome:
    """Run every threat of ``spec``, write the run folder and the report, record the store.
    Paths in ``spec`` must already be resolved (see :func:`robustscope.spec.load_spec`)."""
    from robustscope.search import radius

    started = time.time()
    inputs = load_inputs(spec)
    out_dir = Path(spec.outputs.dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    log.info("evaluating %s on %d inputs of %s", inputs.model_name, len(inputs.X),
             inputs.data_name)
    results, strengths, seconds = {}, {}, {}
    with (run_progress(len(spec.threats), quiet) if progress is None
          else _given(progress)) as prog:
        for k, t in enumerate(spec.threats):
            solver = spec.solver_for(t)
            grid = t.strength_values()
            max_radius = t.max_radius or (max(grid) if grid else None)
            t0 = time.perf_counter()
            if t.is_grid:
                with prog.stage(t.name, len(inputs.X)) as advance:
                    res = grid_threat_result(inputs, t.name, grid, spec.seed, solver.batch_size,
                                             spec.model.device, f"threats[{k}]")
                    advance(len(inputs.X))
                seconds[t.name] = time.perf_counter() - t0
                results[t.name] = res
                strengths[t.name] = np.asarray(res.meta["grid"])
                continue
            with prog.stage(t.name, len(inputs.X)) as advance:
                res = radius(inputs.model, inputs.X, inputs.y, threat=t.name,
                             space=inputs.space, solver=solver.name, max_radius=max_radius,
                             budget=solver.budget, rtol=solver.rtol, seed=spec.seed,
                             device=spec.model.device, batch_size=solver.batch_size,
                             progress=advance)
            seconds[t.name] = time.perf_counter() - t0
            results[t.name] = res
            strengths[t.name] = (np.asarray(grid) if grid else
                                 np.linspace(res.max_radius / 20, res.max_radius, 20))
    sc = spec.scores
    options = ReadingOptions(intrinsic=sc.intrinsic, n_bootstrap=sc.n_bootstrap,
                             confidence=sc.confidence, censored=sc.censored, ood=sc.ood,
                             pad=sc.pad, cr_reference=sc.cr.reference if sc.cr else None,
                             fragile=sc.fragile, seed=spec.seed)
    title = spec.name or f"{inputs.model_name} on {inputs.data_name}"
    uid = uuid.uuid4().hex
    ev = build_evaluation(title, results, inputs.X, inputs.y, inputs.space, inputs.X_reference,
                          options, strengths, seconds, started,
                          provenance_extra={"run_uid": uid, "model": inputs.model_name,
                                            "data": inputs.data_name})
    store_note = _record_store(spec, ev, uid, out_dir)
    manifest = _write_run_dir(spec, ev, out_dir, uid, store_note)
    report = render_report(ev, out_dir / spec.outputs.report, spec_text)
    log.info("report written to %s", report)
    return RunOutcome(out_dir, report, manifest, ev)


def grid_threat_result(inputs: LoadedInputs, threat: str, grid: list[float] | None, seed: int,
                       batch_size: int, device: str, where: str) -> RadiusResult:
    """An image threat searched on its strength grid (:func:`robustscope.grid_search.
    grid_robustness`, bisection over the levels), as a :class:`RadiusResult`.

    The radius of an input is the smallest grid level at which a verified counterexample was
    found (``inf`` = censored above the grid). Grid searches count model passes for the whole
    batch only, so the per-input query columns are 0 and ``meta`` holds the totals
    (``forward_total``, ``backward_total``; ``queries_per_input = False``).
    """
    import torch

    from robustscope.grid_search import grid_robustness
    from robustscope.models.base import PROBA_FLOOR
    from robustscope.models.wrap import wrap_model
    from robustscope.search import _label_indices

    X = inputs.X
    if X.ndim != 4:
        raise InputError(f"{where}: image threat '{threat}' needs images (N, C, H, W); the "
                         f"data has shape {X.shape}")
    clf = wrap_model(inputs.model, input_shape=X.shape[1:], device=device, example=X[:2])
    labels = _label_indices(clf, inputs.y, len(X))
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


def run_spec_file(path: str | Path, quiet: bool = False, out_dir: Path | None = None
                  ) -> RunOutcome:
    """Load, validate and run the spec at ``path``; ``out_dir`` overrides ``outputs.dir``."""
    spec = load_spec(path)
    if out_dir is not None:
        spec.outputs.dir = Path(out_dir)
    return run_spec(spec, Path(path).read_text(), quiet=quiet)


# -- outputs ---------------------------------------------------------------------------------
def _record_store(spec: EvaluationSpec, ev: Evaluation, uid: str, out_dir: Path) -> str | None:
    """One store run per threat, sharing ``config.evaluation = uid``; returns a note when the
    store is not available."""
    if spec.outputs.store is None:
        return None
    store_mod = optional_module("robustscope.store")
    if store_mod is None:
        return "robustscope.store is not installed; the run was not recorded"
    with store_mod.open_store(spec.outputs.store) as store:
        for sec in ev.sections:
            res = sec.result
            run_id = store.start_run(
                ev.provenance.get("model", "model"), kind="radius", threat=res.threat,
                solver=res.solver, source=str(out_dir.resolve()),
                config={"evaluation": uid, "seed": spec.seed, "budget": res.meta.get("budget"),
                        "rtol": res.meta.get("rtol"), "strengths": [float(e) for e in
                                                                   sec.strengths],
                        "title": ev.title,
                        **({"queries_per_input": False,
                            "forward_total": res.meta["forward_total"],
                            "backward_total": res.meta["backward_total"]}
                           if res.meta.get("queries_per_input") is False else {})})
            store.record_radii(run_id, res)
            store.finish_run(run_id)
            sec.store_run_id = run_id
    return None


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


def _write_run_dir(spec: EvaluationSpec, ev: Evaluation, out_dir: Path, uid: str,
                   store_note: str | None) -> dict:
    threats = {}
    for sec in ev.sections:
        res = sec.result
        radii = f"radii_{sec.name}.csv"
        res.to_csv(out_dir / radii)
        adv = None
        if spec.outputs.adversarial:
            adv = f"adv_{sec.name}.npz"
            res.save_adversarial(out_dir / adv)
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
        }
    manifest = {
        "robustscope_run": MANIFEST_VERSION, "uid": uid, "title": ev.title,
        "spec": json.loads(spec.model_dump_json()), "threats": threats, "cr": ev.cr,
        "notes": {**ev.notes, **({"store": store_note} if store_note else {})},
        "provenance": ev.provenance, "report": spec.outputs.report,
        "store": None if spec.outputs.store is None else str(spec.outputs.store),
    }
    manifest = _finite(manifest)
    text = json.dumps(manifest, indent=1, default=str)
    _atomic_write(out_dir / "run.json", lambda p: Path(p).write_text(text))
    return manifest
