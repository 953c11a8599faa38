"""Thread use of the public entry points (search/threads.py): a search runs its small model
calls on one thread (torch, the OpenMP / BLAS pools, the model's own n_jobs / nthread), the
caller's settings are restored when it returns or raises, and ``threads=None`` leaves them
alone."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.datasets import load_breast_cancer
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_info, threadpool_limits

import robustscope as rs
from robustscope.core.errors import InputError, ModelError
from robustscope.search.threads import (
    SMALL_WORK,
    current_threads,
    fit_threads,
    limited_threads,
)
from robustscope.solvers.exact.trees.driver import exact_tree_radius

#: A caller's setting no default produces, so that a restore is visible.
CALLER = 3


def pools() -> dict[str, int]:
    """Threads of every loaded OpenMP / BLAS pool, by library file."""
    return {p["filepath"]: p["num_threads"] for p in threadpool_info()}


@pytest.fixture
def caller_threads():
    """The caller runs with torch and every native pool at CALLER threads."""
    before = torch.get_num_threads()
    with threadpool_limits(CALLER):
        torch.set_num_threads(CALLER)
        try:
            yield
        finally:
            torch.set_num_threads(before)


@pytest.fixture(scope="module")
def data():
    X, y = load_breast_cancer(return_X_y=True)
    X = X[:, :6]
    lin = LogisticRegression(max_iter=2000).fit(X, y)
    return X[:8], lin.predict(X[:8]), lin


class Recorder:
    """A black box that records the thread settings it is called under."""

    def __init__(self, model, fail_at: int | None = None) -> None:
        self.model, self.fail_at, self.seen = model, fail_at, []

    def __call__(self, x: np.ndarray) -> np.ndarray:
        self.seen.append((torch.get_num_threads(), set(pools().values())))
        if self.fail_at is not None and len(self.seen) >= self.fail_at:
            raise RuntimeError("boom")
        return self.model.predict_proba(x)


def test_a_search_limits_a_black_box_and_restores(caller_threads, data):
    X, y, lin = data
    before = pools()
    assert set(before.values()) == {CALLER}
    rec = Recorder(lin)
    rs.radius(rec, X, y, budget=60)
    assert len(rec.seen) > 5
    assert all(t == 1 and p == {1} for t, p in rec.seen)
    assert torch.get_num_threads() == CALLER
    assert pools() == before
    assert current_threads() is None


def test_settings_are_restored_after_an_error(caller_threads, data):
    X, y, lin = data
    before = pools()
    rec = Recorder(lin, fail_at=4)
    with pytest.raises(ModelError, match="boom"):
        rs.radius(rec, X, y, budget=60)
    assert rec.seen[-1][0] == 1
    assert torch.get_num_threads() == CALLER
    assert pools() == before


def test_threads_none_leaves_the_callers_settings(caller_threads, data):
    X, y, lin = data
    rec = Recorder(lin)
    rs.radius(rec, X, y, budget=60, threads=None)
    assert all(t == CALLER and p == {CALLER} for t, p in rec.seen)


def test_an_int_sets_every_pool(caller_threads, data):
    X, y, lin = data
    rec = Recorder(lin)
    rs.radius(rec, X, y, budget=30, threads=2)
    assert all(t == 2 and p == {2} for t, p in rec.seen)
    assert torch.get_num_threads() == CALLER


@pytest.mark.parametrize("bad", [0, -1, 1.5, "all", True])
def test_bad_threads_are_refused(data, bad):
    X, y, lin = data
    with pytest.raises(InputError, match="threads"):
        rs.radius(lin, X, y, threads=bad)


def test_large_work_keeps_the_callers_threads(caller_threads):
    with limited_threads("auto", work=10) as scope:
        assert torch.get_num_threads() == 1 and set(pools().values()) == {1}
        fit_threads(SMALL_WORK)
        assert scope.current is None
        assert torch.get_num_threads() == CALLER and set(pools().values()) == {CALLER}
        fit_threads(SMALL_WORK - 1)
        assert torch.get_num_threads() == 1
        with limited_threads(None):  # a nested entry point joins the open scope
            assert current_threads() == 1
    assert torch.get_num_threads() == CALLER and set(pools().values()) == {CALLER}


class ThreadProbe(torch.nn.Module):
    """A linear layer that records torch's thread count on every forward pass."""

    def __init__(self, d: int, k: int) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(d, k)
        self.seen: list[int] = []

    def forward(self, x):
        self.seen.append(torch.get_num_threads())
        return self.lin(x.reshape(len(x), -1))


def test_grid_robustness_limits_and_restores(caller_threads):
    torch.manual_seed(0)
    net = ThreadProbe(3 * 4 * 4, 3)
    X = torch.rand(4, 3, 4, 4)
    y = net(X).argmax(1)
    net.seen.clear()
    rs.grid_robustness(net, X, y, "linf", grid=[0.01, 0.1, 0.5], steps=2)
    assert net.seen and set(net.seen) == {1}
    assert torch.get_num_threads() == CALLER
    net.seen.clear()
    rs.grid_robustness(net, X, y, "linf", grid=[0.01, 0.1, 0.5], steps=2, threads=None)
    assert set(net.seen) == {CALLER}


def test_random_directions_limits_and_restores(caller_threads):
    torch.manual_seed(0)
    net = ThreadProbe(5, 2)
    X = torch.rand(6, 5, dtype=torch.float64)
    clf = rs.wrap_model(net.double(), n_classes=2)
    y = clf.predict(X)
    net.seen.clear()
    rs.random_directions_radius(clf, X, y, n_directions=50, max_radius=4.0, max_steps=4)
    assert net.seen and set(net.seen) == {1}
    assert torch.get_num_threads() == CALLER


