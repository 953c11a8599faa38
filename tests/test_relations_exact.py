"""Relations between features in the exact solvers' programs (ReLU network MILP), and the
exact paths' statuses when a program does not hold the relations (tree ensembles)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import scipy.sparse as sp
import torch

from robustscope import radius
from robustscope.core.relations import Relations
from robustscope.core.space import FeatureSpace
from robustscope.solvers.exact_relu import exact_relu_radius, relu_layers
from robustscope.solvers.relations import relation_rows
from robustscope.threats import get_threat


def test_relation_rows_map_program_columns_to_raw_units():
    rel = Relations.build(["a", "b", "c"], ["a + 2 * b <= 4", "b - c == 1"])
    # columns: a -> 2, c -> 0; b fixed at 3; x = offset + coef * v
    cols, offset, coef = np.array([2, -1, 0]), np.array([1.0, 3.0, 0.5]), np.array([2.0, 1, 4])
    matrix, lo, hi = relation_rows(rel, cols, offset, coef, 4)
    assert isinstance(matrix, sp.csr_matrix) and matrix.shape == (2, 4)
    v = np.array([0.25, 9.0, 0.5, 9.0])
    x = offset + coef * np.where(cols >= 0, v[np.maximum(cols, 0)], 0.0)
    row_values = matrix @ v
    # a + 2b <= 4  <=>  row <= hi ; b - c == 1 <=> row == lo == hi
    np.testing.assert_allclose(row_values[0] - hi[0], x[0] + 2 * x[1] - 4)
    np.testing.assert_allclose(row_values[1] - hi[1], x[1] - x[2] - 1)
    assert lo[0] == -np.inf and lo[1] == hi[1]


def _tiny_net(seed: int = 0) -> torch.nn.Sequential:
    """A random 3-8-2 ReLU net whose boundary crosses the unit cube (class 1 where the
    hidden score is above its median over the cube)."""
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(),
                              torch.nn.Linear(8, 2)).double()
    with torch.no_grad():
        score = net[2].weight[1] - net[2].weight[0]
        hidden = net[1](net[0](torch.rand(2000, 3, dtype=torch.float64)))
        net[2].bias[1] = net[2].bias[0] - torch.median(hidden @ score)
    return net


def _grid(net, space, step=0.025):
    """Points of a grid of the cube that satisfy the relations, and the net's classes."""
    axis = np.arange(0, 1 + 1e-9, step)
    pts = np.array(list(itertools.product(axis, axis, axis)))
    pts = pts[space.relations_hold(pts)]
    with torch.no_grad():
        return pts, net(torch.as_tensor(pts)).argmax(1).numpy()


def _grid_radius(grid, x0, y0):
    """Best Linf radius over the grid points of another class (an upper bound)."""
    pts, pred = grid
    other = pred != y0
    return float(np.abs(pts[other] - x0).max(axis=1).min()) if other.any() else math.inf


def test_relu_milp_holds_relations():
    space = FeatureSpace.from_arrays([0, 0, 0], [1, 1, 1], names=["x0", "x1", "x2"]).constrain(
        ["x0 + x1 <= 1", "x2 >= x0"])
    linf, grew, finite = get_threat("linf"), 0, 0
    for seed in range(3):
        net = _tiny_net(seed)
        grid = _grid(net, space)
        rng = np.random.default_rng(seed)
        X = rng.uniform(0, 1, (40, 3))
        X = X[space.relations_hold(X)][:6]
        with torch.no_grad():
            y = net(torch.as_tensor(X)).argmax(1).numpy()
        layers = relu_layers(net)
        upper = np.full(len(X), np.inf)
        con = exact_relu_radius(layers, X, y, upper, space, linf, time_limit=20)
        free = exact_relu_radius(layers, X, y, upper, space.unconstrained(), linf,
                                 time_limit=20)
        for i in range(len(X)):
            best = _grid_radius(grid, X[i], y[i])
            assert con.lower_bound[i] >= free.lower_bound[i] - 1e-7
            # the certified bound is below every valid counterexample the grid finds
            assert con.lower_bound[i] <= best + 1e-7
            if not np.isfinite(con.radius[i]):
                continue
            finite += 1
            x_adv = np.asarray(con.x_adv[i]).reshape(-1)
            rel = space.relations
            assert (rel.A @ x_adv - rel.b).max() <= 1e-6  # the MILP's feasibility tolerance
            assert con.radius[i] <= best + 1e-7
            grew += con.radius[i] > free.radius[i] * (1 + 1e-6)
    assert finite >= 10 and grew >= 1  # the relations bind on some inputs


def test_relu_exact_search_gives_valid_counterexamples():
    net = _tiny_net(3)
    space = FeatureSpace.from_arrays([0, 0, 0], [1, 1, 1], names=["x0", "x1", "x2"]).constrain(
        ["x0 + x1 <= 1", "x2 >= x0"])
    rng = np.random.default_rng(3)
    X = rng.uniform(0, 1, (60, 3))
    X = X[space.relations_hold(X)][:8]
    with torch.no_grad():
        y = net(torch.as_tensor(X)).argmax(1).numpy()
    res = radius(net, X, y, space=space, solver="exact", threat="linf")
    assert res.found.sum() >= 4
    assert space.relations_hold(res.x_adv[res.found]).all()
    exact = res.status == "exact"
    np.testing.assert_allclose(res.radius[exact], res.lower_bound[exact], rtol=1e-4)
    free = radius(net, X, y, space=space.unconstrained(), solver="exact", threat="linf")
    both = res.found & free.found
    assert (res.radius[both] >= free.lower_bound[both] - 1e-7).all()


def test_tree_exact_path_stays_honest_under_relations():
    """The tree MILP does not hold the relations: its bound is still a certified lower bound,
    counterexamples are valid, and 'exact' only where the valid radius meets the bound."""
    from sklearn.ensemble import GradientBoostingClassifier

    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (300, 3))
    X[:, 2] = np.maximum(X[:, 2], X[:, 0])
    y = (X[:, 0] + X[:, 1] > 0.9).astype(int)
    gbm = GradientBoostingClassifier(n_estimators=10, max_depth=2, random_state=0).fit(X, y)
    space = FeatureSpace.from_arrays([0, 0, 0], [1, 1, 1], names=["a", "b", "c"]).constrain(
        ["c >= a", "a + b <= 1.5"])
    keep = space.relations_hold(X)
    res = radius(gbm, X[keep][:12], y[keep][:12], space=space, threat="linf")
    assert space.relations_hold(res.x_adv[res.found]).all()
    exact = res.status == "exact"
    np.testing.assert_allclose(res.radius[exact], res.lower_bound[exact], rtol=1e-4)
    assert (res.lower_bound[res.found] <= res.radius[res.found] * (1 + 1e-9)).all()
