"""``robustscope run`` with image threats searched on their grid (robustscope.search.grid):
radii on the grid, queries as totals, CRs against the benchmark's attack names."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
import torch
from report_helpers import external_references, report_images

from robustscope.runs.runner import run_spec_file
from robustscope.runs.spec import parse_spec

pytestmark = pytest.mark.skipif(importlib.util.find_spec("robustscope.search.grid") is None,
                                reason="robustscope.search.grid (image threats) not installed")


def test_spec_accepts_image_threats_by_either_name():
    spec = parse_spec("model: {path: m.pt}\ndata: {path: d.npz}\n"
                      "threats: [{name: ElasticAttack}, {name: jpeg-linf}, {name: linf}]\n")
    assert [(t.name, t.is_grid) for t in spec.threats] == [
        ("elastic", True), ("jpeg-linf", True), ("linf", False)]


@pytest.fixture(scope="module")
def digits_files(tmp_path_factory):
    from sklearn.datasets import load_digits

    tmp = tmp_path_factory.mktemp("img")
    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).reshape(-1, 1, 8, 8).astype(np.float32)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                              torch.nn.Linear(4 * 4 * 4, 10))
    opt = torch.optim.Adam(net.parameters(), lr=2e-2)
    xt, yt = torch.from_numpy(X[:1000]), torch.from_numpy(y[:1000])
    for _ in range(25):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(xt), yt).backward()
        opt.step()
    torch.jit.script(net.eval()).save(str(tmp / "net.pt"))
    np.savez(tmp / "test.npz", X=X[1400:1424], y=y[1400:1424])
    np.savez(tmp / "train.npz", X=X[:200], y=y[:200])
    return tmp


@pytest.fixture(scope="module")
def grid_run(digits_files):
    tmp = digits_files
    (tmp / "spec.yaml").write_text(
        "model: {path: net.pt}\n"
        "data: {path: test.npz, reference: train.npz}\n"
        "threats:\n"
        "  - {name: linf, strengths: {max: 0.3, num: 6}}\n"
        "  - {name: brightness, strengths: {max: 0.5, num: 10}}\n"
        "solver: {budget: 200}\n"
        "scores: {n_bootstrap: 20, cr: {reference: published}}\n"
        "outputs: {dir: out, store: results.sqlite}\n"
        "execution: {workers: 1}\n")
    return tmp, run_spec_file(tmp / "spec.yaml", quiet=True)


def test_run_with_grid_threats(grid_run):
    tmp, outcome = grid_run
    manifest = json.loads((tmp / "out" / "run.json").read_text())
    b = manifest["threats"]["brightness"]
    assert b["solver"] == "grid-bisection"
    grid = np.linspace(0.05, 0.5, 10)
    assert b["strengths"] == pytest.approx(grid.tolist())
    sec = next(s for s in outcome.evaluation.sections if s.name == "brightness")
    res = sec.result
    broken = res.status == "attacked"
    # grid radii are grid levels; censored inputs lie above the grid
    assert np.isin(np.round(res.radius[broken], 8), np.round(grid, 8)).all()
    assert np.isinf(res.radius[res.status == "censored"]).all()
    # every counterexample is misclassified when the model is called again
    net = torch.jit.load(str(tmp / "net.pt"))
    with torch.no_grad():
        pred = net(torch.as_tensor(res.x_adv[broken], dtype=torch.float32)).argmax(1).numpy()
    assert (pred != res.label[broken]).all()
    # queries: charged to each input, and the summary's mean is their mean
    assert (res.queries > 0).all()
    assert b["summary"]["mean_queries"] == pytest.approx(res.queries.mean())
    # CRs are keyed by the benchmark's attack names
    assert set(manifest["cr"]["single"]) == {"AutoLinfAttack", "Brightness"}
    html = outcome.report.read_text()
    assert external_references(html) == []
    alts = [i["alt"] for i in report_images(html)]
    assert sum(a.startswith("The ") and a.endswith("most fragile inputs") for a in alts) == 2


def test_compare_store_runs_keeps_grid_query_means(grid_run):
    from robustscope.runs.compare import load_run
    from robustscope.scores.comparison import compare_runs

    tmp, _ = grid_run
    manifest = json.loads((tmp / "out" / "run.json").read_text())
    run_id = manifest["threats"]["brightness"]["store_run_id"]
    from_store = load_run(str(run_id), tmp / "results.sqlite")
    from_dir = load_run(str(tmp / "out"))
    cmp = compare_runs(from_store, from_dir, n_bootstrap=0)
    a, b = cmp.metrics["brightness"]
    assert a["mean_queries"] == pytest.approx(b["mean_queries"])
    assert a["mean_queries"] == pytest.approx(
        manifest["threats"]["brightness"]["summary"]["mean_queries"])
    assert a["median_radius"] == pytest.approx(b["median_radius"])
