"""The HTML report: self-contained, every figure present and decodable, numbers from the
results, fragile inputs, and sections that say why a reading is missing."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from report_helpers import external_references, report_images, tabular_evaluation

import robustscope.report.html as html_mod
from robustscope.core.result import CENSORED, MISCLASSIFIED
from robustscope.core.space import FeatureSpace
from robustscope.report.figures import Curve, changed_features, fragile_indices
from robustscope.report.html import fmt, render_html, render_report
from robustscope.scores.evaluation import ReadingOptions, build_evaluation
from robustscope.search.engine import radius

SECTION_FIGURES = ("Flip rate against strength ε",
                   "Score before and after the perturbation, coloured by radius",
                   "Radius against g(loss), with the least-squares line",
                   "Robust accuracy against strength (markers: the grid)")


@pytest.fixture(scope="module")
def evaluation():
    return tabular_evaluation()[0]


@pytest.fixture(scope="module")
def html(evaluation):
    return render_html(evaluation, spec_text="threats: [{name: linf}]")


def test_report_is_self_contained(html):
    assert external_references(html) == []
    assert "<style>" in html


def test_every_figure_is_present_and_decodes(evaluation, html):
    images = report_images(html)
    alts = [i["alt"] for i in images]
    assert all(i["width"] > 100 and i["height"] > 100 for i in images), images
    for caption in SECTION_FIGURES:
        assert alts.count(caption) == len(evaluation.sections), caption
    assert alts.count("IsolationForest scores of clean inputs and counterexamples") == 2
    assert "Distribution of the verified radii" in alts
    assert 'class="note"' not in html.split('id="section-1"')[1].split('id="ood"')[0]


def test_summary_numbers_come_from_the_results(evaluation, html):
    linf = evaluation.sections[0]
    res = linf.result
    ok = (res.status != CENSORED) & (res.status != MISCLASSIFIED)
    assert linf.summary()["median_radius"] == pytest.approx(np.median(res.radius[ok]))
    assert linf.summary()["worst_radius"] == pytest.approx(res.radius[ok].min())
    row = html.split('id="summary-table"')[1].split("</table>")[0]
    assert fmt(np.median(res.radius[ok])) in row and fmt(res.radius[ok].min()) in row
    assert fmt(linf.scores.R_nu) in row
    l2 = evaluation.sections[1]
    n_cens = int((l2.result.status == CENSORED).sum())
    assert n_cens > 0  # the l2 search stops at max_radius 0.3
    assert f"{100 * n_cens / len(l2.result):.1f}%" in row


def test_worst_radius_is_the_scores_r_w_correct_and_r_w_is_named_apart(evaluation, html):
    """#43 item 5: the summary's worst radius is R_w_correct (well-classified inputs); R_w
    (every input, 0 as soon as one is misclassified) is labelled as such, not a bare R_w
    beside a different "worst radius"."""
    sec = evaluation.sections[0]
    assert (sec.result.status == MISCLASSIFIED).any()  # so R_w is 0 here
    assert sec.scores.R_w == 0
    assert sec.summary()["worst_radius"] == pytest.approx(sec.scores.R_w_correct)
    body = html.split('id="section-1"')[1]
    table = body.split('class="scores"')[1].split("</table>")[0]
    assert "R_w (worst, all inputs: 0 when one is misclassified)" in table
    assert "R_w_correct (worst, well-classified: the summary&#39;s worst radius)" in table \
        or "R_w_correct (worst, well-classified: the summary's worst radius)" in table
    assert fmt(sec.summary()["worst_radius"]) in table


def test_accuracy_curve_matches_robust_accuracy(evaluation):
    for sec in evaluation.sections:
        eps = np.linspace(0, sec.result.max_radius, 50)
        np.testing.assert_allclose(Curve.of("x", sec.result).accuracy(eps),
                                   sec.result.robust_accuracy(eps))


def test_fragile_inputs_table_lists_the_changed_features(evaluation, html):
    sec = evaluation.sections[0]
    idx = fragile_indices(sec.result, 5)
    ok = np.flatnonzero((sec.result.status != CENSORED) & (sec.result.status != MISCLASSIFIED))
    assert sec.result.radius[idx[0]] == sec.result.radius[ok].min()
    changes = changed_features(evaluation.X[idx[0]], sec.result.x_adv[idx[0]],
                               evaluation.space.names, evaluation.space.scale)
    assert changes, "a counterexample must change some feature"
    delta = (sec.result.x_adv[idx[0]] - evaluation.X[idx[0]]) / evaluation.space.scale
    assert max(abs(c["scaled"]) for c in changes) == pytest.approx(np.abs(delta).max())
    # Linf: the largest change equals the radius
    assert np.abs(delta).max() == pytest.approx(sec.result.radius[idx[0]], rel=1e-6)
    fragile = html.split('id="fragile"')[1]
    assert f"input #{int(sec.result.sample[idx[0]])}" in fragile
    assert changes[0]["name"] in fragile


def test_missing_readings_leave_a_note_not_a_number(monkeypatch, tmp_path):
    ev, _ = tabular_evaluation(n=20, n_bootstrap=0)
    results = {s.name: s.result for s in ev.sections}
    # no reference data: no out-of-distribution reading; a figure that fails to draw
    ev = build_evaluation(ev.title, results, ev.X, ev.y, ev.space, None,
                          ReadingOptions(n_bootstrap=0))

    def broken(*args, **kwargs):
        raise RuntimeError("no canvas")

    monkeypatch.setattr(html_mod, "flip_rate_figure", broken)
    path = render_report(ev, tmp_path / "r.html")
    text = path.read_text()
    assert "no reference (training) data was given" in text
    assert "Flip rate against strength ε: could not be drawn (RuntimeError: no canvas)" in text
    assert "Proxy-A distance:" not in text
    assert all(i["width"] > 0 for i in report_images(text))


def test_image_report_shows_fragile_images(tmp_path):
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    keep = y < 2
    X, y = (X[keep] / 16.0).reshape(-1, 1, 8, 8)[:30], y[keep][:30]
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 2))
    opt = torch.optim.Adam(net.parameters(), lr=0.05)
    xt, yt = torch.tensor(X, dtype=torch.float32), torch.tensor(y)
    for _ in range(60):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(xt), yt).backward()
        opt.step()
    res = radius(net.eval(), X, y, threat="linf", budget=300)
    ev = build_evaluation("digits", {"linf": res}, X, y, FeatureSpace.box(X.shape[1:]),
                          X.reshape(len(X), -1)[:20], ReadingOptions(n_bootstrap=0, fragile=3))
    assert ev.is_image
    text = render_report(ev, tmp_path / "img.html").read_text()
    alts = [i["alt"] for i in report_images(text)]
    n_fragile = len(fragile_indices(res, 3))
    assert n_fragile > 0
    assert f"The {n_fragile} most fragile inputs" in alts
    assert external_references(text) == []


def test_report_when_nothing_is_broken(tmp_path):
    """Every input censored (tiny max_radius): no radius is averaged, the report says so and
    still renders every figure it can."""
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y = load_breast_cancer(return_X_y=True)
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000)).fit(X, y)
    space = FeatureSpace.from_data(X)
    keep = model.predict(X[:30]) == y[:30]
    Xs, ys = X[:30][keep], y[:30][keep]
    res = radius(model, Xs, ys, threat="linf", space=space, max_radius=1e-6)
    assert (res.status == CENSORED).all()
    ev = build_evaluation("nothing broken", {"linf": res}, Xs, ys, space, X,
                          ReadingOptions(n_bootstrap=20))
    s = ev.sections[0].summary()
    assert s["censored_share"] == 1.0 and np.isnan(s["median_radius"])
    text = render_report(ev, tmp_path / "r.html").read_text()
    assert "Score scatter: no counterexample was found" in text
    assert "no counterexample was found" in text.split('id="ood"')[1]
    assert "no verified counterexample among well-classified inputs" in text
    assert "could not be drawn" not in text
    assert all(i["width"] > 0 for i in report_images(text))
