"""Compare two runs: scores side by side and accuracy curves overlaid, per shared threat.

A run is a run folder written by ``robustscope run`` (with ``run.json``) or a run id in a
results store (``--store``); a store run that belongs to an evaluation (``config.evaluation``)
brings every threat of that evaluation along.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from robustscope.core.errors import InputError
from robustscope.runs.store import open_store
from robustscope.scores.comparison import RunView, ThreatView


def _view_from_frame(threat: str, df: pd.DataFrame, max_radius: float,
                     strengths: list[float] | None) -> ThreatView:
    radius = df["radius"].to_numpy(dtype=np.float64)
    eps = (np.asarray(strengths, dtype=np.float64) if strengths else
           np.linspace(max_radius / 20, max_radius, 20))
    return ThreatView(threat, radius, df["status"].astype(str).to_numpy(),
                      df["loss"].to_numpy(dtype=np.float64),
                      df["queries"].to_numpy(dtype=np.float64), float(max_radius), eps)


def load_run_dir(path: str | Path) -> RunView:
    """A run folder written by ``robustscope run``."""
    path = Path(path)
    manifest_path = path / "run.json"
    if not manifest_path.is_file():
        raise InputError(f"run {path}: no run.json (not a folder written by robustscope run)")
    try:
        manifest = json.loads(manifest_path.read_text())
    except json.JSONDecodeError as exc:
        raise InputError(f"run {path}: run.json is not valid JSON ({exc})") from exc
    view = RunView(manifest.get("title") or path.name, str(path))
    for name, t in manifest.get("threats", {}).items():
        csv = path / t["radii"]
        if not csv.is_file():
            raise InputError(f"run {path}: radius table {t['radii']} is missing")
        df = pd.read_csv(csv)
        view.threats[name] = _view_from_frame(t["threat"], df, t["max_radius"],
                                              t.get("strengths"))
        view.threats[name].readings = t.get("summary")  # the numbers the report shows
        if not t.get("summary", {}).get("queries_per_input", True):
            # run folders written before grid searches charged each input kept totals only
            view.threats[name].mean_queries = t["summary"]["mean_queries"]
    if not view.threats:
        raise InputError(f"run {path}: run.json lists no threat")
    return view


def load_store_run(store_path: str | Path, run_id: int) -> RunView:
    """A run from a results store; with ``config.evaluation``, all its sibling threats."""
    if not Path(store_path).is_file():
        raise InputError(f"--store {store_path}: file does not exist")
    with open_store(store_path) as store:
        info = store.run(run_id)
        if info.kind != "radius":
            raise InputError(f"run {run_id}: is a '{info.kind}' run; compare needs radius runs")
        group = info.config.get("evaluation")
        members = [info]
        if group:
            members = [r for r in store.runs(info.model, kind="radius")
                       if r.config.get("evaluation") == group]
        view = RunView(info.config.get("title") or f"{info.model} (store run {run_id})",
                       f"{store_path}#{run_id}")
        for r in members:
            df = store.radii(r.id)
            threat = r.threat or r.config.get("threat", f"run{r.id}")
            view.threats[threat] = _view_from_frame(
                threat, df, r.config["max_radius"], r.config.get("strengths"))
            view.threats[threat].readings = r.config.get("readings")  # as run.json's
            if r.config.get("queries_per_input") is False:  # stored before per-input charging
                total = r.config.get("forward_total", 0) + r.config.get("backward_total", 0)
                view.threats[threat].mean_queries = total / max(len(df), 1)
    return view


def load_run(ref: str, store: str | Path | None = None) -> RunView:
    """``ref`` is a run folder, or (with ``store``) an integer store run id."""
    if Path(ref).is_dir():
        return load_run_dir(ref)
    if store is not None:
        try:
            run_id = int(ref)
        except ValueError:
            raise InputError(f"run '{ref}': neither a run folder nor a store run id") from None
        return load_store_run(store, run_id)
    raise InputError(f"run '{ref}': no such folder (for a store run id, pass --store)")
