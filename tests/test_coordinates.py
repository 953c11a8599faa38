"""The L2 / L1 polish of the gradient-free cascade on piecewise-constant (tree-like) models."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from robustscope.core.space import FeatureSpace
from robustscope.models.base import QueryLedger
from robustscope.models.blackbox import ProbaClassifier
from robustscope.models.metered import MeteredModel
from robustscope.solvers.attacks.decision.coordinates import bisect_coordinates, polish
from robustscope.solvers.attacks.decision.gradient_free import gradient_free
from robustscope.solvers.attacks.decision.scaled_oracle import ScaledOracle
from robustscope.threats import get_threat


def _box_model(thresholds: np.ndarray, d: int) -> ProbaClassifier:
    """Class 1 where every feature ``j < len(thresholds)`` is above ``thresholds[j]``: an
    axis-aligned box, piecewise constant like a tree; its score counts the features past
    their threshold (so a score-following search has something to follow)."""
    t = np.asarray(thresholds, dtype=float)

    def proba(a):
        past = (np.asarray(a)[:, : len(t)] > t).sum(1)
        p1 = np.where(past == len(t), 0.9, 0.4 * past / len(t))
        return np.stack([1 - p1, p1], axis=1)

    return ProbaClassifier(proba, 2, (d,))


def _oracle(model, d: int, n: int = 1, budget: int | None = None, ledger=None):
    space = FeatureSpace.from_arrays([-2.0] * d, [2.0] * d, scale=np.ones(d))
    x = torch.zeros(n, d, dtype=torch.float64)  # below every threshold: class 0
    return ScaledOracle(model, x, torch.zeros(n, dtype=torch.long), space, get_threat("l2"),
                        budget=budget, ledger=ledger)


def test_polish_drops_the_moves_that_do_not_matter_and_pins_the_others():
    d = 6
    model = _box_model(np.array([0.3, 0.2]), d)
    ledger = QueryLedger(1)
    oracle = _oracle(MeteredModel(model, ledger, np.arange(1)), d, budget=500)
    dense = torch.tensor([[[0.9, 0.6, 0.05, -0.04, 0.03, 0.2]]], dtype=torch.float64)
    oracle.query(np.arange(1), dense)
    assert oracle.best_r[0] > 1.0
    polish(oracle)
    u = oracle.best_u[0].numpy()
    assert (u[2:] == 0).all()  # every move the decision does not need is gone
    assert 0.3 < u[0] <= 0.3 + 0.9 / 2**8 and 0.2 < u[1] <= 0.2 + 0.6 / 2**8
    assert oracle.best_r[0] == np.linalg.norm(u)
    assert ledger.forward[0] == oracle.used[0] <= 500
    assert model.predict(oracle.candidates())[0] == 1  # the model confirms it


def test_polish_stops_where_the_budget_does():
    d = 6
    model = _box_model(np.array([0.3, 0.2]), d)
    oracle = _oracle(model, d, n=3, budget=12)
    dense = torch.tensor([[0.9, 0.6, 0.05, -0.04, 0.03, 0.2]], dtype=torch.float64)
    oracle.query(np.arange(3), dense.expand(3, 6).unsqueeze(1))
    before = oracle.best_r.clone()
    polish(oracle)
    assert (oracle.used == 12).all()
    assert (oracle.best_r <= before).all()


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(0.05, 0.8), min_size=1, max_size=4),
       st.lists(st.floats(0.0, 0.5), min_size=6, max_size=6))
def test_polish_never_goes_below_the_exact_radius_and_ends_close_to_it(thresholds, extra):
    """On a box the exact L2 radius is the norm of the thresholds; from any counterexample
    past them, the polish ends at a verified point no smaller and within the bisection's
    resolution above."""
    d = 6
    t = np.asarray(thresholds)
    model = _box_model(t, d)
    oracle = _oracle(model, d)
    start = np.asarray(extra, dtype=float)
    start[: len(t)] = t + 0.1 + start[: len(t)]
    oracle.query(np.arange(1), torch.as_tensor(start).reshape(1, 1, d))
    polish(oracle)
    exact = np.linalg.norm(t)
    r = float(oracle.best_r[0])
    assert r > exact
    assert r <= np.linalg.norm(t + start[: len(t)] / 2**8) + 1e-12
    assert model.predict(oracle.candidates())[0] == 1


def test_bisect_leaves_a_point_it_cannot_shrink_untouched():
    d = 3
    model = _box_model(np.array([0.5]), d)
    oracle = _oracle(model, d, budget=50)
    oracle.query(np.arange(1), torch.tensor([[[0.5 + 1e-12, 0.0, 0.0]]], dtype=torch.float64))
    r = float(oracle.best_r[0])
    bisect_coordinates(oracle)
    assert float(oracle.best_r[0]) == r  # every shrunk trial falls short of the threshold


def test_the_cascade_under_l2_keeps_a_share_for_the_polish_and_ends_sparse():
    d = 10
    model = _box_model(np.array([0.3, 0.2]), d)
    space = FeatureSpace.from_arrays([-2.0] * d, [2.0] * d, scale=np.ones(d))
    x = torch.zeros(4, d, dtype=torch.float64)
    y = model.predict(x)
    g = lambda: torch.Generator().manual_seed(0)  # noqa: E731
    ledger = QueryLedger(len(x))
    view = MeteredModel(model, ledger, np.arange(len(x)))
    run = gradient_free(view, x, y, space, "l2", budget=400, generator=g())
    bare = gradient_free(model, x, y, space, "l2", budget=400, generator=g(), polish_share=0.0)
    assert (run.forward_queries <= 400).all() and (ledger.forward == run.forward_queries).all()
    exact = np.hypot(0.3, 0.2)
    assert (run.radius > exact).all() and (run.radius < exact * 1.01).all()
    assert (run.radius <= bare.radius).all()
    u = space.scaled_delta(run.x_adv, x).numpy()
    assert (u[:, 2:] == 0).all()
