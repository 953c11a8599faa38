"""Two runs side by side: the headline numbers of each shared threat, and accuracy curves.

Pure functions of per-input radii (:class:`ThreatView`); reading runs from folders or a store
is :mod:`robustscope.runs.compare`'s job, drawing them the report's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from robustscope.core.ecdf import robust_accuracy
from robustscope.core.errors import InputError
from robustscope.core.result import CENSORED, MISCLASSIFIED
from robustscope.core.statuses import AT_ZERO
from robustscope.scores.intrinsic import intrinsic_scores


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
    #: the readings the run stored (its summary: run.json's ``threats[...].summary``, a
    #: store run's ``config["readings"]``): shown as stored, never computed a second time
    #: (a second bootstrap draws other resamples and gives another interval)
    readings: dict | None = None

    def accuracy(self, eps: np.ndarray) -> np.ndarray:
        """Robust accuracy at each strength ``eps`` (NaN above ``max_radius``)."""
        return robust_accuracy(self.radius, self.status, self.max_radius, eps)


@dataclass
class RunView:
    """A run as read back: a display name, where it came from, and its threats."""

    name: str
    source: str
    threats: dict[str, ThreatView] = field(default_factory=dict)


METRICS = ("inputs", "clean_accuracy", "median_radius", "worst_radius", "R_m", "R_nu",
           "R_nu_low", "R_nu_high", "censored_share", "mean_queries")


#: The summary key each metric is stored under (:meth:`Section.summary`).
STORED = {"inputs": "n", **{k: k for k in METRICS if k != "inputs"}}


def threat_metrics(view: ThreatView, n_bootstrap: int = 1000, seed: int = 0) -> dict:
    """Headline numbers of one threat (same definitions as the report's summary): those the
    run stored (``view.readings``) as stored; only a reading the run did not store (a run
    without scores, a store run written before readings were kept) is computed here."""
    stored = {k: float(view.readings[key]) for k, key in STORED.items()
              if view.readings and view.readings.get(key) is not None}
    # NaN: not stored (a run without scores has R_nu NaN), so computed below
    stored = {k: v for k, v in stored.items() if not math.isnan(v)}
    if "R_nu" in stored:
        n_bootstrap = 0  # the interval is read back, not drawn again
    out = _computed(view, n_bootstrap, seed)
    out.update(stored)
    out["inputs"] = int(out["inputs"])
    return out


def _computed(view: ThreatView, n_bootstrap: int, seed: int) -> dict:
    ok = (view.status != CENSORED) & ~np.isin(view.status, AT_ZERO)
    r = view.radius[ok]
    out = {"inputs": len(view.radius),
           "clean_accuracy": float((view.status != MISCLASSIFIED).mean()),
           "median_radius": float(np.median(r)) if len(r) else math.nan,
           "worst_radius": float(r.min()) if len(r) else math.nan,
           "censored_share": float((view.status == CENSORED).mean()),
           "mean_queries": (float(view.queries.mean()) if view.mean_queries is None
                            else float(view.mean_queries)),
           "R_m": math.nan, "R_nu": math.nan, "R_nu_low": math.nan, "R_nu_high": math.nan}
    if np.isfinite(view.loss).all() and n_bootstrap > 0:
        s = intrinsic_scores(view.radius, view.loss, view.status,
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
        return list(zip(eps.tolist(), ta.accuracy(eps).tolist(),
                        tb.accuracy(eps).tolist(), strict=True))


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
