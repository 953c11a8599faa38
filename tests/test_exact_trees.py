"""Exact radii of tree ensembles: parsing, brute-force agreement, validity, limits."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.datasets import load_breast_cancer, load_wine, make_classification
from sklearn.ensemble import (
    ExtraTreesClassifier,
    GradientBoostingClassifier,
    RandomForestClassifier,
)
from sklearn.linear_model import LogisticRegression
from sklearn.tree import DecisionTreeClassifier

from robustscope.core.errors import InputError, ModelError
from robustscope.core.result import ATTACKED, CENSORED, EXACT, MISCLASSIFIED, SATISFIED
from robustscope.core.space import FeatureSpace
from robustscope.models.trees import (
    check_parsed,
    is_tree_ensemble,
    parse_tree_model,
    wrap_tree_model,
)
from robustscope.solvers.exact.trees.driver import exact_tree_radius
from robustscope.solvers.exact.trees.program import right_start
from robustscope.threats import get_threat

xgb = pytest.importorskip("xgboost")
lgb = pytest.importorskip("lightgbm")

NORMS = {"linf": math.inf, "l1": 1.0, "l2": 2.0}


def _models(multiclass: bool, n_trees: int = 6, depth: int = 3) -> list:
    return [
        xgb.XGBClassifier(n_estimators=n_trees, max_depth=depth, n_jobs=1, random_state=0),
        lgb.LGBMClassifier(n_estimators=n_trees, num_leaves=2 ** depth, max_depth=depth,
                           min_child_samples=5, verbose=-1, n_jobs=1, random_state=0),
        RandomForestClassifier(n_estimators=n_trees, max_depth=depth, random_state=0),
        ExtraTreesClassifier(n_estimators=n_trees, max_depth=depth, random_state=0),
        GradientBoostingClassifier(n_estimators=n_trees, max_depth=depth, random_state=0),
        DecisionTreeClassifier(max_depth=depth + 1, random_state=0),
    ]


def _ids(models: list) -> list[str]:
    return [type(m).__name__ for m in models]


# -- parsing ------------------------------------------------------------------------------------
@pytest.mark.parametrize("multiclass", [False, True])
def test_parsed_decision_matches_model(multiclass: bool) -> None:
    X, y = load_wine(return_X_y=True) if multiclass else load_breast_cancer(return_X_y=True)
    rng = np.random.default_rng(0)
    rows = np.vstack([X, X[:150] + rng.normal(size=(150, X.shape[1])) * X.std(axis=0) * 0.3])
    for model in _models(multiclass, n_trees=15, depth=4):
        model.fit(X, y)
        assert is_tree_ensemble(model)
        ens = parse_tree_model(model)
        assert ens.n_classes == len(np.unique(y))
        assert check_parsed(model, ens, rows) == 1.0, type(model).__name__
        clf = wrap_tree_model(model)
        p = clf.predict_proba(torch.as_tensor(rows[:20]))
        np.testing.assert_allclose(p.numpy(), np.asarray(model.predict_proba(rows[:20])),
                                   rtol=1e-6, atol=1e-9)


def test_xgboost_thresholds_are_exact_float32() -> None:
    """The JSON model's thresholds, not the rounded text dump's, route like the booster."""
    X, y = load_breast_cancer(return_X_y=True)
    model = xgb.XGBClassifier(n_estimators=5, max_depth=3, n_jobs=1).fit(X, y)
    ens = parse_tree_model(model)
    t = ens.trees[0]
    node, f, th = 0, int(t.feature[0]), float(t.threshold[0])
    assert np.float32(th) == th  # a float32 value
    row = np.tile(np.median(X, axis=0), (2, 1))
    row[0, f] = th  # x == t goes right in XGBoost (x < t is left)
    row[1, f] = np.nextafter(np.float32(th), np.float32(-np.inf))
    leaves = ens.leaf_index(row)[:, 0]
    booster_leaves = model.get_booster().predict(xgb.DMatrix(row), pred_leaf=True)[:, 0]
    np.testing.assert_array_equal(leaves, booster_leaves)
    assert leaves[0] != leaves[1] or t.left[node] == t.right[node]


def test_raw_boosters_from_model_files(tmp_path) -> None:
    """Boosters read from .json / .txt files (as the model loaders do) give the same radii
    as the scikit-learn API objects they were saved from."""
    from robustscope.models.loaders import load_model

    X, y = load_wine(return_X_y=True)
    space = FeatureSpace.from_data(X)
    rows = X[::15]
    for model, suffix in (
        (xgb.XGBClassifier(n_estimators=6, max_depth=3, n_jobs=1), ".json"),
        (lgb.LGBMClassifier(n_estimators=6, num_leaves=8, verbose=-1, n_jobs=1), ".txt"),
    ):
        model.fit(X, y)
        path = tmp_path / f"model{suffix}"
        if suffix == ".json":
            model.save_model(path)
        else:
            model.booster_.save_model(path)
        booster = load_model(path).native
        assert is_tree_ensemble(booster)
        clf = wrap_tree_model(booster)
        assert check_parsed(booster, clf.ensemble, X) == 1.0
        labels = np.asarray(model.predict_proba(rows)).argmax(axis=1)
        a = exact_tree_radius(model, rows, labels, space, "linf")
        b = exact_tree_radius(clf, rows, labels, space, "linf")
        np.testing.assert_array_equal(a.radius, b.radius)
        assert (b.status == EXACT).all()


def test_not_a_tree_model() -> None:
    X, y = load_breast_cancer(return_X_y=True)
    lin = LogisticRegression(max_iter=200).fit(X[:, :3], y)
    assert not is_tree_ensemble(lin)
    with pytest.raises(ModelError):
        parse_tree_model(lin)
    with pytest.raises(ModelError):
        exact_tree_radius(lin, X[:2, :3], y[:2], FeatureSpace.from_data(X[:, :3]))


def test_right_start_float32_rounding() -> None:
    """The cut is the smallest float64 that the library routes right, for every rule."""
    rng = np.random.default_rng(1)
    t = rng.normal(size=200) * 10.0 ** rng.integers(-3, 4, size=200)
    for strict, f32 in itertools.product((True, False), repeat=2):
        r = right_start(t, strict, f32)
        for v, want_left in ((r, False), (np.nextafter(r, -np.inf), True)):
            seen = v.astype(np.float32).astype(np.float64) if f32 else v
            goes_left = seen < t if strict else seen <= t
            assert (goes_left == want_left).all()


# -- brute force on two features ---------------------------------------------------------------
def _two_feature_data(n_classes: int, seed: int = 0):
    X, y = make_classification(n_samples=300, n_features=2, n_informative=2, n_redundant=0,
                               n_clusters_per_class=1, n_classes=n_classes, random_state=seed)
    return X, y


def _brute_force(model, ens, x0: np.ndarray, y0: int, space: FeatureSpace, p: float,
                 integer: tuple[int, ...] = (), fixed: tuple[int, ...] = (),
                 target: int | None = None) -> float:
    """True minimum norm by enumerating every cell of the threshold grid.

    Real features: cells between consecutive thresholds (clipped to the bounds); the cell's
    distance to x0 is the distance to its closure. Integer features: every integer in
    bounds. Each cell is classified by the model's own predict at an interior point."""
    thresholds = ens.thresholds_by_feature()
    axes = []  # per feature: list of (interior point, distance)
    for f in range(len(x0)):
        lo, hi, s = space.lower[f], space.upper[f], space.scale[f]
        if f in fixed:
            axes.append([(x0[f], 0.0)])
        elif f in integer:
            axes.append([(float(v), abs(v - x0[f]) / s)
                         for v in np.arange(math.ceil(lo), math.floor(hi) + 1)])
        else:
            edges = np.concatenate([[lo], thresholds[f][(thresholds[f] > lo)
                                                        & (thresholds[f] < hi)], [hi]])
            cells = []
            for a, b in zip(edges[:-1], edges[1:], strict=True):
                if b - a < 1e-9 * s:
                    continue
                mid = (a + b) / 2
                dist = max(0.0, a - x0[f], x0[f] - b) / s
                cells.append((mid, dist))
            axes.append(cells)
    pts = np.array([[c[0] for c in combo] for combo in itertools.product(*axes)])
    dist = np.array([[c[1] for c in combo] for combo in itertools.product(*axes)])
    pred = np.asarray(model.predict_proba(pts)).argmax(axis=1)
    norms = np.linalg.norm(dist, ord=p, axis=1)
    flips = pred != y0 if target is None else pred == target
    return float(norms[flips].min()) if flips.any() else math.inf


