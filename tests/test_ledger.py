"""One ledger: on every path, the ``queries`` reported per input are the rows the model really
evaluated, and no input is charged past its budget.

Each test counts rows independently of the ledger: at the model's own evaluation (the
adapter's ``_logits``, a scikit-learn ``predict_proba``, a torch forward/backward hook), and
compares with what the result reports.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.datasets import load_breast_cancer, load_digits, make_classification
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression

import robustscope as rs
from robustscope.models.base import QueryLedger
from robustscope.models.estimators import FiniteDifference, nes
from robustscope.models.metered import MeteredModel
from robustscope.search.random_directions import random_directions_radius


class RowCounter:
    """Counts the rows (and calls) that reach a function."""

    def __init__(self, fn):
        self.fn, self.rows, self.calls = fn, 0, 0

    def __call__(self, x, *args, **kwargs):
        self.rows += len(x)
        self.calls += 1
        return self.fn(x, *args, **kwargs)


def _counted(clf: rs.Classifier) -> RowCounter:
    """Count the rows the adapter evaluates (its ``_logits``, below every accounting)."""
    counter = RowCounter(clf._logits)
    clf._logits = counter
    return counter


def _assert_true_counts(result, seen_forward: int, budget: int | None = None) -> None:
    q = result.forward_queries + result.backward_queries
    assert int(result.forward_queries.sum()) == seen_forward
    if budget is not None:
        assert q.max() <= budget


@pytest.fixture(scope="module")
def cancer():
    X, y = load_breast_cancer(return_X_y=True)
    return X[:300], y[:300], X[300:310], y[300:310]


def test_exact_trees_charge_every_model_call(cancer):
    """The issue's case: a random forest, 10 inputs, budget 4 (the MILP's verifications and
    the clean predictions were made outside the ledger: the model saw 53 rows, queries summed
    to 20)."""
    Xtr, ytr, X, y = cancer
    forest = RandomForestClassifier(n_estimators=5, max_depth=3, random_state=0).fit(Xtr, ytr)
    seen = RowCounter(forest.predict_proba)
    forest.predict_proba = seen
    clf = rs.wrap_model(forest)
    space = rs.FeatureSpace.from_data(np.vstack([Xtr, X]))
    for budget in (4, None):
        seen.rows = 0
        res = rs.radius(clf, X, y, threat="linf", space=space, budget=budget)
        _assert_true_counts(res, seen.rows, budget)
        assert (res.status == "exact").any()


def test_exact_tree_solver_alone_counts_its_calls(cancer):
    from robustscope.solvers.exact.trees.driver import exact_tree_radius

    Xtr, ytr, X, y = cancer
    forest = RandomForestClassifier(n_estimators=3, max_depth=3, random_state=0).fit(Xtr, ytr)
    labels = forest.predict(X)
    seen = RowCounter(forest.predict_proba)
    forest.predict_proba = seen
    space = rs.FeatureSpace.from_data(np.vstack([Xtr, X]))
    res = exact_tree_radius(forest, X, labels, space, "linf")
    assert int(res.forward_queries.sum()) == seen.rows > 0


def test_exact_linear_and_its_verification(cancer):
    Xtr, ytr, X, y = cancer
    model = LogisticRegression(max_iter=5000).fit(Xtr, ytr)
    clf = rs.wrap_model(model)
    seen = _counted(clf)
    res = rs.radius(clf, X, y, threat="l2", space=rs.FeatureSpace.from_data(Xtr))
    _assert_true_counts(res, seen.rows)


def _digits_mlp():
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 16), torch.nn.ReLU(), torch.nn.Linear(16, 10))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    xt, yt = torch.as_tensor(X[:500], dtype=torch.float32), torch.as_tensor(y[:500])
    for _ in range(150):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(xt), yt).backward()
        opt.step()
    return net.double(), X[500:506], y[500:506]


def _torch_counters(net: torch.nn.Module) -> dict:
    seen = {"forward": 0, "backward": 0}

    def forward_hook(_module, inputs, _output):
        seen["forward"] += inputs[0].shape[0]

    def backward_hook(_module, _grad_in, grad_out):
        seen["backward"] += grad_out[0].shape[0]

    net.register_forward_hook(forward_hook)
    net.register_full_backward_hook(backward_hook)
    return seen


@pytest.mark.parametrize("solver", ["auto", "pgd", "exact"])
def test_white_box_paths_count_forward_and_backward_passes(solver):
    net, X, y = _digits_mlp()
    seen = _torch_counters(net)
    budget = 150 if solver == "pgd" else None
    res = rs.radius(net, X, y, threat="linf", space=rs.FeatureSpace.box((64,)), solver=solver,
                    budget=budget)
    _assert_true_counts(res, seen["forward"], budget)
    assert int(res.backward_queries.sum()) == seen["backward"] > 0


def test_black_box_cascade_counts_every_row():
    X, y = make_classification(n_samples=200, n_features=6, random_state=0)
    model = RandomForestClassifier(n_estimators=5, random_state=0).fit(X[:150], y[:150])
    seen = RowCounter(model.predict_proba)
    res = rs.radius(seen, X[150:158], y[150:158], threat="l2",
                    space=rs.FeatureSpace.from_data(X), budget=300)
    _assert_true_counts(res, seen.rows, 300)


def test_a_black_box_budget_above_the_default_is_spent():
    """``budget=`` is the black box's ceiling, not the default's 5,000: a tree's plateaus keep
    every stage busy, so its inputs spend past 5,000 queries when they may."""
    from robustscope.search.cascade import BLACKBOX_BUDGET

    rng = np.random.default_rng(0)
    X = rng.uniform(size=(200, 4))
    y = (X[:, 0] + X[:, 1] * X[:, 2] > 0.8).astype(int)
    model = RandomForestClassifier(n_estimators=3, max_depth=5, random_state=0).fit(X, y)
    seen = RowCounter(model.predict_proba)
    budget = BLACKBOX_BUDGET + 1000
    res = rs.radius(seen, X[:2], model.predict(X[:2]), threat="l2",
                    space=rs.FeatureSpace.box(4), budget=budget)
    _assert_true_counts(res, seen.rows, budget)
    assert res.queries.max() > BLACKBOX_BUDGET


def test_random_directions_radius_counts_every_row():
    net, X, y = _digits_mlp()
    clf = rs.wrap_model(net, n_classes=10, input_shape=(64,))
    seen = _counted(clf)
    res = random_directions_radius(clf, X, y, "l2", rs.FeatureSpace.box((64,)),
                                   n_directions=50, max_radius=4.0)
    _assert_true_counts(res, seen.rows)


def test_grid_search_charges_each_input():
    from robustscope.models.toy import stripes_dataset, tiny_cnn

    X, y = stripes_dataset(8, seed=0)
    net = tiny_cnn(n_classes=4, seed=0).double()
    seen = _torch_counters(net)
    res = rs.grid_robustness(net, torch.as_tensor(X), y, "linf", grid=[0.01, 0.03, 0.1],
                             steps=3)
    assert int(res.forward_queries.sum()) == seen["forward"] > 0
    assert int(res.backward_queries.sum()) == seen["backward"] > 0
    assert res.forward_queries.shape == (8,)


@pytest.mark.parametrize("estimator", [FiniteDifference(1e-3), nes(samples=4)])
def test_gradient_estimators_charge_their_probes(estimator):
    X, y = make_classification(n_samples=60, n_features=5, random_state=1)
    model = LogisticRegression().fit(X, y)
    clf = rs.wrap_model(model.predict_proba, n_classes=2)
    seen = _counted(clf)
    ledger = QueryLedger(4)
    x = torch.as_tensor(X[:4])
    estimator(clf, x, lambda z: z[:, 1] - z[:, 0], ledger=ledger)
    assert int(ledger.forward.sum()) == seen.rows > 0


def test_a_call_past_the_budget_is_refused_and_charges_nothing():
    clf = rs.wrap_model(lambda a: np.full((len(a), 2), 0.5), n_classes=2)
    seen = _counted(clf)
    ledger = QueryLedger(2, budget=3)
    view = MeteredModel(clf, ledger, np.arange(2))
    view.logits(torch.zeros(6, 1, dtype=torch.float64))  # 3 rows each: the whole budget
    with pytest.raises(rs.RobustscopeError, match="budget"):
        view.logits(torch.zeros(2, 1, dtype=torch.float64))
    assert ledger.used().tolist() == [3, 3] and seen.rows == 6


def test_repeated_owners_are_charged_once_per_row_and_held_to_the_budget():
    clf = rs.wrap_model(lambda a: np.full((len(a), 2), 0.5), n_classes=2)
    ledger = QueryLedger(2, budget=4)
    view = MeteredModel(clf, ledger, np.array([0, 0, 1]))
    view.logits(torch.zeros(3, 1, dtype=torch.float64))
    assert ledger.forward.tolist() == [2, 1]
    view.logits(torch.zeros(3, 1, dtype=torch.float64))  # input 0 at its budget of 4
    with pytest.raises(rs.RobustscopeError, match="budget"):
        view.logits(torch.zeros(3, 1, dtype=torch.float64))
    assert ledger.forward.tolist() == [4, 2]
