"""Compare two runs: scores side by side and accuracy curves overlaid, per shared threat.

A run is a run folder written by ``robustscope run`` (with ``run.json``) or a run id in a
results store (``--store``); a store run that belongs to an evaluation (``config.evaluation``)
brings every threat of that evaluation along.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from robustscope.core.errors import InputError
from robustscope.core.result import CENSORED, MISCLASSIFIED
from robustscope.report.figures import Curve
from robustscope.scores.evaluation import optional_module


@dataclass
class ThreatView:
    """Per-input radii of one threat of a run (enough to recompute every score)."""

    threat: str
    radius: np.ndarray
    status: np.ndarray
    loss: np.ndarray
    queries: np.ndarray
    max_radius: float
    strengths: np.ndarray
    #: mean model passes per input where the table has no per-input counts (grid threats)
    mean_queries: float | None = None

    def curve(self, label: str) -> Curve:
        return Curve(label, self.radius, self.status, self.max_radius, self.strengths)


@dataclass
class RunView:
    """A run as read back: a display name, where it came from, and its threats."""

    name: str
    source: str
    threats: dict[str, ThreatView] = field(default_factory=dict)


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
        if not t.get("summary", {}).get("queries_per_input", True):
            view.threats[name].mean_queries = t["summary"]["mean_queries"]
    if not view.threats:
        raise InputError(f"run {path}: run.json lists no threat")
    return view


def load_store_run(store_path: str | Path, run_id: int) -> RunView:
    """A run from a results store; with ``config.evaluation``, all its sibling threats."""
    store_mod = optional_module("robustscope.runs.store")
    if store_mod is None:
        raise InputError("reading runs from a store needs robustscope.runs.store, which is not "
                         "installed")
    if not Path(store_path).is_file():
        raise InputError(f"--store {store_path}: file does not exist")
    with store_mod.open_store(store_path) as store:
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
            if r.config.get("queries_per_input") is False:
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


# -- the comparison ------------------------------------------------------------------------
METRICS = ("inputs", "clean_accuracy", "median_radius", "worst_radius", "R_m", "R_nu",
           "R_nu_low", "R_nu_high", "censored_share", "mean_queries")


def threat_metrics(view: ThreatView, n_bootstrap: int = 1000, seed: int = 0) -> dict:
    """Headline numbers of one threat (same definitions as the report's summary)."""
    ok = (view.status != CENSORED) & (view.status != MISCLASSIFIED)
    r = view.radius[ok]
    out = {"inputs": len(view.radius),
           "clean_accuracy": float((view.status != MISCLASSIFIED).mean()),
           "median_radius": float(np.median(r)) if len(r) else math.nan,
           "worst_radius": float(r.min()) if len(r) else math.nan,
           "censored_share": float((view.status == CENSORED).mean()),
           "mean_queries": (float(view.queries.mean()) if view.mean_queries is None
                            else float(view.mean_queries)),
           "R_m": math.nan, "R_nu": math.nan, "R_nu_low": math.nan, "R_nu_high": math.nan}
    intr = optional_module("robustscope.scores.intrinsic")
    if intr is not None and np.isfinite(view.loss).all():
        s = intr.intrinsic_scores(view.radius, view.loss, view.status,
                                  n_bootstrap=n_bootstrap, seed=seed).to_dict()
        out.update(R_m=s["R_m"], R_nu=s["R_nu"], R_nu_low=s["R_nu_low"],
                   R_nu_high=s["R_nu_high"])
    return out


@dataclass
class Comparison:
    """Two runs, their shared threats, the metrics of each, and the threats only one has."""

    a: RunView
    b: RunView
    shared: list[str]
    metrics: dict[str, tuple[dict, dict]]
    only_a: list[str]
    only_b: list[str]

    def accuracy_rows(self, threat: str) -> list[tuple[float, float, float]]:
        """(eps, accuracy of A, accuracy of B) on the union of both strength grids."""
        ta, tb = self.a.threats[threat], self.b.threats[threat]
        eps = np.union1d(ta.strengths, tb.strengths)
        return list(zip(eps.tolist(), ta.curve("A").accuracy(eps).tolist(),
                        tb.curve("B").accuracy(eps).tolist(), strict=True))


def compare_runs(a: RunView, b: RunView, n_bootstrap: int = 1000, seed: int = 0) -> Comparison:
    """Metrics of both runs on every threat they share."""
    shared = [t for t in a.threats if t in b.threats]
    if not shared:
        raise InputError(f"runs share no threat: {a.source} has {sorted(a.threats)}, "
                         f"{b.source} has {sorted(b.threats)}")
    metrics = {t: (threat_metrics(a.threats[t], n_bootstrap, seed),
                   threat_metrics(b.threats[t], n_bootstrap, seed)) for t in shared}
    return Comparison(a, b, shared, metrics, [t for t in a.threats if t not in b.threats],
                      [t for t in b.threats if t not in a.threats])
