"""What a new user hits first (issue #17): named data, statuses of targeted statements,
float32 probabilities, weak attacks on non-differentiable models."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_wine

from robustscope import InputError, load_model, wrap_model
from robustscope.search.engine import radius


@pytest.fixture(scope="module")
def wine_frame():
    X, y = load_wine(return_X_y=True, as_frame=True)
    return X.iloc[:, :5], y.to_numpy()


def _xgboost(X, y):
    xgb = pytest.importorskip("xgboost")
    return xgb.XGBClassifier(n_estimators=5, max_depth=2, random_state=0).fit(X, y)


def _lightgbm(X, y):
    lgb = pytest.importorskip("lightgbm")
    return lgb.LGBMClassifier(n_estimators=5, verbose=-1, random_state=0).fit(X, y)


def _forest(X, y):
    from sklearn.ensemble import RandomForestClassifier

    return RandomForestClassifier(n_estimators=3, random_state=0).fit(X, y)


def _column_pipeline(X, y):
    """A pipeline that selects columns by name: it cannot be called on a bare array."""
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    cols = ColumnTransformer([("s", StandardScaler(), list(X.columns))])
    return make_pipeline(cols, LogisticRegression(max_iter=500)).fit(X, y)


@pytest.mark.parametrize("fit", [_xgboost, _lightgbm, _forest, _column_pipeline])
def test_models_fitted_on_named_data_take_arrays_and_frames(wine_frame, fit):
    X, y = wine_frame
    model = fit(X, y)
    assert wrap_model(model, example=X.to_numpy()[:2]).feature_names == list(X.columns)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # "X does not have valid feature names"
        from_array = radius(model, X.to_numpy()[:6], y[:6], budget=300)
        # a DataFrame's columns are matched by name, whatever their order
        from_frame = radius(model, X.iloc[:6, ::-1], y[:6], budget=300)
    np.testing.assert_array_equal(from_array.prediction, from_frame.prediction)
    np.testing.assert_allclose(from_array.radius, from_frame.radius)
    assert from_array.summary()["clean_accuracy"] > 0.5


def test_a_missing_or_unknown_column_is_named(wine_frame):
    X, y = wine_frame
    model = _xgboost(X, y)
    with pytest.raises(InputError, match="missing column.*alcohol"):
        radius(model, X.iloc[:4, 1:], y[:4])
    extra = X.iloc[:4].assign(colour=1.0)
    with pytest.raises(InputError, match="unknown column.*colour"):
        radius(model, extra, y[:4])


def test_a_saved_booster_with_names_loads_and_runs(wine_frame, tmp_path):
    X, y = wine_frame
    model = _xgboost(X, y)
    path = tmp_path / "m.json"
    model.save_model(path)
    loaded = load_model(path)
    assert loaded.feature_names == list(X.columns)
    res = radius(loaded, X.iloc[:5], y[:5])
    assert set(res.status) <= {"exact", "misclassified"}


def test_lightgbm_default_names_are_no_names(wine_frame):
    X, y = wine_frame
    model = _lightgbm(X.to_numpy(), y)
    assert wrap_model(model).feature_names is None
    # a frame with any column names is taken in its order
    res = radius(model, X.iloc[:3], y[:3], budget=200)
    assert len(res) == 3


# -- item 7: probability checks follow the returned precision ---------------------------------
def _float32_proba(x):
    """Probabilities in float32 whose rows sum to 1.0000001 (as skl2onnx forests return)."""
    p = np.zeros((len(x), 2), dtype=np.float32)
    p[:, 0] = np.float32(1.0000001)
    p[x[:, 0] > 0.5] = np.array([0.0, 1.0000001], dtype=np.float32)
    return p


def test_float32_probabilities_within_their_rounding_are_accepted():
    X = np.random.default_rng(0).uniform(size=(6, 2))
    model = wrap_model(_float32_proba, n_classes=2)
    assert model.probabilities_numpy(X).shape == (6, 2)
    y = (X[:, 0] > 0.5).astype(int)
    res = radius(_float32_proba, X, y, budget=200)
    assert not (res.status == "misclassified").any()


def test_float64_bounds_are_tight_and_float32_still_refuses_far_rows():
    from robustscope import ModelError

    X = np.zeros((2, 2))
    above64 = wrap_model(lambda x: np.tile([1 + 1e-6, -1e-6], (len(x), 1)), n_classes=2)
    with pytest.raises(ModelError, match="non-probabilities"):
        above64.probabilities_numpy(X)
    rounded = wrap_model(lambda x: np.tile([0.333, 0.333, 0.333], (len(x), 1)), n_classes=3)
    assert rounded.probabilities_numpy(X).shape == (2, 3)  # rounded rows still sum to ~1
    off32 = wrap_model(lambda x: np.full((len(x), 2), 0.51, dtype=np.float32), n_classes=2)
    with pytest.raises(ModelError, match="non-probabilities"):
        off32.probabilities_numpy(X)


def _onnx_per_column(path, names):
    """A softmax-linear ONNX model with one float input per named column and float32
    probabilities (as converters of DataFrame pipelines write)."""
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    w = np.array([[4.0, -4.0, 0.0], [0.0, 0.0, 1.0]], dtype=np.float32)  # (2 features, 3)
    nodes = [helper.make_node("Concat", list(names), ["x"], axis=1),
             helper.make_node("MatMul", ["x", "w"], ["z"]),
             helper.make_node("Softmax", ["z"], ["probabilities"], axis=1)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [None, 1])
                     for n in names],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [None, 3])],
        [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel())])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)


def test_onnx_inputs_by_name_and_float32_probabilities(tmp_path):
    path = tmp_path / "m.onnx"
    _onnx_per_column(path, ["width", "height"])
    model = load_model(path)
    assert model.feature_names == ["width", "height"]
    X = pd.DataFrame({"height": [0.2, 0.9, 0.1], "width": [0.9, 0.1, 0.5]})
    p = model.probabilities_numpy(X[["width", "height"]].to_numpy())
    y = p.argmax(axis=1)
    res = radius(model, X, y, budget=300)  # columns reordered by name
    np.testing.assert_array_equal(res.prediction, y)


# -- item 4: inputs that already satisfy a targeted statement ---------------------------------
def test_targeted_statement_keeps_clean_accuracy_and_marks_satisfied_inputs():
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import minmax_scale

    from robustscope import Statement
    from robustscope.scores.intrinsic import scores_from_result

    X, y = load_wine(return_X_y=True)
    X = minmax_scale(X)
    model = LogisticRegression(max_iter=2000).fit(X, y)
    rows = np.r_[0:10, 60:70, 130:140]  # ten of each class
    plain = radius(model, X[rows], y[rows], threat="l2")
    res = radius(model, X[rows], y[rows], threat="l2", statement=Statement(target=2),
                 solver="pgd", budget=400)
    summary = res.summary()
    assert summary["clean_accuracy"] == plain.summary()["clean_accuracy"]
    correct = res.prediction == res.label
    satisfied = correct & (res.label == 2)
    assert satisfied.sum() > 5
    np.testing.assert_array_equal(res.status == "satisfied", satisfied)
    assert (res.status[~correct] == "misclassified").all()
    assert summary["satisfied"] == satisfied.sum()
    assert (res.radius[satisfied] == 0).all()
    np.testing.assert_array_equal(res.x_adv[satisfied], X[rows][satisfied])
    assert not np.isin(res.status[res.label != 2], ["satisfied"]).any()
    # the scores accept the status: radius 0 in R_m, not counted as misclassified
    scores = scores_from_result(res, n_bootstrap=0)
    assert scores.n_misclassified == int((~correct).sum())
    assert scores.R_w == 0.0


# -- item 14: gradient attacks on models without gradients warn -------------------------------
def test_gradient_solvers_on_trees_and_black_boxes_warn(wine_frame):
    from sklearn.ensemble import RandomForestClassifier

    from robustscope import RobustscopeWarning

    X, y = wine_frame
    X = X.to_numpy()
    forest = RandomForestClassifier(n_estimators=3, random_state=0).fit(X, y)
    for solver in ("pgd", "minnorm"):
        with pytest.warns(RobustscopeWarning, match=r"2,769.*solver='exact'"):
            radius(forest, X[:2], y[:2], solver=solver, budget=100)
    with pytest.warns(RobustscopeWarning, match="gradient-free"):
        radius(forest.predict_proba, X[:2], y[:2], solver="pgd", budget=100)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RobustscopeWarning)
        radius(forest, X[:2], y[:2])  # auto: exact, no warning