@pytest.mark.parametrize("n_classes", [2, 3])
@pytest.mark.parametrize("threat", ["linf", "l1", "l2"])
def test_radius_equals_brute_force(n_classes: int, threat: str) -> None:
    X, y = _two_feature_data(n_classes)
    space = FeatureSpace.from_arrays(X.min(axis=0) - 0.5, X.max(axis=0) + 0.5)
    rows = np.arange(0, 300, 37)
    for model in _models(n_classes > 2, n_trees=4, depth=3):
        model.fit(X, y)
        clf = wrap_tree_model(model)
        ens = clf.ensemble
        pred = np.asarray(model.predict_proba(X[rows])).argmax(axis=1)
        res = exact_tree_radius(clf, X[rows], pred, space, threat, time_limit=30)
        for k, i in enumerate(rows):
            truth = _brute_force(model, ens, X[i], int(pred[k]), space, NORMS[threat])
            name = f"{type(model).__name__} row {i}"
            if math.isinf(truth):
                assert res.status[k] == CENSORED and math.isinf(res.radius[k]), name
                continue
            assert res.status[k] == EXACT, name
            assert abs(res.radius[k] - truth) <= 1e-6 * max(1.0, truth), (name, res.radius[k],
                                                                             truth)
            assert res.lower_bound[k] == pytest.approx(res.radius[k], rel=1e-6)


