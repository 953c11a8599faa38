"""Radius search: verified counterexamples, censoring, budgets, seeds, statements."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robustscope import FeatureSpace, InputError, Statement
from robustscope.models import LinearClassifier, ProbaClassifier
from robustscope.search.engine import radius
from robustscope.solvers.exact.linear.closed_form import exact_linear_radius
from robustscope.threats import get_threat

NORM_ORD = {"linf": np.inf, "l2": 2, "l1": 1}


def _check_counterexamples(model, res, X, y, space, threat):
    """Every non-censored radius is backed by a counterexample the model confirms."""
    found = res.status != "censored"
    flat = res.x_adv.reshape(len(X), -1)
    space.check_data(res.x_adv[found], what="counterexamples")
    # each counterexample called alone, as the search confirms it (#42 item 6): in float32 a
    # point within ~1e-6 of the boundary may flip in one batch composition and not in another
    with torch.no_grad():
        pred = np.array([int(model(torch.tensor(row[None], dtype=torch.float32)).argmax(1))
                         for row in res.x_adv[found]], dtype=np.int64)
    assert (pred != y[found]).all()
    u = (flat - X.reshape(len(X), -1)) / space.scale
    size = np.linalg.norm(u[found], ord=NORM_ORD[threat], axis=1)
    np.testing.assert_allclose(size, res.radius[found], rtol=1e-9, atol=1e-12)
    assert np.isinf(res.radius[~found]).all()


@pytest.mark.parametrize("threat", ["linf", "l2", "l1"])
def test_mlp_counterexamples_are_verified(digits, digits_mlp, threat):
    X, y = digits[0][:40], digits[1][:40]
    space = FeatureSpace.box(64)
    res = radius(digits_mlp, X, y, threat=threat, space=space, seed=0)
    assert (res.status != "censored").mean() > 0.9
    _check_counterexamples(digits_mlp, res, X, y, space, threat)
    # a certificate only where bound propagation was cheap enough, always below the radius
    assert ((res.lower_bound >= 0) & (res.lower_bound <= res.radius)).all()


@pytest.mark.parametrize("threat", ["linf", "l2", "l1"])
def test_attack_never_beats_and_nearly_matches_the_exact_linear_radius(digits, threat):
    # a linear model hidden inside a torch module: the search must not know it is linear
    from sklearn.linear_model import LogisticRegression

    X, y = digits
    lr = LogisticRegression(max_iter=500).fit(X[:500], y[:500])
    module = torch.nn.Linear(64, 10).double()
    module.weight.data = torch.tensor(lr.coef_)
    module.bias.data = torch.tensor(lr.intercept_)
    Xs, ys = X[500:560], y[500:560]
    space = FeatureSpace.box(64)
    # (certify="crown": under "auto" whether CROWN runs depends on its measured time)
    res = radius(module, Xs, ys, threat=threat, space=space, certify="crown")
    exact = exact_linear_radius(lr.coef_, lr.intercept_, Xs, ys, space, get_threat(threat))
    ok = np.isin(res.status, ["attacked", "exact"])
    assert ok.sum() >= 50
    ratio = res.radius[ok] / exact.radius[ok]
    assert ratio.min() >= 1 - 1e-6
    assert np.median(ratio) <= 1.02
    # bound propagation is exact on a network without ReLUs: certified <= exact, and tight
    assert (res.lower_bound[ok] <= exact.radius[ok] * (1 + 1e-9)).all()
    assert np.median(res.lower_bound[ok] / exact.radius[ok]) >= 0.99


def test_misclassified_inputs_get_radius_zero(digits, digits_mlp):
    X, y = digits[0][:30], digits[1][:30].copy()
    y[:5] = (y[:5] + 1) % 10
    res = radius(digits_mlp, X, y, threat="linf", space=FeatureSpace.box(64))
    assert (res.status[:5] == "misclassified").all()
    assert (res.radius[:5] == 0).all() and (res.lower_bound[:5] == 0).all()
    np.testing.assert_array_equal(res.x_adv[:5], X[:5])


def test_unbroken_inputs_are_censored_and_never_averaged(digits, digits_mlp):
    X, y = digits[0][:30], digits[1][:30]
    res = radius(digits_mlp, X, y, threat="linf", space=FeatureSpace.box(64), max_radius=1e-3)
    correct = res.status != "misclassified"
    assert correct.sum() >= 25
    assert (res.status[correct] == "censored").all()
    assert np.isinf(res.radius[correct]).all()
    np.testing.assert_array_equal(res.x_adv[correct], X[correct])  # no counterexample kept
    assert np.isnan(res.summary()["median_radius"])
    assert np.isnan(res.robust_accuracy([2e-3])).all()  # beyond what was tried
    assert res.robust_accuracy([5e-4])[0] == correct.mean()


def test_budget_is_enforced_per_input(digits, digits_mlp):
    X, y = digits[0][:20], digits[1][:20]
    res = radius(digits_mlp, X, y, threat="l2", space=FeatureSpace.box(64), budget=150)
    assert res.queries.max() <= 150
    attacked = res.status != "misclassified"
    assert (res.backward_queries[attacked] >= 1).all()
    assert (res.status[attacked] == "attacked").mean() > 0.8  # the plan fits the budget


def test_same_seed_same_numbers(digits, digits_mlp):
    X, y = digits[0][:15], digits[1][:15]
    a = radius(digits_mlp, X, y, threat="linf", space=FeatureSpace.box(64), seed=3)
    b = radius(digits_mlp, X, y, threat="linf", space=FeatureSpace.box(64), seed=3)
    np.testing.assert_array_equal(a.radius, b.radius)
    np.testing.assert_array_equal(a.x_adv, b.x_adv)


def test_targeted_statement_reaches_the_target(digits, digits_mlp):
    X, y = digits[0][:20], digits[1][:20]
    keep = y != 3
    res = radius(digits_mlp, X[keep], y[keep], threat="l2", space=FeatureSpace.box(64),
                 statement=Statement(target=3), solver="minnorm")
    found = res.status == "attacked"
    assert found.mean() > 0.8
    assert (res.adv_prediction[found] == 3).all()


def test_pgd_double_then_bisect_brackets_within_tolerance(digits, digits_mlp):
    X, y = digits[0][:20], digits[1][:20]
    space = FeatureSpace.box(64)
    res = radius(digits_mlp, X, y, threat="linf", space=space, solver="pgd", rtol=0.01)
    found = res.status == "attacked"
    assert found.mean() > 0.9
    best = radius(digits_mlp, X, y, threat="linf", space=space, solver="auto")
    assert np.median(res.radius[found] / best.radius[found]) < 1.05


def test_blackbox_model_with_feature_types(breast_cancer):
    from sklearn.ensemble import RandomForestClassifier

    X, y = breast_cancer
    X = X.copy()
    X[:, 0] = np.round(X[:, 0])  # an integer feature
    forest = RandomForestClassifier(n_estimators=20, random_state=0).fit(X, y)
    model = ProbaClassifier(forest.predict_proba, 2, classes=forest.classes_)  # a black box
    space = FeatureSpace.from_data(X, types={"0": "integer"}, immutable=["1"])
    res = radius(model, X[:30], y[:30], threat="linf", space=space)
    found = res.status == "attacked"
    assert found.sum() >= 20
    space.check_data(res.x_adv)
    assert (forest.predict(res.x_adv[found]) != y[:30][found]).all()
    np.testing.assert_array_equal(res.x_adv[:, 1], X[:30, 1])


def test_exact_solver_refuses_models_it_cannot_solve(digits, digits_mlp):
    with pytest.raises(InputError, match="needs a linear model, a tree ensemble"):
        radius(digits_mlp, digits[0][:5], digits[1][:5], threat="l2", solver="exact")
    blind = ProbaClassifier(lambda x: np.full((len(x), 10), 0.1), 10)
    with pytest.raises(InputError, match="needs a linear model, a tree ensemble"):
        radius(blind, digits[0][:5], digits[1][:5], solver="exact")


@pytest.mark.parametrize("kwargs, message", [
    ({"solver": "magic"}, "solver 'magic'"),
    ({"threat": "l3"}, "threat 'l3'"),
    ({"rtol": 0}, "rtol"),
    ({"budget": 0}, "budget"),
    ({"max_radius": -1.0}, "max_radius"),
])
def test_bad_arguments_are_named(digits, kwargs, message):
    model = LinearClassifier(np.eye(2, 64), np.zeros(2))
    with pytest.raises(InputError, match=message):
        radius(model, digits[0][:3], np.array([0, 1, 0]), **kwargs)


def test_auto_falls_back_to_attacks_for_targeted_multiclass_linear(digits):
    from sklearn.linear_model import LogisticRegression

    X, y = digits
    lr = LogisticRegression(max_iter=500).fit(X[:400], y[:400])
    keep = lr.predict(X[400:430]) != 5
    res = radius(lr, X[400:430][keep], lr.predict(X[400:430])[keep], threat="l2",
                 space=FeatureSpace.box(64), statement=Statement(target=5))
    found = res.status == "attacked"
    assert found.mean() > 0.8
    assert (lr.predict(res.x_adv[found]) == 5).all()


def test_tree_ensembles_get_exact_radii_and_black_boxes_stay_above(breast_cancer):
    from sklearn.ensemble import RandomForestClassifier

    X, y = breast_cancer
    forest = RandomForestClassifier(n_estimators=15, max_depth=4, random_state=0).fit(X, y)
    space = FeatureSpace.from_data(X)
    exact = radius(forest, X[:25], y[:25], threat="linf", space=space)
    correct = exact.status != "misclassified"
    assert (exact.status[correct] == "exact").all()
    assert exact.meta["exact_solver"] == "trees"
    assert (forest.predict(exact.x_adv[correct]) != y[:25][correct]).all()
    blind = ProbaClassifier(forest.predict_proba, 2, classes=forest.classes_)
    attacked = radius(blind, X[:25], y[:25], threat="linf", space=space, budget=2000)
    both = correct & (attacked.status == "attacked")
    assert both.sum() >= 20
    assert (attacked.radius[both] >= exact.lower_bound[both] * (1 - 1e-9)).all()
