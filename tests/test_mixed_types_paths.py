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


def test_lattice_moves_and_outward_rounding():
    from robustscope.search.lattice import lattice_moves, outward

    space = _space()
    moves = lattice_moves(space)
    # n_acc and flag one step up and down (age is immutable), each of the three arms
    assert len(moves) == 2 * 2 + 3
    x = torch.tensor([[0.5, 0.2, 40.0, 2.0, 0.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
    cand = x.clone()
    cand[0, 3] = 2.3  # a relaxed run that moved the count up by 0.3
    cand[0, 0] = 0.45
    out = outward(space, cand, x)
    assert out[0, 3] == 3.0 and out[0, 0] == 0.45  # integers away from x, reals untouched
    cand[0, 3] = 4.6  # beyond the bound: clipped to it
    assert outward(space, cand, x)[0, 3] == 4.0


def test_minnorm_alone_respects_the_lattice_on_a_linear_model():
    """A linear model in a torch module, ``solver="minnorm"``: the lattice stage keeps the
    radii near the exact MILP's (before it, rounding the relaxed runs left them many times
    above)."""
    from robustscope.solvers.exact.linear.closed_form import exact_linear_radius

    space = _space()
    X = _data(8, 3)
    rng = np.random.default_rng(5)
    W, b = rng.normal(size=(3, 8)), rng.normal(size=3)
    W[:, 2] *= 0.05
    layer = torch.nn.Linear(8, 3).double()
    with torch.no_grad():
        layer.weight.copy_(torch.as_tensor(W))
        layer.bias.copy_(torch.as_tensor(b))
    y = (X @ W.T + b).argmax(1)
    exact = exact_linear_radius(W, b, X, y, space, LINF)
    res = radius(layer.eval(), X, y, space=space, threat="linf", solver="minnorm")
    finite = np.isfinite(exact.radius)
    assert (res.found == finite).all()
    ratio = res.radius[finite] / exact.radius[finite]
    assert (ratio >= 1 - 1e-6).all()
    assert np.median(ratio) <= 1.05, ratio
    space.check_data(res.x_adv)
