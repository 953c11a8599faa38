"""The demo's report end to end: the demo's models and radii, then ``build_demo_report``."""

from __future__ import annotations

from report_helpers import external_references, report_images

from robustscope.core.space import FeatureSpace
from robustscope.report.demo_report import build_demo_report
from robustscope.runs.demo import demo_space, train_models
from robustscope.search.engine import radius


def test_demo_report_end_to_end(tmp_path):
    data, X_train, X_test, _, y_test, models = train_models()
    space = demo_space(data, X_train, X_test)
    results = {name: radius(m, X_test, y_test, threat="linf", space=space, seed=0)
               for name, m in models.items()}
    path = build_demo_report(results, X_test, y_test, space, tmp_path / "demo",
                             X_train=X_train)
    assert path == tmp_path / "demo" / "report.html" and path.is_file()
    html = path.read_text()
    assert external_references(html) == []
    images = report_images(html)
    alts = [i["alt"] for i in images]
    assert all(i["width"] > 0 for i in images)
    # one section per model, all under linf: the overview overlays them
    assert "Robust accuracy against strength, all sections" in alts
    assert alts.count("Flip rate against strength ε") == len(models)
    assert alts.count("IsolationForest scores of clean inputs and counterexamples") == len(models)
    for name in models:
        assert f">{name} <small" in html
    assert "Proxy-A distance" in html


def test_demo_report_without_reference_data_says_so(tmp_path):
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y = load_breast_cancer(return_X_y=True)
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000)).fit(X, y)
    space = FeatureSpace.from_data(X)
    res = radius(model, X[:15], y[:15], space=space)
    html = build_demo_report({"lr": res}, X[:15], y[:15], space, tmp_path).read_text()
    assert "no reference (training) data was given" in html
