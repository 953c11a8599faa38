"""Figures of the intrinsic scores: they draw what they are given and write PNGs."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from robustscope.report.intrinsic_figures import plot_radius_vs_g, plot_subsets, save_figure
from robustscope.scores.intrinsic import g_of_loss, intrinsic_scores, subset_independence


def _data():
    rng = np.random.default_rng(0)
    margin = rng.uniform(-2, 6, size=60)
    ok = margin > 0
    return (np.where(ok, margin / 3, 0.0), np.logaddexp(0, -margin),
            np.where(ok, "exact", "misclassified"))


def test_radius_vs_g_draws_points_and_fit(tmp_path):
    r, loss, status = _data()
    s = intrinsic_scores(r, loss, status, n_bootstrap=20)
    fig = plot_radius_vs_g(s)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    points = ax.collections[0].get_offsets()
    assert len(points) == (status == "exact").sum()
    np.testing.assert_allclose(points[:, 0], g_of_loss(loss[status == "exact"]))
    assert any("R² = 1.000" in t.get_text() for t in ax.get_legend().get_texts())
    path = save_figure(fig, tmp_path / "f.png")
    assert path.stat().st_size > 1000


def test_subset_bars(tmp_path):
    r, loss, status = _data()
    cmp = subset_independence(r, loss, status, n_bootstrap=20)
    fig = plot_subsets(cmp)
    heights = [p.get_height() for p in fig.axes[0].patches]
    np.testing.assert_allclose(heights, [cmp.easy.R_m, cmp.easy.R_nu, cmp.hard.R_m,
                                         cmp.hard.R_nu])
    assert save_figure(fig, tmp_path / "b.png").exists()


def test_radius_vs_g_draws_a_seeded_subset_of_many_points(monkeypatch):
    import robustscope.report.figures as figures

    monkeypatch.setattr(figures, "MAX_SCATTER_POINTS", 25)
    r, loss, status = _data()
    s = intrinsic_scores(r, loss, status, n_bootstrap=0)
    ax = plot_radius_vs_g(s).axes[0]
    drawn = sum(len(c.get_offsets()) for c in ax.collections)
    assert drawn <= 25
    assert "25 of 60 drawn at random" in ax.get_title()
    again = plot_radius_vs_g(s).axes[0]
    np.testing.assert_array_equal(ax.collections[0].get_offsets(),
                                  again.collections[0].get_offsets())
