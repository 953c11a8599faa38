"""The exact linear radius against closed forms and independent LP / 1-D solvers."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import brentq, linprog

from robustscope import FeatureSpace
from robustscope.search.engine import radius
from robustscope.solvers.exact.linear.closed_form import exact_linear_radius
from robustscope.threats import L1, L2, LINF

NORM_ORD = {"linf": np.inf, "l2": 2, "l1": 1}
DUAL_ORD = {"linf": 1, "l2": 2, "l1": np.inf}


def _random_problem(k: int, d: int, n: int, seed: int):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(k, d))
    b = rng.normal(size=k)
    x = rng.uniform(0.05, 0.95, size=(n, d))
    y = (x @ w.T + b).argmax(1)
    return w, b, x, y


@pytest.mark.parametrize("threat", [LINF, L2, L1])
def test_binary_unbounded_matches_closed_form(threat):
    # binary, no bounds: r = |margin| / ||(w1 - w0) * scale||_dual
    w, b, x, y = _random_problem(2, 5, 40, seed=1)
    scale = np.array([1.0, 2.0, 0.5, 3.0, 1.0])
    space = FeatureSpace.from_arrays(np.full(5, -np.inf), np.full(5, np.inf), scale=scale)
    res = exact_linear_radius(w, b, x, y, space, threat)
    margin = np.abs((x @ w.T + b) @ np.array([1.0, -1.0]))
    expected = margin / np.linalg.norm((w[1] - w[0]) * scale, ord=DUAL_ORD[threat.name])
    np.testing.assert_allclose(res.radius, expected, rtol=1e-6)


def _lp_radius(w, b, x, y, lo, hi, p: str) -> float:
    """Independent: min ||u||_p (p = inf or 1) s.t. z_j >= z_y for some j, lo <= u <= hi, by LP."""
    k, d = w.shape
    best = np.inf
    for j in range(k):
        if j == y:
            continue
        a = w[j] - w[y]
        m = (w[y] - w[j]) @ x + b[y] - b[j]
        if p == "linf":  # variables (u, t)
            c = np.r_[np.zeros(d), 1.0]
            rows = [np.r_[-a, 0.0]]
            for i in range(d):
                for s in (1.0, -1.0):
                    e = np.zeros(d + 1)
                    e[i], e[-1] = s, -1.0
                    rows.append(e)
            rhs = np.r_[-m, np.zeros(2 * d)]
            bounds = [(lo[i], hi[i]) for i in range(d)] + [(0, None)]
        else:  # u = up - um, both >= 0
            c = np.ones(2 * d)
            rows, rhs = [np.r_[-a, a]], [-m]
            bounds = [(0, hi[i]) for i in range(d)] + [(0, -lo[i]) for i in range(d)]
        res = linprog(c, A_ub=np.array(rows), b_ub=rhs, bounds=bounds, method="highs",
                      options={"primal_feasibility_tolerance": 1e-10,
                               "dual_feasibility_tolerance": 1e-10})
        if res.status == 0:
            best = min(best, res.fun)
    return best


def _l2_radius_1d(w, b, x, y, lo, hi) -> float:
    """Independent: per class, KKT u_i = clip(lam * a_i, lo_i, hi_i), lam by Brent's method."""
    best = np.inf
    for j in range(w.shape[0]):
        if j == y:
            continue
        a = w[j] - w[y]
        m = (w[y] - w[j]) @ x + b[y] - b[j]
        gain = lambda lam, a=a, m=m: a @ np.clip(lam * a, lo, hi) - m  # noqa: E731
        top = 1.0
        while gain(top) < 0 and top < 1e12:
            top *= 2
        if gain(top) < 0:
            continue
        lam = brentq(gain, 0.0, top, xtol=1e-15, rtol=1e-15)
        best = min(best, np.linalg.norm(np.clip(lam * a, lo, hi)))
    return best


@pytest.mark.parametrize("bounded", [True, False])
@pytest.mark.parametrize("name", ["linf", "l1", "l2"])
def test_multiclass_matches_independent_solvers(name, bounded):
    w, b, x, y = _random_problem(4, 6, 30, seed=2)
    lower = np.zeros(6) if bounded else np.full(6, -np.inf)
    upper = np.ones(6) if bounded else np.full(6, np.inf)
    space = FeatureSpace.from_arrays(lower, upper, scale=np.ones(6))
    threat = {"linf": LINF, "l2": L2, "l1": L1}[name]
    res = exact_linear_radius(w, b, x, y, space, threat)
    for i in range(len(x)):
        lo, hi = lower - x[i], upper - x[i]
        if name == "l2":
            ref = _l2_radius_1d(w, b, x[i], y[i], lo, hi)
        else:
            ref = _lp_radius(w, b, x[i], y[i], lo, hi, name)
        if np.isinf(ref):
            assert np.isinf(res.radius[i])
        else:
            assert res.radius[i] == pytest.approx(ref, rel=1e-6)
            u = (res.x_adv[i].numpy() - x[i]) / space.scale
            assert np.linalg.norm(u, ord=NORM_ORD[name]) == pytest.approx(ref, rel=1e-6)


def test_bounds_make_the_radius_larger_and_can_make_it_infinite():
    w = np.array([[0.0, 0.0], [1.0, 0.0]])
    b = np.array([0.0, -0.9])  # class 1 needs x0 > 0.9
    x = np.array([[0.5, 0.5]])
    unbounded = FeatureSpace.from_arrays([-np.inf] * 2, [np.inf] * 2, scale=[1, 1])
    assert exact_linear_radius(w, b, x, [0], unbounded, LINF).radius[0] == pytest.approx(0.4)
    capped = FeatureSpace.from_arrays([0, 0], [0.8, 1], scale=[1, 1])
    assert np.isinf(exact_linear_radius(w, b, x, [0], capped, LINF).radius[0])
    frozen = FeatureSpace.from_arrays([0, 0], [1, 1], scale=[1, 1], mutable=[False, True])
    assert np.isinf(exact_linear_radius(w, b, x, [0], frozen, L2).radius[0])


@pytest.mark.parametrize("threat", ["linf", "l2", "l1"])
def test_search_certifies_exact_radius_with_verified_counterexample(digits, threat):
    from sklearn.linear_model import LogisticRegression

    X, y = digits
    model = LogisticRegression(max_iter=500).fit(X[:600], y[:600])
    space = FeatureSpace.box(64)
    res = radius(model, X[600:800], y[600:800], threat=threat, space=space)
    exact = res.status == "exact"
    assert exact.sum() >= 180
    np.testing.assert_allclose(res.radius[exact], res.lower_bound[exact], rtol=1e-6)
    # the counterexample really changes the model's own decision and lies in the box
    pred = model.predict(res.x_adv[exact])
    assert (pred != y[600:800][exact]).all()
    assert res.x_adv.min() >= 0 and res.x_adv.max() <= 1
    delta = np.linalg.norm(res.x_adv[exact] - X[600:800][exact], ord=NORM_ORD[threat], axis=1)
    np.testing.assert_allclose(delta, res.radius[exact], rtol=1e-9)
