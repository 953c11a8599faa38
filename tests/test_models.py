"""Model adapters: wrapping, query counting and clear errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robustscope import InputError, ModelError, wrap_model
from robustscope.models import LinearClassifier, ProbaClassifier, QueryLedger, TorchClassifier
from robustscope.models.metered import MeteredModel
from robustscope.search.engine import radius


def test_wrap_recognises_each_kind(breast_cancer, digits_mlp):
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression, SGDClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import LinearSVC

    X, y = breast_cancer
    assert isinstance(wrap_model(digits_mlp, example=np.zeros((2, 64))), TorchClassifier)
    for est in (LogisticRegression(max_iter=50), LinearSVC(max_iter=50), SGDClassifier()):
        model = wrap_model(est.fit(X / X.max(0), y))
        assert isinstance(model, LinearClassifier) and model.is_linear
    forest = wrap_model(RandomForestClassifier(n_estimators=3).fit(X, y))
    assert forest.is_tree_ensemble and not forest.differentiable
    assert isinstance(wrap_model(lambda x: np.full((len(x), 2), 0.5), n_classes=2),
                      ProbaClassifier)
    assert isinstance(wrap_model((np.ones((3, 4)), np.zeros(3))), LinearClassifier)
    pipe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit(X, y)
    folded = wrap_model(pipe)
    assert folded.is_linear
    np.testing.assert_allclose(folded.predict_proba(torch.tensor(X)).numpy(),
                               pipe.predict_proba(X), atol=1e-10)


def test_binary_linear_logits_reproduce_sklearn_probabilities(breast_cancer):
    from sklearn.linear_model import LogisticRegression

    X, y = breast_cancer
    X = X / X.max(0)
    lr = LogisticRegression(max_iter=1000).fit(X, y)
    model = wrap_model(lr)
    np.testing.assert_allclose(model.predict_proba(torch.tensor(X)).numpy(),
                               lr.predict_proba(X), atol=1e-12)


def test_wrap_rejects_what_it_cannot_wrap():
    with pytest.raises(ModelError, match="cannot wrap an object of type builtins.str"):
        wrap_model("not a model")
    with pytest.raises(ModelError, match="pass n_classes= or example="):
        wrap_model(lambda x: x)


def test_non_probabilities_are_refused():
    def raw_scores(x):
        return np.c_[x[:, 0], -x[:, 0]] * 3.0

    model = ProbaClassifier(raw_scores, 2)
    with pytest.raises(ModelError, match="non-probabilities"):
        model.predict(torch.ones(3, 2, dtype=torch.float64))


def test_model_that_raises_is_reported():
    def broken(x):
        raise ValueError("feature 7 missing")

    model = ProbaClassifier(broken, 2)
    with pytest.raises(ModelError, match="raised ValueError: feature 7 missing"):
        model.predict(torch.ones(1, 3, dtype=torch.float64))


def test_queries_are_counted_per_input_and_budget_raises():
    from robustscope.core.errors import BudgetExhausted

    model = ProbaClassifier(lambda x: np.full((len(x), 2), 0.5), 2)
    ledger = QueryLedger(4, budget=5)
    x = torch.zeros(2, 3, dtype=torch.float64)
    view = MeteredModel(model, ledger, np.array([1, 3]))
    view.logits(x)
    view.logits(torch.zeros(6, 3, dtype=torch.float64))  # 3 rows per input
    assert ledger.forward.tolist() == [0, 4, 0, 4]
    with pytest.raises(BudgetExhausted):
        MeteredModel(model, ledger, np.array([1, 3])).logits(
            torch.zeros(4, 3, dtype=torch.float64))


def test_finite_differences_use_the_given_per_feature_step():
    w = np.array([[0.0, 0.0], [2.0, -3e-4]])

    def proba(x):
        z = x @ w.T
        e = np.exp(z - z.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    model = ProbaClassifier(proba, 2)
    x = torch.tensor([[0.1, 500.0]], dtype=torch.float64)
    step = torch.tensor([1e-4, 1.0], dtype=torch.float64)  # per-feature, in original units
    _, _, grad = model.value_and_grad(x, lambda lg: lg[:, 1] - lg[:, 0], fd_step=step)
    np.testing.assert_allclose(grad.numpy(), [[2.0, -3e-4]], rtol=1e-5)


@pytest.mark.parametrize("bad_y, message", [
    (np.array([0, 1, 5]), "row 2 has label 5"),
    (np.array([0, 1]), r"y must have shape \(3,\)"),
])
def test_labels_are_checked(bad_y, message):
    model = LinearClassifier(np.eye(2, 4), np.zeros(2))
    with pytest.raises(InputError, match=message):
        radius(model, np.full((3, 4), 0.5), bad_y)


def test_sklearn_labels_are_mapped_through_classes(breast_cancer):
    from sklearn.linear_model import LogisticRegression

    X, y = breast_cancer
    X = X / X.max(0)
    names = np.where(y == 1, "benign", "malignant")
    lr = LogisticRegression(max_iter=1000).fit(X, names)
    res = radius(lr, X[:10], names[:10])
    assert set(res.to_dataframe()["label"]) <= {"benign", "malignant"}
    with pytest.raises(InputError, match="row 0 has label 'other'"):
        radius(lr, X[:2], np.array(["other", "benign"]))


def test_nan_input_is_named(digits_mlp):
    X = np.full((3, 64), 0.5)
    X[2, 7] = np.nan
    with pytest.raises(InputError, match="row 2, feature 7 is nan"):
        radius(digits_mlp, X, np.zeros(3, dtype=int))
