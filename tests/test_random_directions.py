"""Random-direction radius: never below the exact radius of a linear model, verified."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robustscope.core.errors import InputError
from robustscope.core.space import FeatureSpace
from robustscope.models.base import QueryLedger
from robustscope.models.linear import LinearClassifier
from robustscope.search.random_directions import random_directions_radius
from robustscope.solvers.attacks.decision.random_directions import (
    random_directions_attack,
    sample_directions,
)
from robustscope.threats import get_threat


def _binary(d: int, seed: int = 0, n: int = 24):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=d)
    b = 0.3
    model = LinearClassifier(np.vstack([np.zeros(d), w]), np.array([0.0, b]))
    X = rng.uniform(0.2, 0.8, size=(n, d))
    y = (X @ w + b > 0).astype(int)
    y[0] = 1 - y[0]  # one misclassified input
    return model, w, b, X, y


@pytest.mark.parametrize("threat,dual", [("l2", 2), ("linf", 1)])
def test_never_below_exact_linear_radius(threat, dual):
    model, w, b, X, y = _binary(d=12)
    exact = np.abs(X @ w + b) / np.linalg.norm(w, dual)
    res = random_directions_radius(model, X, y, threat, n_directions=400, seed=1)
    assert res.status[0] == "misclassified" and res.radius[0] == 0
    hit = res.status == "attacked"
    assert hit[1:].all()
    assert (res.radius[hit] >= exact[hit] * (1 - 1e-9)).all()
    # every counterexample flips the model, called again, at the reported norm
    adv = torch.as_tensor(res.x_adv[hit])
    assert (model.predict(adv).numpy() != y[hit]).all()
    u = torch.as_tensor(res.x_adv[hit] - X[hit])
    norms = get_threat(threat).norm(u).numpy()
    np.testing.assert_allclose(norms, res.radius[hit], rtol=1e-9)
    assert (res.radius[hit] <= np.asarray(res.meta["isotropic_high"])[hit] * (1 + 1e-9)).all()


def test_bounded_space_projection_keeps_candidates_valid():
    model, w, b, X, y = _binary(d=6, seed=2)
    space = FeatureSpace.box(6)
    exact = np.abs(X @ w + b) / np.linalg.norm(w)
    res = random_directions_radius(model, X, y, "l2", space, n_directions=300, max_radius=3.0)
    hit = res.status == "attacked"
    assert hit.any()
    assert (res.x_adv >= 0).all() and (res.x_adv <= 1).all()
    assert (res.radius[hit] >= exact[hit] * (1 - 1e-9)).all()
    cens = res.status == "censored"
    assert np.isinf(res.radius[cens]).all()


def test_low_dimension_isotropic_radius_is_close_to_exact():
    # in 2-D, 5000 directions cover the circle: the isotropic radius is the exact one
    model, w, b, X, y = _binary(d=2, seed=4)
    res = random_directions_radius(model, X, y, "l2", n_directions=5000, rtol=1e-3)
    exact = np.abs(X @ w + b) / np.linalg.norm(w)
    hit = res.status == "attacked"
    ratio = res.radius[hit] / exact[hit]
    assert (ratio >= 1 - 1e-9).all() and (ratio <= 1.01).all()


def test_queries_are_charged_and_censoring_at_max_radius():
    model, w, b, X, y = _binary(d=8, seed=5, n=6)
    ledger = QueryLedger(len(X))
    exact = np.abs(X @ w + b) / np.linalg.norm(w)
    cap = float(np.median(exact[1:]))
    res = random_directions_radius(model, X, y, "l2", n_directions=50, max_radius=cap,
                                   ledger=ledger)
    assert (ledger.forward > 0).all()
    np.testing.assert_array_equal(res.forward_queries, ledger.forward)
    below = exact[1:] > cap
    assert (res.status[1:][below] == "censored").all()
    # a censored input was tried at max_radius with every direction
    assert (res.forward_queries[1:][below] >= 50).all()


def test_solver_interface_returns_input_when_nothing_found():
    model, w, b, X, y = _binary(d=5, seed=6, n=8)
    x = torch.as_tensor(X)
    yt = torch.as_tensor(y)
    space = FeatureSpace.from_arrays(np.full(5, -np.inf), np.full(5, np.inf), np.ones(5))
    tiny = torch.full((8,), 1e-9, dtype=torch.float64)
    out = random_directions_attack(model, x, yt, space, "l2", tiny, n_directions=20)
    assert torch.equal(out.x_adv[1:], x[1:]) and not out.found[1:].any()
    big = torch.full((8,), 100.0, dtype=torch.float64)
    out = random_directions_attack(model, x, yt, space, "l2", big, n_directions=200)
    assert (model.predict(out.x_adv[1:]) != yt[1:]).all() and out.found[1:].all()


@pytest.mark.parametrize("name", ["l2", "linf", "l1"])
def test_directions_have_unit_norm(name):
    threat = get_threat(name)
    g = torch.Generator().manual_seed(0)
    u = sample_directions(100, 7, threat, g, torch.float64)
    np.testing.assert_allclose(threat.norm(u).numpy(), 1.0, rtol=1e-12)


def test_bad_labels():
    model, w, b, X, y = _binary(d=3, n=4)
    with pytest.raises(InputError, match="y"):
        random_directions_radius(model, X, np.array([0, 1, 2, 0]))


def test_budget_stops_inputs_without_raising():
    model, w, b, X, y = _binary(d=8, seed=7, n=6)
    ledger = QueryLedger(len(X), budget=701)
    res = random_directions_radius(model, X, y, "l2", n_directions=200, ledger=ledger,
                                   max_elements=8 * 6 * 50)  # chunks of 50 directions
    assert (ledger.used() <= 701).all()
    assert res.meta["budget_exhausted"] > 0
    exact = np.abs(X @ w + b) / np.linalg.norm(w)
    hit = res.status == "attacked"
    assert (res.radius[hit] >= exact[hit] * (1 - 1e-9)).all()
    assert (model.predict(torch.as_tensor(res.x_adv[hit])).numpy() != y[hit]).all()


def test_float32_networks_are_verified_in_float64():
    """The verification measures in float64 whatever the model's dtype (a float32 network's
    candidates once failed to enter the float64 record of the best radius)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    from robustscope.models.torch_model import TorchClassifier

    model = TorchClassifier(net, 3, (4,))
    X = np.random.default_rng(0).uniform(size=(6, 4))
    y = model.predict(model.as_tensor(X)).numpy()
    res = random_directions_radius(model, X, y, "l2", FeatureSpace.box(4), n_directions=50,
                                   max_radius=4.0)
    assert res.radius.dtype == np.float64 and (res.status != "failed").all()