@pytest.mark.parametrize("threat", ["linf", "l2"])
def test_targeted_radius_equals_brute_force(threat: str) -> None:
    X, y = _two_feature_data(3, seed=1)
    space = FeatureSpace.from_arrays(X.min(axis=0) - 0.5, X.max(axis=0) + 0.5)
    rows = X[::41]
    for model in _models(True, n_trees=4, depth=3)[:3]:
        model.fit(X, y)
        clf = wrap_tree_model(model)
        pred = np.asarray(model.predict_proba(rows)).argmax(axis=1)
        untargeted = exact_tree_radius(clf, rows, pred, space, threat)
        for target in range(3):
            res = exact_tree_radius(clf, rows, pred, space, threat, target=target)
            for k in range(len(rows)):
                if pred[k] == target:
                    assert res.status[k] == SATISFIED and res.radius[k] == 0.0
                    continue
                truth = _brute_force(model, clf.ensemble, rows[k], int(pred[k]), space,
                                     NORMS[threat], target=target)
                if math.isinf(truth):
                    assert res.status[k] == CENSORED
                    continue
                assert res.status[k] == EXACT
                assert abs(res.radius[k] - truth) <= 1e-6 * max(1.0, truth)
                assert res.adv_prediction[k] == target
                assert res.radius[k] >= untargeted.radius[k] * (1 - 1e-12)


# derandomized: the same examples on every run, so that CI is deterministic; the one case
# it found open (LightGBM's zero band) is kept below as a regression test
@settings(max_examples=8, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10_000), kind=st.sampled_from(["xgb", "rf", "lgb"]),
       threat=st.sampled_from(["linf", "l1", "l2"]), n_classes=st.sampled_from([2, 3]))
def test_property_random_models_match_brute_force(seed: int, kind: str, threat: str,
                                                  n_classes: int) -> None:
    _check_random_model_against_brute_force(seed, kind, threat, n_classes)


def test_lightgbm_zero_band_bracket_closes() -> None:
    """Found by the property test: LightGBM reads every |v| <= 1e-35 as 0, so a split at
    -1e-35 sends -1e-35 itself right; the counterexample put there failed verification and
    the Linf bracket of input 4 stayed open (0.3370 certified, 0.3449 verified)."""
    _check_random_model_against_brute_force(199, "lgb", "linf", 3)


def test_lightgbm_zero_band_routing() -> None:
    rng = np.random.default_rng(199)
    X = rng.normal(size=(120, 2))
    y = rng.integers(0, 3, size=120)
    model = lgb.LGBMClassifier(n_estimators=3, num_leaves=4, min_child_samples=5, verbose=-1,
                               n_jobs=1, random_state=199).fit(X, y)
    ens = parse_tree_model(model)
    kz = float(np.float32(1e-35))
    assert ens.zero_band == kz
    near = np.array([-1.0, -kz, np.nextafter(-kz, -1), np.nextafter(-kz, 1), 0.0, kz,
                     np.nextafter(kz, 1), 1e-30])
    rows = np.array([[a, b] for a in near for b in near])
    np.testing.assert_array_equal(ens.predict(rows),
                                  np.asarray(model.predict_proba(rows)).argmax(axis=1))
    thresholds = np.array([-1e-30, -kz, -kz / 2, 0.0, kz / 2, kz, 1e-30])
    r = right_start(thresholds, False, False, kz)
    for t, start in zip(thresholds, r, strict=True):
        assert not ens.goes_left(np.array([start]), t)[0]
        assert ens.goes_left(np.array([np.nextafter(start, -np.inf)]), t)[0]


