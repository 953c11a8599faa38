"""The tutorial's readings: flip rate, score shift, IsolationForest check, Proxy-A distance,
figures; and the tutorial's row-wise range trap."""

from __future__ import annotations

import numpy as np
import pytest

from robustscope.core.errors import InputError
from robustscope.core.result import ATTACKED, CENSORED, MISCLASSIFIED
from robustscope.core.space import FeatureSpace
from robustscope.report.tabular_figures import (
    flip_rate_figure,
    ood_figure,
    save_figure,
    score_scatter_figure,
)
from robustscope.scores.distribution import flip_rate, ood_check, proxy_a_distance, score_shift


def test_feature_ranges_are_per_column_not_per_row():
    # the tutorial took min/max of dataset.data[i] (row i) as the range of feature i
    X = np.array([[1.0, 1000.0, -5.0], [3.0, 3000.0, 5.0], [2.0, 2000.0, 0.0],
                  [2.5, 1500.0, 1.0]])
    space = FeatureSpace.from_data(X)
    assert np.array_equal(space.lower, [1.0, 1000.0, -5.0])
    assert np.array_equal(space.upper, [3.0, 3000.0, 5.0])
    assert np.array_equal(space.scale, [2.0, 2000.0, 10.0])
    row_wise = [X[i].max() - X[i].min() for i in range(3)]
    assert not np.allclose(space.scale, row_wise)


def test_flip_rate_counts_censored_as_never_flipped():
    radius = np.array([0.1, 0.2, np.inf, 0.4, 0.0, 0.3])
    status = np.array([ATTACKED, ATTACKED, CENSORED, ATTACKED, MISCLASSIFIED, CENSORED])
    labels = np.array([0, 1, 0, 1, 0, 1])
    table = flip_rate(radius, [0.0, 0.15, 0.25, 0.5, 10.0], labels=labels, status=status)
    overall = table[table.group == "all"]
    # misclassified left out: 5 inputs; the censored one with a finite radius field too
    assert overall.n.iloc[0] == 5
    assert np.allclose(overall.flip_rate, [0, 1 / 5, 2 / 5, 3 / 5, 3 / 5])
    c1 = table[table.group == 1]
    assert c1.n.iloc[0] == 3 and np.allclose(c1.flip_rate, [0, 0, 1 / 3, 2 / 3, 2 / 3])
    with_mis = flip_rate(radius, [0.0], status=status, include_misclassified=True)
    assert np.isclose(with_mis.flip_rate.iloc[0], 1 / 6)
    with pytest.raises(InputError, match="NaN"):
        flip_rate(np.array([0.1, np.nan]), [0.1])


def test_score_shift_reads_the_predicted_class():
    proba = np.array([[0.9, 0.1], [0.2, 0.8]])
    proba_adv = np.array([[0.4, 0.6], [0.7, 0.3]])
    before, after = score_shift(proba, proba_adv)
    assert np.allclose(before, [0.9, 0.8]) and np.allclose(after, [0.4, 0.3])


def test_isolation_forest_inliers_are_predict_equal_one():
    rng = np.random.default_rng(0)
    X_train = rng.normal(size=(500, 4))
    X_clean = rng.normal(size=(50, 4))
    X_adv = rng.normal(size=(40, 4)) * 0.2 + 8.0  # far from the training data
    report = ood_check(X_train, X_clean, X_adv, seed=0)
    assert report.adv_outliers == 40 and report.adv_outlier_rate == 1.0
    assert report.clean_outlier_rate < 0.2
    assert report.clean_inlier.sum() + report.clean_outliers == 50
    # outliers score below the threshold, inliers above
    assert (report.adv_score < report.threshold).all()
    assert np.array_equal(report.clean_inlier, report.clean_score >= report.threshold)


def test_proxy_a_distance_separates_and_confounds():
    rng = np.random.default_rng(1)
    real = rng.normal(size=(300, 3))
    same = rng.normal(size=(300, 3))
    far = rng.normal(size=(300, 3)) + 6.0
    low = proxy_a_distance(real, same, seed=0)
    high = proxy_a_distance(real, far, seed=0)
    assert low.interval[0] <= 0.0 <= low.interval[1] or abs(low.pad) < 0.4
    assert high.pad > 1.8 and high.interval[0] > 1.5
    assert low.bootstrap[0] <= low.pad <= low.bootstrap[1]
    paired = proxy_a_distance(real, real + 0.01, seed=0, paired=True)
    assert paired.pad < 0.6
    with pytest.raises(InputError, match="paired"):
        proxy_a_distance(real, far[:10], paired=True)


def test_figures_render_to_png(tmp_path):
    rng = np.random.default_rng(2)
    radius = np.r_[rng.uniform(0, 0.3, 20), np.inf]
    status = np.array([ATTACKED] * 20 + [CENSORED])
    labels = rng.integers(0, 2, 21)
    fig = flip_rate_figure(radius, labels=labels, status=status)
    assert len(fig.axes[0].lines) == 3
    p = rng.uniform(0.5, 1, 20)
    proba = np.c_[1 - p, p]
    fig2 = score_scatter_figure(proba, proba[:, ::-1], radius[:20])
    report = ood_check(rng.normal(size=(100, 2)), rng.normal(size=(10, 2)),
                       rng.normal(size=(10, 2)) + 3)
    for i, f in enumerate((fig, fig2, ood_figure(report))):
        path = save_figure(f, tmp_path / f"f{i}.png")
        assert path.read_bytes()[:4] == b"\x89PNG"


def test_score_scatter_draws_a_seeded_subset_of_many_points(monkeypatch):
    import robustscope.report.figures as figures

    monkeypatch.setattr(figures, "MAX_SCATTER_POINTS", 50)
    rng = np.random.default_rng(3)
    p = rng.uniform(0.5, 1, 400)
    proba = np.c_[1 - p, p]
    radius = rng.uniform(0, 1, 400)
    ax = score_scatter_figure(proba, proba[:, ::-1], radius).axes[0]
    offsets = ax.collections[0].get_offsets()
    assert len(offsets) == 50
    assert "50 of 400 drawn at random" in ax.get_title()
    # the drawn points are inputs' own (before, after) pairs, not resampled values
    assert set(np.round(offsets[:, 0], 12)) <= set(np.round(p, 12))
