"""Intrinsic scores against the closed forms of binary logistic regression."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.linear_model import LogisticRegression

from robustscope.core.errors import InputError
from robustscope.core.result import RadiusResult
from robustscope.models.linear import LinearClassifier
from robustscope.scores.intrinsic import (
    cross_entropy,
    g_of_loss,
    intrinsic_scores,
    relative_variation,
    scores_from_result,
    split_by_loss,
    subset_independence,
)


def _binary_logreg(seed: int = 0, n: int = 300, d: int = 5):
    """A fitted binary logistic regression, its data, and per-input exact quantities."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (X @ rng.normal(size=d) + 0.8 * rng.normal(size=n) > 0).astype(int)
    clf = LogisticRegression(C=0.5).fit(X, y)
    model = LinearClassifier.from_sklearn(clf)
    beta, beta0 = clf.coef_[0], clf.intercept_[0]
    ytilde = 2 * y - 1
    margin = ytilde * (X @ beta + beta0)
    logits = model.logits(model.as_tensor(X)).numpy()
    loss = cross_entropy(logits, y)
    correct = margin > 0
    # exact L2 radius without bounds: |margin| / ||beta|| when well classified, else 0
    radius = np.where(correct, margin / np.linalg.norm(beta), 0.0)
    status = np.where(correct, "exact", "misclassified")
    return beta, margin, loss, radius, status, correct


def test_g_is_the_margin_for_binary_logistic_regression():
    beta, margin, loss, radius, status, correct = _binary_logreg()
    g = g_of_loss(loss)
    np.testing.assert_allclose(g, margin, rtol=1e-9, atol=1e-9)
    # Corollary 3.3: r = g(loss) / ||beta|| on well-classified inputs
    np.testing.assert_allclose(radius[correct], g[correct] / np.linalg.norm(beta), rtol=1e-9)
    assert (g[~correct] <= 0).all()


def test_r_nu_is_accuracy_over_norm_and_line_is_exact():
    beta, margin, loss, radius, status, correct = _binary_logreg()
    assert 0 < (~correct).sum() < len(correct)  # both kinds present
    s = intrinsic_scores(radius, loss, status, n_bootstrap=200)
    norm = np.linalg.norm(beta)
    assert s.R_nu == pytest.approx(correct.mean() / norm, rel=1e-9)
    assert s.R_m == pytest.approx(radius.mean(), rel=1e-12)
    assert s.R_w == 0.0
    assert s.R_w_correct == pytest.approx(radius[correct].min(), rel=1e-12)
    assert s.slope == pytest.approx(1 / norm, rel=1e-9)
    assert s.intercept == pytest.approx(0.0, abs=1e-9)
    assert s.r2 == pytest.approx(1.0, abs=1e-9)
    assert s.n_misclassified == (~correct).sum() and s.n_censored == 0
    assert s.n_used_R_nu == len(radius) and s.n_line == correct.sum()


def test_r_nu_is_subset_independent_for_binary_logreg_but_r_m_is_not():
    beta, margin, loss, radius, status, correct = _binary_logreg(seed=3)
    keep = correct  # well-classified inputs only: R_nu = 1/||beta|| on any subset
    cmp = subset_independence(radius[keep], loss[keep], status[keep], n_bootstrap=0)
    assert cmp.rel_var["R_nu"] == pytest.approx(0.0, abs=1e-9)
    assert cmp.rel_var["R_m"] > 0.3
    assert cmp.easy.n == keep.sum() // 2
    assert (loss[keep][cmp.easy_mask].max() <= loss[keep][~cmp.easy_mask].min())