def _check_random_model_against_brute_force(seed: int, kind: str, threat: str,
                                            n_classes: int) -> None:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(120, 2))
    y = rng.integers(0, n_classes, size=120)
    y[:n_classes] = np.arange(n_classes)
    model = {
        "xgb": xgb.XGBClassifier(n_estimators=3, max_depth=2, n_jobs=1, random_state=seed),
        "rf": RandomForestClassifier(n_estimators=3, max_depth=3, random_state=seed),
        "lgb": lgb.LGBMClassifier(n_estimators=3, num_leaves=4, min_child_samples=5,
                                  verbose=-1, n_jobs=1, random_state=seed),
    }[kind].fit(X, y)
    space = FeatureSpace.from_arrays(X.min(axis=0) - 0.1, X.max(axis=0) + 0.1,
                                     scale=rng.uniform(0.5, 2.0, size=2))
    rows = X[:5]
    labels = np.asarray(model.predict_proba(rows)).argmax(axis=1)
    clf = wrap_tree_model(model)
    res = exact_tree_radius(clf, rows, labels, space, threat)
    for k in range(len(rows)):
        truth = _brute_force(model, clf.ensemble, rows[k], int(labels[k]), space,
                             NORMS[threat])
        if math.isinf(truth):
            assert res.status[k] == CENSORED
        else:
            assert res.status[k] == EXACT
            assert abs(res.radius[k] - truth) <= 1e-6 * max(1.0, truth)


def test_unbounded_space_matches_wide_bounds() -> None:
    X, y = _two_feature_data(2, seed=4)
    model = RandomForestClassifier(n_estimators=5, max_depth=3, random_state=0).fit(X, y)
    rows = X[::50]
    labels = np.asarray(model.predict_proba(rows)).argmax(axis=1)
    wide = FeatureSpace.from_arrays(X.min(axis=0) - 100, X.max(axis=0) + 100, scale=[1.0, 2.0])
    free = FeatureSpace.from_arrays([-np.inf] * 2, [np.inf] * 2, scale=[1.0, 2.0])
    for threat in ("linf", "l1"):
        a = exact_tree_radius(model, rows, labels, wide, threat)
        b = exact_tree_radius(model, rows, labels, free, threat)
        np.testing.assert_array_equal(a.radius, b.radius)
        assert (b.status == EXACT).all()


# -- validity of counterexamples ---------------------------------------------------------------
@pytest.mark.parametrize("threat", ["linf", "l2", "l1"])
def test_counterexamples_verified_and_ball_is_clean(threat: str) -> None:
    X, y = load_breast_cancer(return_X_y=True)
    X = X[:, :8]
    space = FeatureSpace.from_data(X)
    th = get_threat(threat)
    gen = torch.Generator().manual_seed(0)
    for model in _models(False, n_trees=8, depth=3)[:5]:
        model.fit(X, y)
        clf = wrap_tree_model(model)
        rows = X[::57]
        labels = np.asarray(model.predict_proba(rows)).argmax(axis=1)
        res = exact_tree_radius(clf, rows, labels, space, threat, time_limit=30)
        assert (res.status == EXACT).all(), type(model).__name__
        adv_pred = np.asarray(model.predict_proba(res.x_adv.numpy())).argmax(axis=1)
        assert (adv_pred != labels).all()
        np.testing.assert_array_equal(adv_pred, res.adv_prediction)
        space.check_data(res.x_adv.numpy(), what="x_adv")
        u = (res.x_adv.numpy() - rows) / space.scale
        np.testing.assert_allclose(np.linalg.norm(u, ord=NORMS[threat], axis=1), res.radius,
                                   rtol=1e-12)
        # no valid point strictly inside the ball flips: random points and the scaled-back
        # counterexample itself
        r = torch.as_tensor(res.radius * 0.999).repeat_interleave(200)
        xs = torch.as_tensor(rows).repeat_interleave(200, dim=0)
        du = th.random_in_ball(len(xs), X.shape[1], r, gen, torch.float64, "cpu")
        inside = space.project(space.apply_delta(xs, du), xs).numpy()
        inside = np.vstack([inside, rows + 0.999 * (res.x_adv.numpy() - rows)])
        want = np.concatenate([labels.repeat(200), labels])
        got = np.asarray(model.predict_proba(inside)).argmax(axis=1)
        assert (got == want).all(), type(model).__name__


