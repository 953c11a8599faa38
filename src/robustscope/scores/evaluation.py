"""An evaluation: radius results plus every reading derived from them, ready for a report.

:func:`build_evaluation` takes one :class:`RadiusResult` per *section* (a threat, or a model
when several models face one threat) and computes what the report shows: the difficulty-aware
scores (:mod:`robustscope.scores.intrinsic`), the out-of-distribution reading and Proxy-A
distance (:mod:`robustscope.scores.distribution`) and the MultiRobustBench competitiveness
ratios (:mod:`robustscope.scores.multiattack`). A reading that cannot be computed (no reference
data, no counterexample, too few inputs) is absent and the section records why (never a
made-up number).
"""

from __future__ import annotations

import logging
import math
import platform
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata

import numpy as np

from robustscope.core.errors import RobustscopeError
from robustscope.core.result import CENSORED, RadiusResult
from robustscope.core.space import FeatureSpace
from robustscope.core.statuses import AT_ZERO
from robustscope.scores.distribution import ood_check, proxy_a_distance
from robustscope.scores.intrinsic import scores_from_result
from robustscope.scores.multiattack import competitiveness, grid_from_radii
from robustscope.scores.relation_effect import relation_effect

log = logging.getLogger(__name__)

#: Packages whose versions go into a run's provenance.
PROVENANCE_PACKAGES = ("robustscope", "numpy", "torch", "scikit-learn", "scipy", "pandas",
                       "xgboost", "lightgbm", "matplotlib")


@dataclass
class ReadingOptions:
    """Which readings to compute (the ``scores`` block of a spec)."""

    intrinsic: bool = True
    n_bootstrap: int = 1000
    confidence: float = 0.95
    censored: str = "exclude"
    ood: bool = True
    pad: bool = True
    cr_reference: str | None = None
    fragile: int = 5
    seed: int = 0


@dataclass
class Section:
    """One radius result and its readings. ``notes`` says why a reading is absent."""

    name: str
    result: RadiusResult
    strengths: np.ndarray
    seconds: float = math.nan
    scores: object | None = None        # scores.intrinsic.IntrinsicScores
    ood: object | None = None           # scores.distribution.OODReport
    pad: object | None = None           # scores.distribution.PADResult
    notes: dict[str, str] = field(default_factory=dict)
    store_run_id: int | None = None

    @property
    def threat(self) -> str:
        return self.result.threat

    def summary(self) -> dict:
        """Headline numbers: clean accuracy, median and worst radius over the broken,
        well-classified inputs, censored share, R_nu and its interval (when computed); with
        an unconstrained comparison (relations between features), ``relations``: see
        :func:`robustscope.scores.relation_effect.relation_effect`."""
        res = self.result
        s = res.summary()
        ok = (res.status != CENSORED) & ~np.isin(res.status, AT_ZERO)
        r = res.radius[ok]
        out = {
            "n": s["n"],
            "clean_accuracy": s["clean_accuracy"],
            "median_radius": float(np.median(r)) if len(r) else math.nan,
            "worst_radius": float(r.min()) if len(r) else math.nan,
            "censored_share": float((res.status == CENSORED).mean()),
            "exact_share": float((res.status == "exact").mean()),
            "mean_queries": s["mean_queries"],
            "total_queries": int(res.queries.sum()),
            # radii still falling when the search reached its ceiling or budget
            "not_converged": s["not_converged"],
            "R_nu": math.nan, "R_nu_low": math.nan, "R_nu_high": math.nan,
        }
        effect = relation_effect(res)
        if effect is not None:
            out["relations"] = effect
        if self.scores is not None:
            d = self.scores.to_dict()
            out.update(R_nu=d["R_nu"], R_nu_low=d["R_nu_low"], R_nu_high=d["R_nu_high"],
                       R_m=d["R_m"], lower_bounds=d["lower_bounds"])
        return out


@dataclass
class Evaluation:
    """Everything a report needs: the inputs, the sections, CRs and provenance."""

    title: str
    X: np.ndarray
    y: np.ndarray
    space: FeatureSpace
    sections: list[Section]
    X_reference: np.ndarray | None = None
    cr: dict | None = None
    notes: dict[str, str] = field(default_factory=dict)
    provenance: dict = field(default_factory=dict)
    options: ReadingOptions = field(default_factory=ReadingOptions)

    @property
    def is_image(self) -> bool:
        return self.X.ndim == 4 or (self.X.ndim == 3 and self.X.shape[1] > 1)


def default_strengths(result: RadiusResult, num: int = 20) -> np.ndarray:
    """``num`` evenly spaced strengths up to the result's ``max_radius``."""
    return np.linspace(result.max_radius / num, result.max_radius, num)


