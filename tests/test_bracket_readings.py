"""Readings and the report figure of certified brackets [lower_bound, radius]."""

from __future__ import annotations

import numpy as np
import pytest

from robustscope.core.result import RadiusResult
from robustscope.report.bracket_figures import bracket_figure, has_brackets
from robustscope.scores.certified import bracket_summary, certified_accuracy


def test_certified_accuracy_counts_bounds_above_each_strength():
    lb = np.array([0.0, 0.1, 0.2, 0.3])
    status = np.array(["misclassified", "exact", "attacked", "censored"], dtype=object)
    acc = certified_accuracy(lb, status, np.array([0.0, 0.1, 0.25, 0.5]))
    np.testing.assert_allclose(acc, [0.75, 0.5, 0.25, 0.0])


def test_bracket_summary_ratio_and_closed():
    r = np.array([0.0, 0.2, 0.3, 0.4, np.inf])
    lb = np.array([0.0, 0.2, 0.15, 0.0, 0.5])
    status = np.array(["misclassified", "exact", "attacked", "attacked", "censored"],
                      dtype=object)
    s = bracket_summary(r, lb, status)
    assert (s.n, s.certified, s.closed) == (3, 2, 1)
    assert s.ratio_median == pytest.approx(2.0)
    assert s.ratio_p90 == np.inf


def test_bracket_figure_draws_both_panels():
    n = 6
    r = np.linspace(0.1, 0.6, n)
    res = RadiusResult(radius=r, lower_bound=r * 0.8, status=np.full(n, "attacked", object),
                       x_adv=np.zeros((n, 2)), label=np.zeros(n, int),
                       prediction=np.zeros(n, int), adv_prediction=np.ones(n, int),
                       proba=np.full((n, 2), 0.5), proba_adv=np.full((n, 2), 0.5),
                       loss=np.zeros(n), forward_queries=np.ones(n, int),
                       backward_queries=np.zeros(n, int), seconds=np.zeros(n),
                       threat="linf", solver="auto", max_radius=1.0)
    assert has_brackets(res)
    fig = bracket_figure(res, "t")
    assert len(fig.axes) == 2
    assert "0/6 closed" in fig.axes[0].get_title()
