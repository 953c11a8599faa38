"""benchmarks/blackbox_peers.py: the tracker that measures every black-box peer counts the rows
the model saw, never lets an attack past its budget, keeps only counterexamples the model
confirmed, and reads the best radius within each smaller budget from one run; the RayS-style
search reaches a linear model's closed-form Linf radius. None of this needs ART."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from blackbox_peers import Spent, Tracker, peer_radii  # noqa: E402


def linear_model(d: int = 6, seed: int = 0):
    rng = np.random.default_rng(seed)
    w, b = rng.normal(size=d), 0.1

    def proba(a):
        p1 = 1 / (1 + np.exp(-(np.asarray(a) @ w + b)))
        return np.stack([1 - p1, p1], axis=1)

    return w, b, proba


def test_tracker_counts_rows_stops_at_the_budget_and_keeps_confirmed_points():
    w, b, proba = linear_model()
    d = len(w)
    z0 = np.full(d, 0.5)
    label = int(proba(z0[None]).argmax(1)[0])
    tracker = Tracker(proba, np.zeros(d), np.ones(d), z0, label, math.inf, budget=5)
    far = z0 - np.sign(w) * (1 if label == 1 else -1) * 0.5  # a corner across the boundary
    assert proba(far[None]).argmax(1)[0] != label
    tracker(np.stack([z0, far]))  # rows 1, 2: row 2 flips
    with pytest.raises(Spent):
        tracker(np.stack([z0, z0, far, far]))  # rows 3-5 count, row 6 is past the budget
    assert tracker.rows == 6  # the model computed the whole batch; only 5 rows count
    assert [row for row, _ in tracker.hits] == [2, 5]
    assert np.allclose(tracker.best_within([1, 2, 5]), [np.inf, 0.5, 0.5])
    with pytest.raises(Spent):
        tracker(z0[None])


def test_rays_reaches_the_closed_form_linf_radius_of_a_linear_model():
    w, b, proba = linear_model(d=6, seed=3)
    rng = np.random.default_rng(1)
    X = rng.uniform(0.3, 0.7, (4, 6))
    labels = proba(X).argmax(1)
    exact = np.abs(X @ w + b) / np.abs(w).sum()  # the box [0, 1] is not reached here
    radii = peer_radii("rays", proba, np.zeros(6), np.ones(6), X, labels, math.inf,
                       (50, 2000), k=2)
    assert (radii[:, 1] >= exact * (1 - 1e-9)).all()
    assert (radii[:, 1] <= exact * 1.01).all()
    assert (radii[:, 0] >= radii[:, 1]).all()  # more rows can only help