def test_bootstrap_intervals_are_seeded_and_bracket_the_estimate():
    rng = np.random.default_rng(1)
    r = rng.exponential(size=80)
    loss = rng.uniform(0.01, 0.6, size=80)
    status = np.full(80, "attacked")
    a = intrinsic_scores(r, loss, status, seed=5, n_bootstrap=300)
    b = intrinsic_scores(r, loss, status, seed=5, n_bootstrap=300)
    c = intrinsic_scores(r, loss, status, seed=6, n_bootstrap=300)
    assert a.intervals == b.intervals and a.intervals != c.intervals
    for name in ("R_m", "R_nu", "slope", "intercept", "r2"):
        low, high = a.intervals[name]
        assert low <= getattr(a, name) <= high, name
    # the R_m interval is close to the normal one
    se = r.std(ddof=1) / math.sqrt(len(r))
    assert a.intervals["R_m"][1] - a.intervals["R_m"][0] == pytest.approx(2 * 1.96 * se, rel=0.25)
    d = a.to_dict()
    assert set(d) >= {"R_m", "R_m_low", "R_m_high", "R_nu_low", "r2_high", "n_censored"}
    assert all(isinstance(d[k], float) for k in ("R_m", "R_nu", "slope", "intercept", "r2"))


def test_censored_inputs_are_never_averaged():
    r = np.array([1.0, 2.0, np.inf, 0.0, 4.0])
    loss = np.array([0.1, 0.05, 0.001, 2.0, 0.01])
    status = np.array(["exact", "attacked", "censored", "misclassified", "attacked"])
    s = intrinsic_scores(r, loss, status, n_bootstrap=50)
    assert s.n_censored == 1 and not s.lower_bounds
    assert s.R_m == pytest.approx((1 + 2 + 0 + 4) / 4)
    g = g_of_loss(loss)
    assert s.R_nu == pytest.approx((1 / g[0] + 2 / g[1] + 0 + 4 / g[4]) / 4)
    assert all(np.isfinite(v) for v in s.intervals["R_m"])
    b = intrinsic_scores(r, loss, status, censored="bound", censor_at=8.0, n_bootstrap=0)
    assert b.lower_bounds
    assert b.R_m == pytest.approx((1 + 2 + 8 + 0 + 4) / 5)
    assert b.R_m >= s.R_m
    with pytest.raises(InputError, match="censor_at"):
        intrinsic_scores(r, loss, status, censored="bound")
    with pytest.raises(InputError, match="row 2 is censored"):
        intrinsic_scores(np.where(np.isinf(r), 3.0, r), loss, status)
    with pytest.raises(InputError, match="row 1"):
        intrinsic_scores(np.array([1.0, np.inf]), loss[:2], status[:2])


def test_nonpositive_g_is_excluded_and_counted():
    # 3-class style: a well-classified input with p_y < 1/2 has loss > log 2
    r = np.array([1.0, 0.5, 0.2])
    loss = np.array([0.1, 0.3, 0.9])
    status = np.array(["attacked"] * 3)
    s = intrinsic_scores(r, loss, status, n_bootstrap=0)
    g = g_of_loss(loss)
    assert g[2] < 0
    assert s.n_nonpositive_g == 1 and s.n_used_R_nu == 2
    assert s.R_nu == pytest.approx((r[0] / g[0] + r[1] / g[1]) / 2)
    assert s.R_m == pytest.approx(r.mean())
    assert s.n_line == 3  # still a point of the (g, r) cloud
    # a loss that rounded to 0 gives g = inf: excluded from R_nu too
    s0 = intrinsic_scores(np.array([1.0, 2.0]), np.array([0.0, 0.2]),
                          np.array(["exact", "exact"]), n_bootstrap=0)
    assert s0.n_infinite_g == 1 and s0.R_nu == pytest.approx(2.0 / g_of_loss(0.2))


@settings(max_examples=50, deadline=None)
@given(st.floats(min_value=1e-12, max_value=700.0))
def test_g_inverts_the_logistic_loss(m):
    loss = np.logaddexp(0.0, -m)  # binary loss with margin m
    assert g_of_loss(loss) == pytest.approx(m, rel=1e-8, abs=1e-12)
    assert g_of_loss(np.logaddexp(0.0, m)) == pytest.approx(-m, rel=1e-8, abs=1e-12)


