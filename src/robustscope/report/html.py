"""The HTML report: one self-contained file (figures as inline base64 PNG, CSS inline, no
script, no external URL) that reads top to bottom: summary, one section per threat (or
model), out-of-distribution reading, most fragile inputs, provenance.

Entry points: :func:`render_report` (an :class:`~robustscope.scores.evaluation.Evaluation` to a
file) and :func:`render_html` (to a string).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import jinja2
import numpy as np

from robustscope.core.fileio import atomic_write
from robustscope.core.result import CENSORED, MISCLASSIFIED
from robustscope.core.statuses import AT_ZERO, STATUSES
from robustscope.report.bracket_figures import (
    bracket_figure,
    certified_accuracy_figure,
    has_brackets,
)
from robustscope.report.figures import (
    Curve,
    accuracy_vs_strength_figure,
    changed_features,
    figure_to_data_uri,
    fragile_images_figure,
    fragile_indices,
    png_size,
    radius_distribution_figure,
)
from robustscope.report.intrinsic_figures import plot_radius_vs_g
from robustscope.report.tabular_figures import flip_rate_figure, ood_figure, score_scatter_figure
from robustscope.scores.evaluation import Evaluation, Section

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("robustscope.report", "templates"),
    autoescape=jinja2.select_autoescape(["html", "j2"]),
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def fmt(value: object, digits: int = 4) -> str:
    """A number for a table: ``4`` significant digits, ``—`` for NaN/None, ``∞`` for inf."""
    if value is None:
        return "—"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(v):
        return "—"
    if math.isinf(v):
        return "∞" if v > 0 else "-∞"
    return f"{v:.{digits}g}"


def pct(value: object) -> str:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return "—"
    return "—" if math.isnan(v) else f"{100 * v:.1f}%"


_ENV.filters["fmt"] = fmt
_ENV.filters["pct"] = pct


def _figure(figures: list[dict], notes: list[str], caption: str, make: Callable[[], object]
            ) -> None:
    """Append ``{caption, uri, width, height}`` made by ``make()`` (the PNG's size in pixels:
    the template sizes the figure's slot by it); on a failure, a note."""
    try:
        uri = figure_to_data_uri(make())
        width, height = png_size(uri)
        figures.append({"caption": caption, "uri": uri, "width": width, "height": height})
    except Exception as exc:  # noqa: BLE001 - one failed figure must not sink the report
        notes.append(f"{caption}: could not be drawn ({type(exc).__name__}: {exc})")


def _section_context(ev: Evaluation, sec: Section) -> dict:
    res = sec.result
    figures: list[dict] = []
    notes = [f"{k}: {v}" for k, v in sec.notes.items() if k not in ("ood", "pad")]
    class_names = None if res.classes is None else list(res.classes)

    _figure(figures, notes, "Flip rate against strength ε",
            lambda: flip_rate_figure(res, class_names=dict(enumerate(class_names))
                                     if class_names else None,
                                     title=f"Flip rate vs strength — {sec.name}"))
    broken = res.found & ~np.isin(res.status, AT_ZERO)
    if broken.any():
        _figure(figures, notes, "Score before and after the perturbation, coloured by radius",
                lambda: score_scatter_figure(
                    res.proba[broken], res.proba_adv[broken], res.radius[broken],
                    res.prediction[broken], title=f"Initial vs perturbed score — {sec.name}"))
    else:
        notes.append("Score scatter: no counterexample was found")
    if sec.scores is not None:
        _figure(figures, notes, "Radius against g(loss), with the least-squares line",
                lambda: plot_radius_vs_g(sec.scores))
    _figure(figures, notes, "Robust accuracy against strength (markers: the grid)",
            lambda: accuracy_vs_strength_figure([Curve.of(sec.name, res, sec.strengths)],
                                                title=f"Accuracy vs strength — {sec.name}"))
    if has_brackets(res):
        _figure(figures, notes, "Certified lower bound beside the verified radius, per input",
                lambda: bracket_figure(res, title=sec.name))
        _figure(figures, notes, "Certified against empirical robust accuracy (the true curve "
                "lies between)", lambda: certified_accuracy_figure(res, title=sec.name))

    scores = None
    if sec.scores is not None:
        d = sec.scores.to_dict()
        scores = [{"name": k, "label": SCORE_LABELS.get(k, k), "value": d[k],
                   "low": d[f"{k}_low"], "high": d[f"{k}_high"]}
                  for k in ("R_m", "R_w", "R_w_correct", "R_nu", "slope", "intercept", "r2")]
        scores_meta = {"confidence": d["confidence"], "n_bootstrap": d["n_bootstrap"],
                       "censored": d["censored"], "n_censored": d["n_censored"],
                       "lower_bounds": d["lower_bounds"]}
    else:
        scores_meta = None

    acc_rows = [{"eps": e, "acc": a} for e, a in
                zip(sec.strengths, Curve.of(sec.name, res).accuracy(sec.strengths), strict=True)]
    return {"name": sec.name, "threat": res.threat, "solver": res.solver,
            "summary": sec.summary(), "figures": figures, "notes": notes, "scores": scores,
            "scores_meta": scores_meta, "accuracy": acc_rows,
            "statuses": {s: int((res.status == s).sum()) for s in STATUSES}}


def _ood_context(sec: Section) -> dict:
    figures: list[dict] = []
    notes = [v for k, v in sec.notes.items() if k in ("ood", "pad")]
    if sec.ood is not None:
        _figure(figures, notes, "IsolationForest scores of clean inputs and counterexamples",
                lambda: ood_figure(sec.ood, title=f"IsolationForest scores — {sec.name}"))
    return {"name": sec.name, "ood": None if sec.ood is None else sec.ood.summary(),
            "pad": None if sec.pad is None else {
                "pad": sec.pad.pad, "error": sec.pad.error, "n_test": sec.pad.n_test,
                "low": sec.pad.interval[0], "high": sec.pad.interval[1],
                "boot_low": sec.pad.bootstrap[0], "boot_high": sec.pad.bootstrap[1]},
            "figures": figures, "notes": notes}


def _fragile_context(ev: Evaluation, sec: Section) -> dict:
    res = sec.result
    k = ev.options.fragile
    idx = fragile_indices(res, k)
    classes = None if res.classes is None else list(res.classes)

    def label(c: int) -> str:
        return str(classes[c]) if classes is not None else str(c)

    out: dict = {"name": sec.name, "figures": [], "notes": [], "inputs": []}
    if len(idx) == 0:
        out["notes"].append("no verified counterexample among well-classified inputs")
        return out
    if ev.is_image:
        _figure(out["figures"], out["notes"], f"The {len(idx)} most fragile inputs",
                lambda: fragile_images_figure(ev.X, res, idx, classes))
        return out
    names = ev.space.names
    for i in idx:
        out["inputs"].append({
            "sample": int(res.sample[i]), "radius": float(res.radius[i]),
            "status": str(res.status[i]), "label": label(res.label[i]),
            "adv": label(res.adv_prediction[i]),
            "changes": changed_features(ev.X[i], res.x_adv[i], names, ev.space.scale)})
    return out


def _overview(ev: Evaluation) -> list[dict]:
    figures: list[dict] = []
    notes: list[str] = []
    threats = {s.threat for s in ev.sections}
    if len(ev.sections) > 1 and len(threats) == 1:
        _figure(figures, notes, "Robust accuracy against strength, all sections",
                lambda: accuracy_vs_strength_figure(
                    [Curve.of(s.name, s.result, s.strengths) for s in ev.sections],
                    title=f"Accuracy vs strength ({threats.pop()})"))
    _figure(figures, notes, "Distribution of the verified radii",
            lambda: radius_distribution_figure([Curve.of(s.name, s.result)
                                                for s in ev.sections]))
    return figures


def render_html(ev: Evaluation, spec_text: str | None = None) -> str:
    """The report of ``ev`` as one self-contained HTML string."""
    sections = [_section_context(ev, s) for s in ev.sections]
    prov = dict(ev.provenance)
    context = {
        "title": ev.title,
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "n_inputs": len(ev.X),
        "input_kind": "images" if ev.is_image else f"tabular, {ev.space.n_features} features",
        "overview": _overview(ev),
        "sections": sections,
        "cr": ev.cr,
        "cr_reference": ev.options.cr_reference,
        "notes": ev.notes,
        "ood": [_ood_context(s) for s in ev.sections],
        "has_reference": ev.X_reference is not None,
        "fragile": [_fragile_context(ev, s) for s in ev.sections],
        "is_image": ev.is_image,
        "provenance": prov,
        "provenance_json": json.dumps(prov, indent=1, default=str),
        "spec_text": spec_text,
        "statuses": (CENSORED, MISCLASSIFIED),
    }
    return _ENV.get_template("report.html.j2").render(**context)


def render_report(ev: Evaluation, path: str | Path, spec_text: str | None = None) -> Path:
    """Write the report of ``ev`` to ``path`` (atomically) and return the path."""
    path = Path(path)
    html = render_html(ev, spec_text)
    atomic_write(path, lambda p: Path(p).write_text(html, encoding="utf-8"))
    return path


#: How the report's Scores table names a score where its bare name could be read as another
#: number: R_w is the paper's worst case over every input (0 as soon as one is misclassified);
#: the summary's "worst radius" is R_w_correct, over the well-classified inputs.
SCORE_LABELS = {
    "R_w": "R_w (worst, all inputs: 0 when one is misclassified)",
    "R_w_correct": "R_w_correct (worst, well-classified: the summary's worst radius)",
}


# -- comparison of two runs ------------------------------------------------------------------
METRIC_LABELS = {
    "inputs": "inputs", "clean_accuracy": "clean accuracy", "median_radius": "median radius",
    "worst_radius": "worst radius", "R_m": "R_m", "R_nu": "R_ν", "R_nu_low": "R_ν low",
    "R_nu_high": "R_ν high", "censored_share": "censored share",
    "mean_queries": "queries / input",
}


def render_compare(comparison, path: str | Path) -> Path:
    """Write the HTML comparison of two runs (a :class:`robustscope.runs.compare.Comparison`)."""
    from robustscope.scores.comparison import METRICS

    cmp = comparison
    threats = []
    for t in cmp.shared:
        ma, mb = cmp.metrics[t]
        rows = [{"label": METRIC_LABELS[k], "a": ma[k], "b": mb[k],
                 "delta": (mb[k] - ma[k]) if k != "inputs" else None,
                 "share": k in ("clean_accuracy", "censored_share")} for k in METRICS]
        figures: list[dict] = []
        notes: list[str] = []
        ca = _curve(f"A: {cmp.a.name}", cmp.a.threats[t])
        cb = _curve(f"B: {cmp.b.name}", cmp.b.threats[t])
        _figure(figures, notes, "Robust accuracy against strength, both runs",
                lambda ca=ca, cb=cb, t=t: accuracy_vs_strength_figure(
                    [ca, cb], title=f"Accuracy vs strength — {t}"))
        _figure(figures, notes, "Distribution of the verified radii, both runs",
                lambda ca=ca, cb=cb, t=t: radius_distribution_figure(
                    [ca, cb], title=f"Radius distribution — {t}"))
        threats.append({"name": t, "rows": rows, "figures": figures, "notes": notes,
                        "accuracy": cmp.accuracy_rows(t)})
    html = _ENV.get_template("compare.html.j2").render(
        a=cmp.a, b=cmp.b, threats=threats, only_a=cmp.only_a, only_b=cmp.only_b,
        generated=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    path = Path(path)
    atomic_write(path, lambda p: Path(p).write_text(html, encoding="utf-8"))
    return path


def _curve(label: str, view) -> Curve:
    """The accuracy curve of one threat of a run (a :class:`~robustscope.scores.comparison.
    ThreatView`)."""
    return Curve(label, view.radius, view.status, view.max_radius, view.strengths)
