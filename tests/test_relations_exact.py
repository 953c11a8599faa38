"""Relations between features in the exact solvers' programs: the ReLU network MILP and the
tree-ensemble MILP, each against a brute force over valid points."""

from __future__ import annotations

import itertools
import math

import numpy as np
import scipy.sparse as sp
import torch

from robustscope import radius
from robustscope.core.relations import Relations
from robustscope.core.space import FeatureSpace
from robustscope.solvers.exact.relu.milp import exact_relu_radius, relu_layers
from robustscope.solvers.milp.relation_rows import relation_rows
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
    # both are MILP optima, each exact up to the solver's tolerances (the search calls a
    # bracket within a relative 1e-4 exact): the valid radius cannot undercut the free one
    # by more than that
    assert (res.radius[both] >= free.lower_bound[both] * (1 - 1e-4)).all()


def test_tree_exact_path_stays_honest_under_relations():
    """The search's tree path under relations: counterexamples are valid, 'exact' only where
    the valid radius meets the bound, and (the MILP holding the relations) every bracket
    closes."""
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
    searched = ~np.isin(res.status, ("misclassified", "satisfied"))
    assert searched.sum() >= 8 and (res.status[searched] == "exact").all()


# -- tree ensembles: the MILP holds the relations ---------------------------------------------
def _tree_models(X: np.ndarray, y: np.ndarray) -> dict:
    import lightgbm
    import xgboost
    from sklearn.ensemble import RandomForestClassifier

    return {
        "xgboost": xgboost.XGBClassifier(n_estimators=8, max_depth=3, learning_rate=0.5,
                                         n_jobs=1).fit(X, y),
        "lightgbm": lightgbm.LGBMClassifier(n_estimators=8, num_leaves=6, min_child_samples=5,
                                            n_jobs=1, verbose=-1).fit(X, y),
        "forest": RandomForestClassifier(n_estimators=5, max_depth=4, random_state=0,
                                         n_jobs=1).fit(X, y),
    }


def _valid_flip_distances(model, pts: np.ndarray, x0: np.ndarray, y0: int, p: float,
                          scale: np.ndarray) -> np.ndarray:
    """Distances of the valid points ``pts`` ``(m, d)`` that the model classifies other
    than ``y0`` (the brute force: every entry bounds the radius from above)."""
    other = model.predict(pts) != y0
    return np.linalg.norm((pts[other] - x0) / scale, ord=p, axis=1)


def _check_tree_radius(model, space, X, y, grid_of, threats=("linf", "l1", "l2")) -> int:
    """Exact tree radii under the relations against the brute force over valid points;
    returns how many inputs closed (status ``exact``)."""
    from robustscope.solvers.exact.trees.driver import exact_tree_radius

    closed = 0
    for threat in threats:
        p = get_threat(threat).p
        radii = {}
        for prune in (True, False):
            res = exact_tree_radius(model, X, y, space, threat, time_limit=20, prune=prune)
            radii[prune] = np.where(res.status == "exact", res.radius, np.nan)
            for i in range(len(X)):
                if res.status[i] in ("misclassified", "satisfied"):
                    continue
                dist = _valid_flip_distances(model, grid_of(X[i]), X[i], int(y[i]), p,
                                             space.scale)
                best = float(dist.min()) if len(dist) else math.inf
                # the certified bound is below every valid flipping point
                assert res.lower_bound[i] <= best + 1e-7, (threat, prune, i)
                if np.isfinite(res.radius[i]):
                    x_adv = np.asarray(res.x_adv[i]).reshape(1, -1)
                    assert space.relations_hold(x_adv).all()
                    assert model.predict(x_adv)[0] != y[i]
                    assert res.radius[i] <= best + 1e-7, (threat, prune, i)
                    r = np.linalg.norm((x_adv[0] - X[i]) / space.scale, ord=p)
                    np.testing.assert_allclose(res.radius[i], r, rtol=1e-9)
                if res.status[i] == "exact":
                    closed += 1
                    np.testing.assert_allclose(res.lower_bound[i], res.radius[i], rtol=1e-7)
        # the fast path (greedy walks, dropped when they break a relation) and the MILP alone
        # agree wherever both close
        both = np.isfinite(radii[True]) & np.isfinite(radii[False])
        np.testing.assert_allclose(radii[True][both], radii[False][both], rtol=1e-7)
    return closed


def test_tree_milp_holds_inequalities_against_grid():
    """a <= b and c >= 2 a on three features: every model's constrained radius (Linf, L1)
    is at most the distance of every valid flipping grid point, its counterexample valid."""
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (400, 3))
    y = (X[:, 0] + 0.6 * X[:, 2] > 0.8).astype(int)
    space = FeatureSpace.from_arrays([0, 0, 0], [1, 1, 1], names=["a", "b", "c"]).constrain(
        ["a <= b", "a <= 0.5 * c"])
    axis = np.linspace(0, 1, 41)
    grid = np.array(list(itertools.product(axis, axis, axis)))
    grid = grid[space.relations_hold(grid)]
    keep = space.relations_hold(X)
    Xt, yt = X[keep][:5], y[keep][:5]
    closed = 0
    for model in _tree_models(X, y).values():
        closed += _check_tree_radius(model, space, Xt, yt, lambda x0: grid)
    assert closed >= 20  # the brackets close under the relations