def test_cross_entropy_matches_definition_and_keeps_precision():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(50, 4)) * 3
    y = rng.integers(0, 4, 50)
    ref = -(z[np.arange(50), y] - np.log(np.exp(z).sum(axis=1)))
    np.testing.assert_allclose(cross_entropy(z, y), ref, rtol=1e-12)
    z2 = np.array([[0.0, 40.0]])
    assert cross_entropy(z2, np.array([1]))[0] == pytest.approx(math.exp(-40), rel=1e-12)


def test_bad_inputs_name_the_argument():
    ok_r, ok_l = np.array([1.0, 2.0]), np.array([0.1, 0.2])
    with pytest.raises(InputError, match="status: row 1"):
        intrinsic_scores(ok_r, ok_l, np.array(["exact", "broken"]))
    with pytest.raises(InputError, match="loss: row 0"):
        intrinsic_scores(ok_r, np.array([np.nan, 0.2]), np.array(["exact", "exact"]))
    with pytest.raises(InputError, match="lengths"):
        intrinsic_scores(ok_r, ok_l[:1], np.array(["exact", "exact"]))
    with pytest.raises(InputError, match="misclassified"):
        intrinsic_scores(ok_r, ok_l, np.array(["exact", "misclassified"]))
    with pytest.raises(InputError, match="easy"):
        subset_independence(ok_r, ok_l, np.array(["exact", "exact"]), easy=np.array([1, 0]))


def test_split_and_relative_variation():
    loss = np.array([0.5, 0.1, 0.3, 0.2, 0.9])
    easy = split_by_loss(loss)
    assert easy.tolist() == [False, True, False, True, False]
    assert relative_variation(3.0, 1.0) == pytest.approx(0.5)
    assert math.isnan(relative_variation(0.0, 0.0))
    r = np.array([1.0, 2.0, 3.0, 4.0])
    cmp = subset_independence(r, np.array([0.1, 0.2, 0.3, 0.4]), np.full(4, "exact"),
                              easy=np.array([True, False, True, False]), n_bootstrap=0)
    assert cmp.easy.R_m == 2.0 and cmp.hard.R_m == 3.0
    assert cmp.rel_var["R_m"] == pytest.approx(0.2)
    assert cmp.to_dict()["rel_var_R_m"] == pytest.approx(0.2)


def test_scores_from_result_uses_max_radius_for_bound():
    n = 3
    res = RadiusResult(
        radius=np.array([0.5, np.inf, 0.0]), lower_bound=np.zeros(n),
        status=np.array(["attacked", "censored", "misclassified"]), x_adv=np.zeros((n, 2)),
        label=np.zeros(n, int), prediction=np.array([0, 0, 1]), adv_prediction=np.ones(n, int),
        proba=np.full((n, 2), 0.5), proba_adv=np.full((n, 2), 0.5),
        loss=np.array([0.2, 0.1, 1.5]), forward_queries=np.ones(n, int),
        backward_queries=np.zeros(n, int), seconds=np.zeros(n), threat="l2", solver="test",
        max_radius=2.0)
    s = scores_from_result(res, censored="bound", n_bootstrap=0)
    assert s.R_m == pytest.approx((0.5 + 2.0 + 0.0) / 3)
    assert scores_from_result(res, n_bootstrap=0).R_m == pytest.approx(0.25)


def test_relative_variation_has_bootstrap_intervals():
    beta, margin, loss, radius, status, correct = _binary_logreg(seed=4)
    cmp = subset_independence(radius, loss, status, n_bootstrap=300, seed=2)
    for k in ("R_m", "R_nu"):
        low, high = cmp.rel_var_intervals[k]
        assert 0 <= low <= cmp.rel_var[k] <= high <= 1
    d = cmp.to_dict()
    assert d["rel_var_R_m_low"] <= d["rel_var_R_m"] <= d["rel_var_R_m_high"]
    # the halves are resampled with different streams
    assert not np.array_equal(cmp.easy.draws["R_m"], cmp.hard.draws["R_m"])