def compute_section(name: str, result: RadiusResult, X: np.ndarray,
                    X_reference: np.ndarray | None,
                    options: ReadingOptions, strengths: np.ndarray | None = None,
                    seconds: float = math.nan) -> Section:
    """A :class:`Section` with the readings ``options`` asks for; ``X`` are the clean inputs
    of ``result``, in its order."""
    sec = Section(name, result,
                  np.asarray(strengths if strengths is not None else default_strengths(result)),
                  seconds)
    if options.intrinsic:
        try:
            sec.scores = scores_from_result(
                result, censored=options.censored, n_bootstrap=options.n_bootstrap,
                confidence=options.confidence, seed=options.seed)
        except RobustscopeError as exc:
            sec.notes["scores"] = str(exc)
    found = result.found & ~np.isin(result.status, AT_ZERO)
    if options.ood or options.pad:
        if X_reference is None:
            sec.notes["ood"] = "no reference (training) data was given"
        elif not found.any():
            sec.notes["ood"] = "no counterexample was found"
        else:
            clean = np.asarray(X, dtype=np.float64)[found]
            adv = result.x_adv[found]
            try:
                if options.ood:
                    sec.ood = ood_check(X_reference, clean, adv, seed=options.seed)
                if options.pad:
                    if found.sum() >= 5:
                        sec.pad = proxy_a_distance(clean, adv, seed=options.seed,
                                                        paired=True)
                    else:
                        sec.notes["pad"] = (f"Proxy-A distance needs 5 counterexamples, "
                                            f"found {int(found.sum())}")
            except RobustscopeError as exc:
                sec.notes["ood"] = str(exc)
    return sec


def compute_cr(sections: list[Section], reference: str | None) -> tuple[dict | None, str | None]:
    """MultiRobustBench CRs of the sections' results (one per threat, same inputs) on their
    strength grids; returns ``(report dict, None)`` or ``(None, reason)``."""
    if reference is None:
        return None, "not requested (add scores.cr to the spec)"
    try:
        # image threats carry the benchmark's attack name (ElasticAttack, ...)
        names = {s.name: s.result.meta.get("attack_name") or s.threat for s in sections}
        grid = grid_from_radii({names[s.name]: s.result for s in sections},
                                  {names[s.name]: list(s.strengths) for s in sections})
        ref = None if reference == "published" else reference
        attacks = list(grid.attacks)
        report = competitiveness(grid, ref, attacks=attacks, missing="skip")
        return report.to_dict(), None
    except RobustscopeError as exc:
        return None, str(exc)


def provenance(seed: int, started: float, sections: list[Section], extra: dict | None = None
               ) -> dict:
    """Versions, platform, seed, time and queries of a run."""
    versions = {}
    for pkg in PROVENANCE_PACKAGES:
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            continue
    versions["python"] = sys.version.split()[0]
    per = []
    for s in sections:
        res = s.result
        per.append({"section": s.name, "threat": res.threat, "solver": res.solver,
                    "budget": res.meta.get("budget"), "rtol": res.meta.get("rtol"),
                    "max_radius": res.max_radius, "seconds": s.seconds,
                    "forward_queries": int(res.forward_queries.sum()),
                    "backward_queries": int(res.backward_queries.sum()),
                    "mean_queries": s.summary()["mean_queries"]})
    return {
        "versions": versions,
        "platform": platform.platform(),
        "seed": seed,
        "started_at": datetime.fromtimestamp(started, timezone.utc).isoformat(timespec="seconds"),
        "wall_seconds": time.time() - started,
        "sections": per,
        **(extra or {}),
    }


def build_evaluation(title: str, results: dict[str, RadiusResult], X: np.ndarray, y: np.ndarray,
                     space: FeatureSpace, X_reference: np.ndarray | None = None,
                     options: ReadingOptions | None = None,
                     strengths: dict[str, np.ndarray] | None = None,
                     seconds: dict[str, float] | None = None, started: float | None = None,
                     provenance_extra: dict | None = None) -> Evaluation:
    """Compute every reading of ``results`` (section name -> result over the inputs ``X``).

    ``X`` ``(n, d)`` or ``(n, C, H, W)`` in original units, in the results' input order;
    ``X_reference`` training-like data for the out-of-distribution reading.
    """
    options = options or ReadingOptions()
    started = time.time() if started is None else started
    sections = []
    for name, res in results.items():
        if len(res) != len(X):
            raise RobustscopeError(f"results['{name}'] has {len(res)} inputs but X has {len(X)}")
        sections.append(compute_section(
            name, res, X, X_reference, options, (strengths or {}).get(name),
            (seconds or {}).get(name, math.nan)))
    ev = Evaluation(title, np.asarray(X), np.asarray(y), space, sections, X_reference,
                    options=options)
    threats = [s.threat for s in sections]
    if len(set(threats)) == len(threats):
        ev.cr, why = compute_cr(sections, options.cr_reference)
        if why:
            ev.notes["cr"] = why
    else:
        ev.notes["cr"] = "sections share a threat (several models): CRs compare threats"
    ev.provenance = provenance(options.seed, started, sections, provenance_extra)
    return ev
