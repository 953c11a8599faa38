"""Readings and the report figure of certified brackets [lower_bound, radius]."""

from __future__ import annotations

import numpy as np
import pytest

from robustscope.core.result import RadiusResult
from robustscope.report.bracket_figures import (
    bracket_figure,
    certified_accuracy_figure,
    has_brackets,
)
from robustscope.scores.certified import bracket_summary, certified_accuracy


def _attacked(r: np.ndarray, lb: np.ndarray, max_radius: float) -> RadiusResult:
    """A binary-model result whose every input is ``attacked`` with radius ``r`` and certified
    lower bound ``lb``."""
    n = len(r)
    return RadiusResult(radius=r, lower_bound=lb, status=np.full(n, "attacked", object),
                        x_adv=np.zeros((n, 2)), label=np.zeros(n, int),
                        prediction=np.zeros(n, int), adv_prediction=np.ones(n, int),
                        proba=np.full((n, 2), 0.5), proba_adv=np.full((n, 2), 0.5),
                        loss=np.zeros(n), forward_queries=np.ones(n, int),
                        backward_queries=np.zeros(n, int), seconds=np.zeros(n),
                        threat="linf", solver="auto", max_radius=max_radius)


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


def test_bracket_figures_are_two_figures_of_the_reports_size():
    """#43 item 11: the brackets and the two accuracy curves are two figures, each the
    report's usual 6 in wide (one slot each), not two panels squeezed into one slot."""
    n = 6
    r = np.linspace(0.1, 0.6, n)
    res = _attacked(r, r * 0.8, max_radius=1.0)
    assert has_brackets(res)
    brackets, curves = bracket_figure(res, "t"), certified_accuracy_figure(res, "t")
    assert len(brackets.axes) == 1 and len(curves.axes) == 1
    assert "0/6 closed" in brackets.axes[0].get_title()
    labels = [line.get_label() for line in curves.axes[0].get_lines()]
    assert labels == ["empirical (verified radii)", "certified (lower bounds)"]
    assert tuple(brackets.get_size_inches()) == tuple(curves.get_size_inches()) == (6, 4.2)



def test_bracket_figure_draws_at_most_max_drawn_inputs():
    """A million-row run must not draw a million markers (the report's memory budget): the
    left panel draws evenly spaced ranks, the first and last included, and says so."""
    from robustscope.report.bracket_figures import MAX_DRAWN

    n = 5 * MAX_DRAWN + 3
    r = np.random.default_rng(0).uniform(0.1, 1.0, n)
    res = _attacked(r, r * 0.9, max_radius=2.0)
    left = bracket_figure(res, "t").axes[0]
    lines = left.get_lines()
    assert lines and all(len(line.get_xdata()) <= MAX_DRAWN for line in lines)
    radii = next(line for line in lines if line.get_label() == "verified radius")
    assert radii.get_ydata()[0] == r.min() and radii.get_ydata()[-1] == r.max()
    assert f"{MAX_DRAWN:,} of {n:,} drawn" in left.get_xlabel()
