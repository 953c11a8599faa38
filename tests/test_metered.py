"""Model adapters hold no per-call state: a call is charged through a metered view made for
it (models/metered.py), and the search's policy (search/metering.py, search/threads.py)
decides the binding and the threads."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.datasets import make_classification
from sklearn.ensemble import GradientBoostingClassifier
from sklearn.linear_model import LogisticRegression

import robustscope as rs
from robustscope.core.errors import BudgetExhausted
from robustscope.models.base import QueryLedger
from robustscope.models.metered import MeteredModel
from robustscope.search.metering import charged


@pytest.fixture(scope="module")
def data():
    X, y = make_classification(n_samples=120, n_features=5, n_informative=3, random_state=0)
    return X.astype(np.float64), y


def _adapters(X, y):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(),
                              torch.nn.Linear(8, 2)).double()
    lr = LogisticRegression(max_iter=500).fit(X, y)
    gb = GradientBoostingClassifier(n_estimators=5, max_depth=2, random_state=0).fit(X, y)
    return {"torch": rs.wrap_model(net, example=X[:4]),
            "linear": rs.wrap_model(lr),
            "trees": rs.wrap_model(gb),
            "black box": rs.wrap_model(lambda a: lr.predict_proba(a), n_classes=2)}


@pytest.mark.parametrize("kind", ["torch", "linear", "trees", "black box"])
def test_a_search_leaves_the_adapter_as_it_was(data, kind):
    X, y = data
    clf = _adapters(X, y)[kind]
    before = dict(clf.__dict__)
    labels = clf.predict(torch.as_tensor(X[:4])).numpy()
    for budget in (None, 40):
        res = rs.radius(clf, X[:4], labels, budget=budget, seed=0)
        assert res.forward_queries.sum() > 0
    assert clf.__dict__.keys() == before.keys()
    assert all(clf.__dict__[k] is v for k, v in before.items())  # nothing reassigned
    assert clf.thread_count is None or clf.thread_count.value is None
    assert not isinstance(clf, MeteredModel)


def test_interleaved_views_charge_their_own_ledgers(data):
    X, y = data
    clf = _adapters(X, y)["black box"]
    x = torch.as_tensor(X[:3])
    la, lb = QueryLedger(3), QueryLedger(3, budget=4)
    a = MeteredModel(clf, la, np.array([0, 1]))
    b = MeteredModel(clf, lb, np.array([2]))
    a.logits(x[:2])
    b.logits(x[2:])
    a.value_and_grad(x[:2], lambda z: z[:, 1])  # finite differences through the view
    b.logits(torch.cat([x[2:]] * 3))
    assert la.forward.tolist() == [1 + 2 * 5 + 1] * 2 + [0]
    assert lb.forward.tolist() == [0, 0, 4]
    with pytest.raises(BudgetExhausted):  # b's input is at its budget; a's is not
        b.logits(x[2:])
    a.logits(x[:2])
    assert la.forward.tolist() == [13, 13, 0] and lb.forward.tolist() == [0, 0, 4]
    # new views, never a changed one
    narrow = a.narrowed(np.array([1]))
    assert narrow is not a and narrow.owners.tolist() == [1] and a.owners.tolist() == [0, 1]
    narrow.logits(x[1:2])
    assert la.forward.tolist() == [13, 14, 0]
    moved = a.charged_to(np.array([2]))
    moved.logits(x[2:])
    assert la.forward.tolist() == [13, 14, 1]
    assert a.forward_rows == 2 + 2 * 11 + 2 and b.forward_rows == 4


def test_a_view_delegates_the_adapters_description(data):
    X, y = data
    clf = _adapters(X, y)["linear"]
    view = MeteredModel(clf, QueryLedger(2), np.arange(2))
    for name in ("n_classes", "input_shape", "device", "dtype", "name", "differentiable",
                 "is_linear", "feature_names", "classes"):
        got, want = getattr(view, name), getattr(clf, name)
        assert got is want or np.array_equal(got, want), name
    w, b = view.linear_parameters()
    np.testing.assert_array_equal(w, clf.linear_parameters()[0])
    assert view.gradient_cost(5) == clf.gradient_cost(5)
    assert MeteredModel(view).adapter is clf  # a view of a view binds the same adapter


def test_the_search_view_applies_the_thread_policy_and_autograd_is_charged(data):
    from robustscope.search.threads import fit_threads

    X, y = data
    clf = _adapters(X, y)["torch"]
    assert charged(clf, QueryLedger(2)).threads is fit_threads  # the search's policy
    ledger = QueryLedger(2)
    seen = []
    view = MeteredModel(clf, ledger, np.arange(2), threads=lambda n, m: seen.append((n, m)))
    view.value_and_grad(torch.as_tensor(X[:2]), lambda z: z[:, 0])
    assert seen == [(10, clf)]  # rows x features, with the adapter (for its thread setter)
    assert ledger.forward.tolist() == [1, 1] and ledger.backward.tolist() == [1, 1]
    assert view.narrowed(np.array([0])).threads is view.threads


def test_the_wrapping_probe_is_charged_by_the_first_search_only(data):
    X, y = data
    clf = _adapters(X, y)["torch"]  # wrapped with example=: called on 2 rows to learn k
    assert clf.probed_rows == 2
    labels = clf.predict(torch.as_tensor(X[:4])).numpy()
    first = rs.radius(clf, X[:4], labels, budget=20, seed=0)
    again = rs.radius(clf, X[:4], labels, budget=20, seed=0)
    assert first.meta["passes_by_part"]["wrapping probe"] == 2
    assert "wrapping probe" not in again.meta["passes_by_part"]
    assert clf.probed_rows == 2  # a fact of the wrapping, never reset