class RecordingForest(RandomForestClassifier):
    """Records its n_jobs at every predict_proba (defined here, it is served as a black box)."""

    def predict_proba(self, X):
        self.seen.append(self.n_jobs)
        return super().predict_proba(X)


def test_a_scikit_learn_models_n_jobs_is_limited_and_restored(caller_threads, data):
    X, y, _ = data
    Xf, yf = load_breast_cancer(return_X_y=True)
    forest = RecordingForest(n_estimators=5, max_depth=3, n_jobs=CALLER,
                             random_state=0).fit(Xf[:, :6], yf)
    forest.seen = []
    rs.radius(forest.predict_proba, X, y, budget=40)
    assert forest.seen and set(forest.seen) == {1}
    assert forest.n_jobs == CALLER


xgboost = pytest.importorskip("xgboost")


def booster_threads(model) -> str:
    config = json.loads(model.get_booster().save_config())
    return config["learner"]["generic_param"]["nthread"]


class RecordingXGB(xgboost.XGBClassifier):
    """Records the booster's nthread and OpenMP's threads at every predict_proba."""

    seen: list

    def predict_proba(self, X, *args, **kwargs):
        self.seen.append((booster_threads(self), set(pools().values())))
        return super().predict_proba(X, *args, **kwargs)


@pytest.fixture(scope="module")
def xgb_data():
    X, y = load_breast_cancer(return_X_y=True)
    return X, y


def test_an_xgboost_predict_proba_runs_on_one_thread(caller_threads, xgb_data):
    X, y = xgb_data
    model = RecordingXGB(n_estimators=5, max_depth=3, n_jobs=CALLER).fit(X, y)
    model.seen = []
    rs.radius(model.predict_proba, X[:6], y[:6], budget=40)
    assert model.seen and all(n == "1" and p == {1} for n, p in model.seen)
    assert booster_threads(model) == str(CALLER)
    assert model.get_params()["n_jobs"] == CALLER
    model.seen = []
    rs.radius(model.predict_proba, X[:6], y[:6], budget=40, threads=None)
    assert all(n == str(CALLER) for n, _ in model.seen)


@pytest.mark.parametrize("n_jobs", [None, CALLER])
def test_an_xgboost_models_n_jobs_is_restored_by_the_exact_solver(caller_threads, xgb_data,
                                                                   n_jobs):
    X, y = xgb_data
    model = xgboost.XGBClassifier(n_estimators=5, max_depth=3, n_jobs=n_jobs).fit(X, y)
    before = booster_threads(model)
    rs.radius(model, X[:4], y[:4])
    assert booster_threads(model) == before
    assert model.get_params()["n_jobs"] == n_jobs
    # the solver alone, inside a search that opted out: nothing is limited
    space = rs.FeatureSpace.from_data(X)
    with limited_threads(None):
        exact_tree_radius(model, X[:2], y[:2], space)
        assert torch.get_num_threads() == CALLER


def test_a_lightgbm_models_n_jobs_is_limited_and_restored(caller_threads, xgb_data):
    lightgbm = pytest.importorskip("lightgbm")

    class RecordingLGBM(lightgbm.LGBMClassifier):
        def predict_proba(self, X, *args, **kwargs):
            self.seen.append(self.n_jobs)
            return super().predict_proba(X, *args, **kwargs)

    X, y = xgb_data
    model = RecordingLGBM(n_estimators=5, num_leaves=4, n_jobs=CALLER, verbose=-1).fit(X, y)
    model.seen = []
    rs.radius(model.predict_proba, X[:4], y[:4], budget=30)
    assert model.seen and set(model.seen) == {1}
    assert model.get_params()["n_jobs"] == CALLER


def test_the_performance_page_example_runs():
    page = (Path(__file__).resolve().parents[1] / "docs" / "performance.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.S)
    assert blocks
    namespace: dict = {"__name__": "__docs__"}
    for block in blocks:
        exec(compile(block, "docs/performance.md", "exec"), namespace)
    assert namespace["forest"].n_jobs == 2


def test_an_onnx_model_runs_a_one_thread_session(tmp_path, monkeypatch, data):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    X, y, lin = data
    w = np.vstack([np.zeros(6), lin.coef_[0]]).astype(np.float32)
    b = np.array([0.0, lin.intercept_[0]], dtype=np.float32)
    graph = helper.make_graph(
        # log(exp(z)) = z: operators the ONNX reader does not convert, so that the graph is
        # served by ONNX Runtime (a Gemm and a Softmax alone become a torch white box)
        [helper.make_node("Gemm", ["x", "W", "b"], ["g"], transB=1),
         helper.make_node("Exp", ["g"], ["e"]), helper.make_node("Log", ["e"], ["z"]),
         helper.make_node("Softmax", ["z"], ["probabilities"], axis=1)],
        "linear", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 6])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [None, 2])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")])
    path = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    made = []
    real = ort.InferenceSession

    def spy(*args, **kwargs):
        options = args[1] if len(args) > 1 else kwargs.get("sess_options")
        made.append(None if options is None else options.intra_op_num_threads)
        return real(*args, **kwargs)

    monkeypatch.setattr(ort, "InferenceSession", spy)
    clf = rs.load_model(path)
    rs.radius(clf, X, y, budget=30)
    assert made == [None, 1]  # the default session, then one thread for the search's calls
