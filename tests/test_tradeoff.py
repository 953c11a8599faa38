"""Trade-off estimates against independent computations for linear models."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate

from robustscope.core.errors import InputError
from robustscope.models.base import QueryLedger
from robustscope.models.linear import LinearClassifier
from robustscope.scores.tradeoff import (
    binomial_interval,
    eps_for_alpha,
    flip_probability,
    hoeffding_eps,
    linear_hoeffding_eps,
)


def _binary(w, b=0.1, n=6, seed=0):
    w = np.asarray(w, dtype=np.float64)
    model = LinearClassifier(np.vstack([np.zeros(len(w)), w]), np.array([0.0, b]))
    X = np.random.default_rng(seed).normal(size=(n, len(w))) * 0.5
    return model, w, b, X


def test_l2_ball_flip_probability_matches_closed_form():
    # for Z uniform in the unit 3-ball, <Z, e> has density 3/4 (1 - t^2) on [-1, 1]
    model, w, b, X = _binary([1.0, -2.0, 0.5])
    eps = 1.0
    est = flip_probability(model, X, eps, "l2", n_samples=4000, confidence=0.999, seed=3)
    t = np.clip(np.abs(X @ w + b) / (eps * np.linalg.norm(w)), 0, 1)
    exact = 0.5 - 0.75 * (t - t**3 / 3)
    assert ((est.low <= exact) & (exact <= est.high)).all()
    assert np.abs(est.p - exact).max() < 0.04


def test_linf_ball_flip_probability_matches_integral():
    model, w, b, X = _binary([1.5, -0.7])
    eps = 0.8
    est = flip_probability(model, X, eps, "linf", n_samples=4000, confidence=0.999,
                           method="wilson", seed=4)
    exact = []
    for x in X:
        m = x @ w + b
        s = np.sign(m)

        def length(z1, m=m, s=s):  # measure of z2 in [-1, 1] with s * (m + eps w.z) < 0
            # s * eps * w2 * z2 < -s * (m + eps w1 z1)
            a, c = s * eps * w[1], -s * (m + eps * w[0] * z1)
            bound = c / a
            return np.clip(bound + 1, 0, 2) if a > 0 else np.clip(1 - bound, 0, 2)

        exact.append(integrate.quad(length, -1, 1, limit=200)[0] / 4)
    exact = np.array(exact)
    assert ((est.low <= exact) & (exact <= est.high)).all()


def test_eps_for_alpha_brackets_and_hoeffding_is_below():
    model, w, b, X = _binary([1.0, -1.0, 0.5, 2.0], n=5, seed=1)
    alpha = 0.1
    ledger = QueryLedger(len(X))
    res = eps_for_alpha(model, X, alpha, "linf", n_samples=1500, seed=2, ledger=ledger)
    assert (res.eps_low <= res.eps * (1 + 0.02)).all()
    assert (res.eps <= res.eps_high * (1 + 0.02)).all()
    assert (ledger.forward > 0).all()
    r = np.abs(X @ w + b) / np.linalg.norm(w)
    h = hoeffding_eps(r, alpha)
    # Hoeffding is a guaranteed trade-off: the optimal eps (and our conservative estimate of it,
    # up to Monte-Carlo noise) is at least as large
    assert (h <= res.eps_high).all()
    np.testing.assert_allclose(linear_hoeffding_eps(model, X, alpha), h, rtol=1e-12)
    # at the estimated eps, an independent estimate of the flip probability is near alpha
    check = flip_probability(model, X, res.eps_low, "linf", n_samples=4000, seed=9)
    assert (check.low <= alpha).all()


def test_multiclass_hoeffding_solves_union_bound():
    rng = np.random.default_rng(0)
    W, b = rng.normal(size=(4, 6)), rng.normal(size=4)
    model = LinearClassifier(W, b)
    X = rng.normal(size=(5, 6))
    alpha = 0.05
    eps = linear_hoeffding_eps(model, X, alpha)
    z = X @ W.T + b
    c = z.argmax(axis=1)
    total = []
    for i in range(len(X)):
        others = [j for j in range(4) if j != c[i]]
        r = [(z[i, c[i]] - z[i, j]) / np.linalg.norm(W[c[i]] - W[j]) for j in others]
        total.append(np.exp(-np.square(r) / (2 * eps[i] ** 2)).sum())
    np.testing.assert_allclose(total, alpha, rtol=1e-6)


def test_binomial_intervals():
    low, high = binomial_interval(np.array([0, 10]), 10, 0.95)
    assert low[0] == 0 and high[0] == pytest.approx(1 - 0.025 ** (1 / 10))
    assert high[1] == 1 and low[1] == pytest.approx(0.025 ** (1 / 10))
    lw, hw = binomial_interval(np.array([3]), 10, 0.95, "wilson")
    assert lw[0] < 0.3 < hw[0]
    with pytest.raises(InputError, match="method"):
        binomial_interval(np.array([1]), 10, 0.95, "exactish")
    with pytest.raises(InputError, match="alpha"):
        hoeffding_eps(1.0, 1.5)