def test_immutable_bounds_and_integer_features() -> None:
    rng = np.random.default_rng(0)
    X, y = _two_feature_data(2, seed=3)
    X = np.column_stack([X, rng.integers(0, 8, size=len(X)).astype(float)])
    y = np.where(X[:, 2] > 5, 1 - y, y)  # make the integer feature matter
    model = xgb.XGBClassifier(n_estimators=5, max_depth=3, n_jobs=1).fit(X, y)
    clf = wrap_tree_model(model)
    lower = X.min(axis=0) - 0.2
    upper = X.max(axis=0) + 0.2
    lower[2], upper[2] = 0.0, 7.0
    base = dict(lower=lower, upper=upper, scale=[1.0, 1.0, 4.0])
    rows = X[::29]
    labels = np.asarray(model.predict_proba(rows)).argmax(axis=1)
    cases = [
        (FeatureSpace.from_arrays(**base, types=["real", "real", "integer"]), (2,), ()),
        (FeatureSpace.from_arrays(**base, types=["real", "real", "integer"],
                                  mutable=[True, False, True]), (2,), (1,)),
        (FeatureSpace.from_arrays(**base, types=["real", "real", "integer"],
                                  mutable=[True, True, False]), (), (2,)),
    ]
    for space, integer, fixed in cases:
        for threat in ("linf", "l1"):
            res = exact_tree_radius(clf, rows, labels, space, threat, time_limit=30)
            found = np.isfinite(res.radius)
            space.check_data(res.x_adv.numpy(), what="x_adv")  # bounds and integrality
            for f in fixed:
                np.testing.assert_array_equal(res.x_adv.numpy()[:, f], rows[:, f])
            adv = np.asarray(model.predict_proba(res.x_adv.numpy()[found])).argmax(axis=1)
            assert (adv != labels[found]).all()
            for k in range(len(rows)):
                truth = _brute_force(model, clf.ensemble, rows[k], int(labels[k]), space,
                                     NORMS[threat], integer=integer, fixed=fixed)
                if math.isinf(truth):
                    assert res.status[k] == CENSORED
                else:
                    assert res.status[k] == EXACT
                    assert abs(res.radius[k] - truth) <= 1e-6 * max(1.0, truth)


def test_one_hot_group_stays_one_hot() -> None:
    rng = np.random.default_rng(2)
    n = 400
    cat = rng.integers(0, 3, size=n)
    onehot = np.eye(3)[cat]
    z = rng.normal(size=n)
    y = ((z + np.array([-1.0, 0.2, 1.2])[cat]) > 0).astype(int)
    X = np.column_stack([z, onehot])
    model = RandomForestClassifier(n_estimators=6, max_depth=4, random_state=0).fit(X, y)
    clf = wrap_tree_model(model)
    space = FeatureSpace.from_dict(
        {"default": {"lower": 0, "upper": 1},
         "features": [{"index": 0, "lower": -4, "upper": 4, "scale": 1.0}] +
                     [{"index": k, "type": "categorical", "group": "c"} for k in (1, 2, 3)]},
        n_features=4)
    rows = X[::23]
    labels = np.asarray(model.predict_proba(rows)).argmax(axis=1)
    res = exact_tree_radius(clf, rows, labels, space, "l1", time_limit=30)
    found = np.isfinite(res.radius)
    space.check_data(res.x_adv.numpy(), what="x_adv")
    adv = np.asarray(model.predict_proba(res.x_adv.numpy()[found])).argmax(axis=1)
    assert (adv != labels[found]).all()
    # brute force: each category x the cells of the real feature
    th = clf.ensemble.thresholds_by_feature()[0]
    edges = np.concatenate([[-4.0], th[(th > -4) & (th < 4)], [4.0]])
    for k, x0 in enumerate(rows):
        best = math.inf
        for c in range(3):
            for a, b in zip(edges[:-1], edges[1:], strict=True):
                pt = np.concatenate([[(a + b) / 2], np.eye(3)[c]])
                if np.asarray(model.predict_proba(pt[None])).argmax() != labels[k]:
                    cost = max(0.0, a - x0[0], x0[0] - b) + np.abs(np.eye(3)[c] - x0[1:]).sum()
                    best = min(best, cost)
        assert abs(res.radius[k] - best) <= 1e-6 * max(1.0, best)