def test_tree_milp_holds_equality_with_immutable_total():
    """a + b == c with c immutable: the valid points are a one-parameter family per input
    (b = c - a) times the free feature d; brute force over that family."""
    rng = np.random.default_rng(1)
    a = rng.uniform(0, 1, 400)
    b = rng.uniform(0, 1, 400)
    dd = rng.uniform(0, 1, 400)
    X = np.column_stack([a, b, a + b, dd])
    y = (a - 0.5 * b + 0.3 * dd > 0.35).astype(int)
    space = FeatureSpace.from_arrays([0, 0, 0, 0], [1, 1, 2, 1], names=["a", "b", "c", "d"],
                                     mutable=[True, True, False, True]).constrain(
        ["a + b == c"])
    axis = np.linspace(0, 1, 201)

    def family(x0):
        aa, ee = np.meshgrid(axis, np.linspace(0, 1, 51))
        pts = np.column_stack([aa.ravel(), x0[2] - aa.ravel(), np.full(aa.size, x0[2]),
                               ee.ravel()])
        return pts[(pts[:, 1] >= 0) & (pts[:, 1] <= 1)]

    closed = 0
    models = _tree_models(X, y)
    for name in ("xgboost", "lightgbm"):
        model = models[name]
        closed += _check_tree_radius(model, space, X[:4], y[:4], family)
    assert closed >= 8


def test_tree_relations_change_the_radius_and_search_is_exact():
    """x1 <= 0.5 * x2 binds: the constrained radius is larger than the free one on some
    inputs, and the search's exact path reports valid, exact results."""
    import xgboost

    rng = np.random.default_rng(2)
    X = rng.uniform(0, 1, (400, 2))
    X[:, 0] = np.minimum(X[:, 0], 0.5 * X[:, 1])
    y = (X[:, 0] > 0.15).astype(int)
    model = xgboost.XGBClassifier(n_estimators=6, max_depth=2, n_jobs=1).fit(X, y)
    space = FeatureSpace.from_arrays([0, 0], [1, 1], names=["x1", "x2"]).constrain(
        ["x1 <= 0.5 * x2"])
    res = radius(model, X[:10], y[:10], space=space, solver="exact", threat="linf")
    free = radius(model, X[:10], y[:10], space=space.unconstrained(), solver="exact",
                  threat="linf")
    assert space.relations_hold(res.x_adv[res.found]).all()
    assert (res.status[res.found] == "exact").all()
    both = res.found & free.found
    assert (res.radius[both] >= free.radius[both] - 1e-9).all()
    assert (res.radius[both] > free.radius[both] * (1 + 1e-6)).any()


def test_tree_milp_relations_with_integer_and_one_hot_features():
    """late <= payments over integer counts, a one-hot pair and a continuous share with
    share <= 0.1 * payments: brute force over every valid (late, payments, group) and a
    grid of the share."""
    import lightgbm

    rng = np.random.default_rng(3)
    n = 500
    pay = rng.integers(0, 11, n).astype(float)
    late = np.floor(rng.uniform(0, 1, n) * (pay + 1))
    g = rng.integers(0, 2, n).astype(float)
    share = rng.uniform(0, 1, n) * 0.1 * pay
    X = np.column_stack([late, pay, g, 1 - g, share])
    y = (late / (pay + 1) + 0.3 * g + 0.2 * share > 0.6).astype(int)
    model = lightgbm.LGBMClassifier(n_estimators=10, num_leaves=6, min_child_samples=5,
                                    n_jobs=1, verbose=-1).fit(X, y)
    space = FeatureSpace.from_arrays(
        [0, 0, 0, 0, 0], [10, 10, 1, 1, 1], scale=[10, 10, 1, 1, 1],
        types=["integer", "integer", "categorical", "categorical", "real"],
        names=["late", "pay", "own", "rent", "share"], groups=[[2, 3]]).constrain(
        ["late <= pay", "share <= 0.1 * pay"])
    counts = np.arange(11.0)
    pts = np.array([(a, b, o, 1 - o, s) for a, b, o, s in itertools.product(
        counts, counts, (0.0, 1.0), np.linspace(0, 1, 41))])
    pts = pts[space.relations_hold(pts)]
    keep = space.relations_hold(X)
    closed = _check_tree_radius(model, space, X[keep][:5], y[keep][:5], lambda x0: pts)
    assert closed >= 10


def test_tree_milp_relations_on_unbounded_features():
    """Related features without a finite bound: the columns stay within REL_RADIUS_CAP of
    the input; the radius is still below every valid flipping point of a grid."""
    import xgboost

    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (400, 3))
    y = (X[:, 0] + 0.6 * X[:, 2] > 0.8).astype(int)
    model = xgboost.XGBClassifier(n_estimators=8, max_depth=3, learning_rate=0.5,
                                  n_jobs=1).fit(X, y)
    space = FeatureSpace.from_arrays([0, 0, -np.inf], [1, np.inf, 1], scale=[1, 1, 1],
                                     names=["a", "b", "c"]).constrain(
        ["a <= b", "a <= 0.5 * c"])
    axis = np.linspace(0, 1, 41)
    grid = np.array(list(itertools.product(axis, axis, axis)))
    grid = grid[space.relations_hold(grid)]
    keep = space.relations_hold(X)
    closed = _check_tree_radius(model, space, X[keep][:4], y[keep][:4], lambda x0: grid,
                                threats=("linf", "l1"))
    assert closed >= 8
