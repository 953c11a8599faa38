"""``robustscope run`` and ``robustscope compare`` end to end on the built-in logistic
regression (exact radii, fast): run folder, manifest, store, report, comparisons, errors."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import typer
from report_helpers import external_references, report_images
from typer.testing import CliRunner

from robustscope.cli import compare as compare_cmd
from robustscope.cli import run as run_cmd

runner = CliRunner()

SPEC = """\
name: {name}
seed: 0
model: {{builtin: {model}}}
data: {{builtin: breast-cancer, limit: 40}}
threats:
  - name: linf
    strengths: {{max: 0.3, num: 6}}
  - name: l2
    strengths: [0.1, 0.5, 1.0]
scores: {{n_bootstrap: 50}}
outputs: {{dir: {out}, store: results.sqlite}}
execution: {{workers: 1}}     # in-process: worker pools are tested in test_sharded_runs
"""


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    a = typer.Typer()

    @a.callback()
    def main() -> None:
        """test app"""

    run_cmd.register(a)
    compare_cmd.register(a)
    return a


@pytest.fixture(scope="module")
def runs(tmp_path_factory, app):
    """Two runs into one store: A = logistic regression (exact radii), B = gradient boosting
    (attacked); both quiet."""
    tmp = tmp_path_factory.mktemp("runs")
    for name, model, out in (("A", "breast-cancer-logreg", "runA"),
                             ("B", "breast-cancer-gbm", "runB")):
        (tmp / f"{name}.yaml").write_text(SPEC.format(name=name, model=model, out=out))
        result = runner.invoke(app, ["run", str(tmp / f"{name}.yaml"), "--quiet"])
        assert result.exit_code == 0, result.output
        assert result.output.strip() == str(tmp / out / "report.html")
    return tmp


def test_run_writes_folder_manifest_and_report(runs):
    out = runs / "runA"
    manifest = json.loads((out / "run.json").read_text())
    assert set(manifest["threats"]) == {"linf", "l2"}
    for threat, t in manifest["threats"].items():
        table = pd.read_csv(out / t["radii"])
        assert len(table) == 40
        assert t["summary"]["clean_accuracy"] == pytest.approx(
            (table["status"] != "misclassified").mean())
        # a linear model: exact radii, censored beyond the largest strength
        assert set(table["status"]) <= {"exact", "misclassified", "censored"}
        censored = table["status"] == "censored"
        assert np.isinf(table["radius"][censored]).all()
        assert (table["radius"][table["status"] == "exact"] <= max(t["strengths"])).all()
        with np.load(out / t["adversarial"]) as adv:
            assert adv["X_adv"].shape == (40, 30)
        assert t["scores"]["R_nu"] > 0
        assert t["store_run_id"] is not None
        assert t["strengths"] == (pytest.approx([0.05, 0.1, 0.15, 0.2, 0.25, 0.3])
                                  if threat == "linf" else [0.1, 0.5, 1.0])
    prov = manifest["provenance"]
    assert {"python", "numpy", "torch", "scikit-learn", "robustscope"} <= set(prov["versions"])
    assert prov["seed"] == 0 and prov["sections"][0]["forward_queries"] > 0
    html = (out / "report.html").read_text()
    assert external_references(html) == []
    assert len(report_images(html)) >= 11
    assert "name: A" in html  # the spec text is part of the provenance


def test_run_records_the_store(runs):
    from robustscope.runs.store import open_store

    manifest = json.loads((runs / "runA" / "run.json").read_text())
    with open_store(runs / "results.sqlite") as store:
        for t in manifest["threats"].values():
            info = store.run(t["store_run_id"])
            assert info.status == "finished" and info.config["evaluation"] == manifest["uid"]
            radii = store.radii(t["store_run_id"])
            table = pd.read_csv(runs / "runA" / t["radii"])
            np.testing.assert_allclose(radii["radius"], table["radius"])


def test_run_prints_a_summary_unless_quiet(runs, app, tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(name="C", model="breast-cancer-logreg", out="o")
                    .replace("limit: 40", "limit: 10"))
    result = runner.invoke(app, ["run", str(spec)])
    assert result.exit_code == 0, result.output
    assert "linf" in result.output and "R_ν" in result.output
    assert result.output.strip().endswith("report.html")


def test_compare_run_folders_terminal_and_html(runs, app):
    out = runs / "cmp.html"
    result = runner.invoke(app, ["compare", str(runs / "runA"), str(runs / "runB"),
                                 "--out", str(out), "--n-bootstrap", "50"])
    assert result.exit_code == 0, result.output
    for text in ("linf: scores", "l2: scores", "median radius", "R_ν",
                 "linf: accuracy", "B − A"):
        assert text in result.output
    html = out.read_text()
    alts = [i["alt"] for i in report_images(html)]
    assert alts.count("Robust accuracy against strength, both runs") == 2
    assert all(i["width"] > 0 for i in report_images(html))
    assert external_references(html) == []
    # the numbers shown are the runs' own
    from robustscope.report.html import fmt

    for run in ("runA", "runB"):
        manifest = json.loads((runs / run / "run.json").read_text())
        assert fmt(manifest["threats"]["linf"]["summary"]["median_radius"]) in result.output


@pytest.mark.parametrize("source", ["folder", "store"])
def test_compare_reads_each_reading_back(runs, app, source):
    """#43 item 5: compare shows the interval of R_ν (and every other reading) that run.json
    and the report hold, not a second bootstrap with other draws."""
    from robustscope.report.html import fmt
    from robustscope.runs.compare import load_run
    from robustscope.scores.comparison import STORED, compare_runs

    manifests = [json.loads((runs / r / "run.json").read_text()) for r in ("runA", "runB")]
    refs = ([str(runs / "runA"), str(runs / "runB")] if source == "folder" else
            [str(m["threats"]["linf"]["store_run_id"]) for m in manifests])
    store = runs / "results.sqlite" if source == "store" else None
    cmp = compare_runs(load_run(refs[0], store), load_run(refs[1], store), n_bootstrap=333,
                       seed=7)  # other settings than the runs': nothing is drawn again
    for manifest, metrics in zip(manifests, cmp.metrics["linf"], strict=True):
        summary = manifest["threats"]["linf"]["summary"]
        assert np.isfinite(summary["R_nu_low"])
        for metric, key in STORED.items():
            assert metrics[metric] == pytest.approx(summary[key], nan_ok=True), metric
    result = runner.invoke(app, ["compare", *refs, "--n-bootstrap", "333", "--seed", "7",
                                 *(["--store", str(store)] if store else [])])
    assert result.exit_code == 0, result.output
    for manifest in manifests:
        summary = manifest["threats"]["linf"]["summary"]
        for key in ("R_nu_low", "R_nu_high"):
            assert fmt(summary[key]) in result.output


def test_compare_store_ids_brings_every_threat(runs, app):
    manifest_b = json.loads((runs / "runB" / "run.json").read_text())
    run_a = json.loads((runs / "runA" / "run.json").read_text())["threats"]["linf"]
    run_b = manifest_b["threats"]["l2"]
    result = runner.invoke(app, ["compare", str(run_a["store_run_id"]),
                                 str(run_b["store_run_id"]), "--store",
                                 str(runs / "results.sqlite"), "--n-bootstrap", "20"])
    assert result.exit_code == 0, result.output
    assert "linf: scores" in result.output and "l2: scores" in result.output


def test_compare_errors(runs, app, tmp_path):
    result = runner.invoke(app, ["compare", str(runs / "runA"), str(tmp_path / "nothing")])
    assert result.exit_code == 2
    assert "no such folder" in result.output
    (tmp_path / "empty").mkdir()
    result = runner.invoke(app, ["compare", str(runs / "runA"), str(tmp_path / "empty")])
    assert result.exit_code == 2 and "no run.json" in result.output
    result = runner.invoke(app, ["compare", "1", "999", "--store", str(runs / "results.sqlite")])
    assert result.exit_code == 2 and "run 999" in result.output


def test_run_reports_spec_errors_with_line(app, tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text("model: {builtin: breast-cancer-logreg}\ndata: {builtin: breast-cancer}\n"
                    "threats:\n  - name: linf\n    solver: {budget: -1}\n")
    result = runner.invoke(app, ["run", str(spec)])
    assert result.exit_code == 2
    assert "line 5: threats[0].solver.budget" in result.output
    assert not (tmp_path / "robustscope-run").exists()


def test_run_on_data_files_with_split_and_inline_features(app, tmp_path):
    """A CSV, a skops model file, a split for the reference data, inline features."""
    import skops.io as sio
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    data = load_breast_cancer(as_frame=True)
    frame = data.frame.rename(columns={"target": "y"}).iloc[:120]
    frame.to_csv(tmp_path / "data.csv", index=False)
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000)).fit(
        frame.drop(columns="y"), frame["y"])
    sio.dump(model, tmp_path / "model.skops")
    (tmp_path / "spec.yaml").write_text(
        "model: {path: model.skops, trust_pickle: true}\n"
        "data: {path: data.csv, label_column: y, split: {test_size: 0.25}}\n"
        "features:\n  default: {lower: 0, upper: 5000, scale: 100}\n"
        "threats: [{name: l1, strengths: {max: 2, num: 4}}]\n"
        "scores: {n_bootstrap: 0, fragile: 2}\n"
        "outputs: {dir: out, adversarial: false}\n"
        "execution: {workers: 1}\n")
    result = runner.invoke(app, ["run", str(tmp_path / "spec.yaml"), "-q"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "out" / "run.json").read_text())
    assert manifest["threats"]["l1"]["summary"]["n"] == 30
    assert manifest["threats"]["l1"]["adversarial"] is None
    html = (tmp_path / "out" / "report.html").read_text()
    assert "Proxy-A distance" in html  # the split gave reference data


def test_compare_computes_only_what_a_run_did_not_store():
    """A run stored without scores (R_ν NaN) gets them computed; stored readings are kept."""
    from robustscope.scores.comparison import ThreatView, threat_metrics

    rng = np.random.default_rng(0)
    n = 30
    view = ThreatView("linf", rng.uniform(0.1, 1, n), np.array(["exact"] * n),
                      rng.uniform(0.05, 0.5, n), np.ones(n), 1.0, np.linspace(0.1, 1, 5))
    view.readings = {"n": n, "median_radius": 123.0, "R_nu": float("nan"),
                     "R_nu_low": None, "R_nu_high": None}
    m = threat_metrics(view, n_bootstrap=50)
    assert m["median_radius"] == 123.0 and m["inputs"] == n
    assert np.isfinite(m["R_nu"]) and np.isfinite(m["R_nu_low"])