# -- limits and statuses -----------------------------------------------------------------------
@pytest.mark.parametrize("threat", ["linf", "l2"])
def test_time_limit_returns_valid_bracket(threat: str) -> None:
    X, y = load_breast_cancer(return_X_y=True)
    model = lgb.LGBMClassifier(n_estimators=60, num_leaves=16, verbose=-1, n_jobs=1,
                               random_state=0).fit(X, y)
    clf = wrap_tree_model(model)
    space = FeatureSpace.from_data(X)
    rows, labels = X[:6], np.asarray(model.predict_proba(X[:6])).argmax(axis=1)
    quick = exact_tree_radius(clf, rows, labels, space, threat, time_limit=0.001)
    full = exact_tree_radius(clf, rows, labels, space, threat, time_limit=60)
    assert (full.status == EXACT).all()
    assert set(quick.status) <= {EXACT, ATTACKED, CENSORED}
    assert (quick.status != EXACT).any()  # the limit did bind
    assert (quick.lower_bound <= full.radius * (1 + 1e-9)).all()
    assert (quick.radius >= full.radius * (1 - 1e-9)).all()
    found = np.isfinite(quick.radius)
    if found.any():
        adv = np.asarray(model.predict_proba(quick.x_adv[found])).argmax(axis=1)
        assert (adv != labels[found]).all()
    np.testing.assert_array_equal(quick.x_adv[~found], rows[~found])


def test_max_radius_censors_and_misclassified() -> None:
    X, y = load_breast_cancer(return_X_y=True)
    model = xgb.XGBClassifier(n_estimators=10, max_depth=3, n_jobs=1).fit(X, y)
    space = FeatureSpace.from_data(X)
    rows = X[:10]
    labels = np.asarray(model.predict_proba(rows)).argmax(axis=1)
    labels[0] = 1 - labels[0]  # a wrong label: misclassified, radius 0
    full = exact_tree_radius(model, rows, labels, space, "linf")
    assert full.status[0] == MISCLASSIFIED and full.radius[0] == 0.0
    cap = float(np.median(full.radius[1:]))
    capped = exact_tree_radius(model, rows, labels, space, "linf", max_radius=cap)
    for k in range(1, 10):
        if full.radius[k] <= cap:
            assert capped.status[k] == EXACT and capped.radius[k] == full.radius[k]
        else:
            assert capped.status[k] == CENSORED and math.isinf(capped.radius[k])
            assert cap < capped.lower_bound[k] <= full.radius[k]


@pytest.mark.parametrize("backend,search", [("scipy", "bisect"), ("highspy", "optimize")])
def test_backends_and_searches_agree(backend: str, search: str) -> None:
    X, y = load_wine(return_X_y=True)
    model = xgb.XGBClassifier(n_estimators=8, max_depth=3, n_jobs=1).fit(X, y)
    space = FeatureSpace.from_data(X)
    rows = X[::20]
    labels = np.asarray(model.predict_proba(rows)).argmax(axis=1)
    ref = exact_tree_radius(model, rows, labels, space, "linf")
    other = exact_tree_radius(model, rows, labels, space, "linf", backend=backend,
                              linf_search=search)
    assert (ref.status == EXACT).all() and (other.status == EXACT).all()
    np.testing.assert_allclose(other.radius, ref.radius, rtol=1e-9)


def test_bad_arguments() -> None:
    X, y = load_breast_cancer(return_X_y=True)
    model = DecisionTreeClassifier(max_depth=3).fit(X, y)
    space = FeatureSpace.from_data(X)
    with pytest.raises(InputError, match="y"):
        exact_tree_radius(model, X[:3], np.array([0, 1, 5]), space)
    with pytest.raises(InputError, match="features"):
        exact_tree_radius(model, X[:3, :5], y[:3], space)
    with pytest.raises(InputError, match="threat"):
        exact_tree_radius(model, X[:3], y[:3], space, "l3")
    with pytest.raises(InputError, match="target"):
        exact_tree_radius(model, X[:3], y[:3], space, target=2)
    with pytest.raises(InputError, match="max_radius"):
        exact_tree_radius(model, X[:3], y[:3], space, max_radius=0.0)
