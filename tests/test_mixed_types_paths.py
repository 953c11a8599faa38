"""Mixed-type tables (real, immutable integer, integer, binary, one-hot, a relation): the
network MILP against brute force over the lattice, and the white-box, black-box and exact
paths agreeing on every input."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from robustscope import FeatureSpace, wrap_model
from robustscope.search.engine import radius
from robustscope.solvers.exact.relu.milp import exact_relu_radius
from robustscope.threats import L1, LINF

NAMES = ["income", "debt", "age", "n_acc", "flag", "r_a", "r_b", "r_c"]
LOWER = np.array([0, 0, 18, 0, 0, 0, 0, 0], dtype=float)
UPPER = np.array([1, 1, 80, 4, 1, 1, 1, 1], dtype=float)


def _space(real_mutable: bool = True) -> FeatureSpace:
    return FeatureSpace.from_arrays(
        LOWER, UPPER, types=["real", "real", "integer", "integer", "binary"]
        + ["categorical"] * 3,
        mutable=[real_mutable, real_mutable, False, True, True, True, True, True],
        names=NAMES, groups=[[5, 6, 7]]).constrain(["debt <= income"])


def _data(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    inc = rng.uniform(0, 1, n)
    return np.column_stack([inc, inc * rng.uniform(0, 1, n), rng.integers(18, 81, n),
                            rng.integers(0, 5, n), rng.integers(0, 2, n),
                            np.eye(3)[rng.integers(0, 3, n)]]).astype(float)


@pytest.fixture(scope="module")
def network():
    """An 8-16-3 ReLU network (min-max scaling folded into its first layer) trained on a
    score of every feature."""
    X = _data(600, 0)
    score = (2 * X[:, 0] - 3 * X[:, 1] + 0.02 * (X[:, 2] - 50) + 0.3 * X[:, 3]
             + 0.4 * X[:, 4] + X[:, 5:] @ [0.5, -0.5, 0.0])
    y = np.digitize(score, np.quantile(score, [0.33, 0.66]))
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    net = net.double()
    xt = torch.as_tensor((X - LOWER) / (UPPER - LOWER))
    opt = torch.optim.Adam(net.parameters(), 2e-2)
    for _ in range(300):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(xt), torch.as_tensor(y)).backward()
        opt.step()
    with torch.no_grad():
        w = net[0].weight / torch.as_tensor(UPPER - LOWER)
        net[0].bias -= w @ torch.as_tensor(LOWER)
        net[0].weight.copy_(w)
    return net.eval()


def _predict(net, X: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return net(torch.as_tensor(X, dtype=torch.float64)).argmax(1).numpy()


@pytest.mark.parametrize("threat", [LINF, L1])
def test_relu_milp_on_the_lattice_matches_brute_force(network, threat):
    """Only the discrete features move: every (n_acc, flag, arm) enumerated."""
    space = _space(real_mutable=False)
    X = _data(10, 1)
    y = _predict(network, X)
    out = exact_relu_radius(network, X, y, np.full(len(X), np.inf), space, threat,
                            time_limit=20.0)
    ref = np.full(len(X), np.inf)
    for i, x in enumerate(X):
        for n_acc, flag, arm in itertools.product(range(5), range(2), range(3)):
            xd = x.copy()
            xd[3], xd[4], xd[5:] = n_acc, flag, np.eye(3)[arm]
            if _predict(network, xd[None])[0] != y[i]:
                ref[i] = min(ref[i], float(threat.norm(torch.as_tensor(
                    (xd - x) / space.scale)[None])[0]))
    finite = np.isfinite(ref)
    assert finite.sum() >= 5
    assert np.allclose(out.lower_bound[finite], ref[finite], rtol=1e-6)
    assert np.allclose(out.radius[finite], ref[finite], rtol=1e-6)
    assert (out.lower_bound[~finite] == np.inf).all()
    space.check_data(np.round(out.x_adv.numpy()[finite], 9))


@pytest.mark.parametrize("threat", ["linf", pytest.param("l1", marks=pytest.mark.slow)])
def test_white_box_black_box_and_exact_agree_on_every_input(network, threat):
    """Every feature type and a relation: the network MILP (exact), the white-box search
    (gradients) and the black-box search (``predict_proba`` only) agree within 10% on every
    input, none censored, every counterexample valid."""
    space = _space()
    X = _data(8, 2)
    y = _predict(network, X)
    exact = radius(network, X, y, space=space, threat=threat, solver="exact")
    white = radius(network, X, y, space=space, threat=threat)

    def proba(a):
        with torch.no_grad():
            return torch.softmax(network(torch.as_tensor(a, dtype=torch.float64)), 1).numpy()

    black = radius(wrap_model(proba, n_classes=3), X, y, space=space, threat=threat)
    assert (exact.status == "exact").all()
    for res in (white, black):
        assert (res.status != "censored").all()
        assert (res.radius >= exact.radius * (1 - 1e-6)).all()
        assert (res.radius <= exact.radius * 1.10).all(), res.radius / exact.radius
        space.check_data(res.x_adv)
        assert space.relations_hold(res.x_adv).all()
        assert np.array_equal(res.x_adv[:, 2], X[:, 2])
        assert (_predict(network, res.x_adv) != y).all()
