"""Gradient-free minimum-norm solvers against closed forms, budgets and seeds."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from robustscope.core.space import FeatureSpace
from robustscope.models.base import QueryLedger
from robustscope.models.blackbox import ProbaClassifier
from robustscope.models.metered import MeteredModel
from robustscope.solvers.attacks.decision import gradient_free as gradient_free_module
from robustscope.solvers.attacks.decision.cube_search import cube_search
from robustscope.solvers.attacks.decision.gradient_free import gradient_free
from robustscope.solvers.attacks.decision.hop_skip_jump import hop_skip_jump
from robustscope.solvers.attacks.decision.step_down import step_down_search

SOLVERS = {"hsj": hop_skip_jump, "cube": cube_search, "step": step_down_search,
           "cascade": gradient_free}


def _linear_problem(d: int = 8, n: int = 12, seed: int = 0):
    """Binary black-box logistic model with unequal feature scales, unbounded space."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=d)
    b = 0.3
    scale = 10.0 ** rng.uniform(-2, 2, size=d)
    w_orig = w / scale  # so that w_orig * scale = w (every feature matters in scaled units)

    def proba(a):
        s = a @ w_orig + b
        p1 = 1 / (1 + np.exp(-s))
        return np.stack([1 - p1, p1], axis=1)

    model = ProbaClassifier(proba, 2, (d,))
    space = FeatureSpace.from_arrays([-np.inf] * d, [np.inf] * d, scale=scale)
    x = torch.as_tensor(rng.normal(size=(n, d)) * scale * 0.5)
    y = model.predict(x)
    margin = (x.numpy() @ w_orig + b)
    exact = {"linf": np.abs(margin) / np.abs(w).sum(), "l2": np.abs(margin) / np.linalg.norm(w)}
    return model, space, x, y, exact


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("threat", ["linf", "l2"])
def test_radius_never_below_exact_and_close_to_it(solver, threat):
    model, space, x, y, exact = _linear_problem(n=8)
    run = SOLVERS[solver](model, x, y, space, threat, budget=2500,
                          generator=torch.Generator().manual_seed(0))
    assert run.found.all()
    # every counterexample is verified by calling the model again
    assert (model.predict(run.x_adv) != y).all()
    u = space.scaled_delta(run.x_adv, x)
    norm = torch.linalg.vector_norm(u, ord=math.inf if threat == "linf" else 2, dim=1).numpy()
    assert np.allclose(norm, run.radius)
    ratio = run.radius / exact[threat]
    assert (ratio >= 1 - 1e-9).all()  # a black-box radius can never beat the exact one
    assert np.median(ratio) < 1.03 and ratio.max() < 1.1


@pytest.mark.parametrize("solver", SOLVERS)
def test_budget_is_respected_and_charged(solver):
    model, space, x, y, _ = _linear_problem(n=6)
    ledger = QueryLedger(len(x), budget=250)
    run = SOLVERS[solver](model, x, y, space, "linf", budget=10_000, ledger=ledger)
    assert (run.forward_queries <= 250).all()
    assert (ledger.forward == run.forward_queries).all()
    # a metered view's ledger is charged as well, with the solver's own budget
    outer = QueryLedger(len(x))
    run = SOLVERS[solver](MeteredModel(model, outer, np.arange(len(x))), x, y, space, "linf",
                          budget=120)
    assert (run.forward_queries <= 120).all() and (outer.forward == run.forward_queries).all()


@pytest.mark.parametrize("solver", SOLVERS)
def test_same_seed_same_numbers(solver):
    model, space, x, y, _ = _linear_problem(n=5)
    runs = [SOLVERS[solver](model, x, y, space, "linf", budget=400,
                            generator=torch.Generator().manual_seed(7)) for _ in range(2)]
    assert np.array_equal(runs[0].radius, runs[1].radius)
    assert torch.equal(runs[0].x_adv, runs[1].x_adv)


def test_misclassified_input_is_its_own_counterexample():
    model, space, x, y, _ = _linear_problem(n=4)
    wrong = y.clone()
    wrong[0] = 1 - wrong[0]
    run = cube_search(model, x, wrong, space, "linf", budget=300)
    assert run.radius[0] == 0 and torch.equal(run.x_adv[0], x[0])
    assert run.forward_queries[0] == 1


def test_warm_start_and_pool_give_starting_points():
    model, space, x, y, exact = _linear_problem(n=6)
    # pool: points on the other side of the boundary
    rng = np.random.default_rng(3)
    pool = torch.as_tensor(rng.normal(size=(200, 8)) * space.scale * 2)
    pool_y = model.predict(pool)
    run = hop_skip_jump(model, x, y, space, "linf", budget=60, X_pool=pool, y_pool=pool_y,
                            samples=10)
    assert run.found.all()
    again = cube_search(model, x, y, space, "linf", budget=2000, x_init=run.x_adv)
    assert (again.radius <= run.radius + 1e-12).all()
    assert (again.radius >= exact["linf"] * (1 - 1e-9)).all()


def test_solver_protocol_returns_candidates():
    model, space, x, y, _ = _linear_problem(n=4)
    eps = torch.full((4,), 10.0, dtype=torch.float64)
    for fn in (hop_skip_jump, cube_search, gradient_free):
        out = fn(model, x, y, space, "linf", eps, generator=torch.Generator().manual_seed(0),
                 budget=500)
        assert out.x_adv.shape == x.shape and out.found.all()
        assert (model.predict(out.x_adv) != y).all()


def test_label_only_model():
    """A model that returns one-hot probabilities (labels only) is still solved."""
    model, space, x, y, exact = _linear_problem(n=6)
    labels_only = ProbaClassifier(
        lambda a: np.eye(2)[model.probabilities_numpy(a).argmax(1)], 2, (8,))
    for fn in SOLVERS.values():
        run = fn(labels_only, x, y, space, "linf", budget=2000)
        assert run.found.all()
        ratio = run.radius / exact["linf"]
        assert (ratio >= 1 - 1e-9).all() and np.median(ratio) < 1.05


def test_cascade_is_no_worse_than_its_first_stage():
    model, space, x, y, exact = _linear_problem(n=8, seed=4)
    g = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    first = step_down_search(model, x, y, space, "linf", budget=2000, generator=g())
    both = gradient_free(model, x, y, space, "linf", budget=2000, generator=g(),
                         linear_steps=False)
    assert (both.radius <= first.radius + 1e-12).all()
    assert (both.forward_queries <= 2000).all()
    assert (both.radius >= exact["linf"] * (1 - 1e-9)).all()


def test_image_shaped_float32_inputs():
    from robustscope.models.torch_model import TorchClassifier

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))
    model = TorchClassifier(net, 3, (1, 4, 4))
    x = torch.rand(4, 1, 4, 4)
    y = model.predict(x)
    run = gradient_free(model, x, y, FeatureSpace.box((1, 4, 4)), "l2", budget=600)
    assert run.x_adv.shape == x.shape and run.x_adv.dtype == torch.float32
    assert ((model.predict(run.x_adv) != y).numpy() == run.found).all()
    assert ((run.x_adv >= 0) & (run.x_adv <= 1)).all()


def test_step_down_stops_on_evidence_and_says_so():
    """With budget to spare the step-down search stops an input when its explorations keep
    failing (converged, fewer queries than the budget); with a budget too small to finish,
    the input is reported as still falling, never as converged."""
    model, space, x, y, exact = _linear_problem(n=8, seed=2)
    roomy = step_down_search(model, x, y, space, "linf", budget=20_000,
                             generator=torch.Generator().manual_seed(0))
    found = roomy.found
    assert found.sum() >= 6  # the rest have no start within the box of scaled radius 1
    assert (roomy.meta["converged"][found] == 1).all()
    assert (roomy.meta["converged"][~found] == 0).all()
    assert (roomy.forward_queries < 20_000).all()
    assert np.median(roomy.radius[found] / exact["linf"][found]) < 1.02
    tight = step_down_search(model, x, y, space, "linf", budget=12,
                             generator=torch.Generator().manual_seed(0))
    assert (tight.forward_queries <= 12).all()
    assert (tight.meta["converged"][tight.found] == -1).all()


def test_step_down_skips_proposals_that_project_onto_the_point_held():
    """Two integer features of scale 100: inside a ball of radius below 0.01 every move
    rounds back to the input, so none of them may cost a query."""
    space = FeatureSpace.from_arrays([0, 0], [100, 100], types=["integer", "integer"])

    def proba(a):
        p1 = 1 / (1 + np.exp(-(a[:, 0] + a[:, 1] - 100.5)))
        return np.stack([1 - p1, p1], axis=1)

    model = ProbaClassifier(proba, 2, (2,))
    x = torch.tensor([[50.0, 50.0]], dtype=torch.float64)  # one step from the boundary
    y = model.predict(x)
    run = step_down_search(model, x, y, space, "linf", budget=400,
                           generator=torch.Generator().manual_seed(0))
    assert run.found.all() and np.isclose(run.radius[0], 0.01)
    # the search converged long before the budget: moves inside the lattice's gaps were free
    assert run.meta["converged"][0] == 1 and run.forward_queries[0] < 100


def test_boundary_steps_solve_a_smooth_model_in_few_queries():
    """On a linear model the linearised step is exact: the cascade's first stage lands within
    the bisection's tolerance of the closed form after one finite-difference gradient."""
    model, space, x, y, exact = _linear_problem(n=8, seed=5)
    for threat in ("linf", "l2"):
        run = gradient_free(model, x, y, space, threat, budget=120,
                            generator=torch.Generator().manual_seed(0))
        found = run.found
        assert found.sum() >= 6
        ratio = run.radius[found] / exact[threat][found]
        assert (ratio >= 1 - 1e-9).all() and np.median(ratio) < 1.03
        assert (run.forward_queries <= 120).all()


def test_linf_restarts_keep_the_ledger_exact_and_never_lose_a_radius(monkeypatch):
    """Under Linf the cascade restarts the step-down search from further pool inputs while
    an input has queries left: every row is charged once, no input passes its budget, and the
    radius is never above the one the first search had (restarts only replace by smaller)."""
    # HopSkipJump, the stage after the restarts, bisects from whichever point it is given
    # (to 1e-3), and the line descent's steps depend on the counterexample it starts from:
    # both left out, so that the radii compared are the searches' own
    monkeypatch.setattr(gradient_free_module, "hop_skip_jump", lambda *a, **k: None)
    model, space, x, y, exact = _linear_problem(n=8, seed=6)
    rng = np.random.default_rng(4)
    pool = torch.as_tensor(rng.normal(size=(100, 8)) * space.scale)
    pool_y = model.predict(pool)
    g = lambda: torch.Generator().manual_seed(2)  # noqa: E731
    ledger = QueryLedger(len(x))
    view = MeteredModel(model, ledger, np.arange(len(x)))
    run = gradient_free(view, x, y, space, "linf", budget=3000, generator=g(), X_pool=pool,
                        y_pool=pool_y, restarts=3, descent=False)
    once = gradient_free(model, x, y, space, "linf", budget=3000, generator=g(), X_pool=pool,
                         y_pool=pool_y, restarts=0, descent=False)
    assert (run.forward_queries <= 3000).all()
    assert (run.forward_queries > once.forward_queries).any()  # the restarts did run
    assert (ledger.forward == run.forward_queries).all()
    assert (run.radius <= once.radius * (1 + 1e-9)).all()
    assert (run.radius >= exact["linf"] * (1 - 1e-9)).all()


@pytest.mark.parametrize("label_only", [False, True])
def test_hop_skip_jump_reads_the_scores_of_probes_on_one_side(monkeypatch, label_only):
    """Where every probe has the same decision, the decisions say nothing of the direction;
    the ranks of the margins still do. Two margins (a label-only model) give the decisions'
    own estimate."""
    from robustscope.solvers.attacks.decision import hop_skip_jump as hsj
    from robustscope.solvers.attacks.decision.scaled_oracle import ScaledOracle
    from robustscope.threats import get_threat

    d = 6
    w = torch.tensor([3.0, -2.0, 1.0, 0.5, 0.0, -1.0], dtype=torch.float64)

    def proba(a):
        logit = 2.0 - np.asarray(a) @ w.numpy()
        p0 = (logit > 0).astype(float) if label_only else 1 / (1 + np.exp(-logit))
        return np.stack([p0, 1 - p0], axis=1)

    space = FeatureSpace.from_arrays([-1.0] * d, [1.0] * d, scale=np.ones(d))
    oracle = ScaledOracle(ProbaClassifier(proba, 2, (d,)), torch.zeros(1, d, dtype=torch.float64),
                          torch.zeros(1, dtype=torch.long), space, get_threat("l2"))
    far = torch.zeros(1, d, dtype=torch.float64)  # margin 2: probes of size 0.1 all agree

    def cosine(ranks: bool) -> float:
        monkeypatch.setattr(hsj, "SCORE_RANKS", ranks)
        g = hsj.estimate_direction(oracle, np.arange(1), far, torch.tensor([0.1]), 200,
                                   torch.Generator().manual_seed(0))
        return float(torch.nn.functional.cosine_similarity(g, w.unsqueeze(0)))

    if label_only:
        assert cosine(True) == pytest.approx(cosine(False))
    else:
        # the decisions alone give minus the probes' mean: a direction drawn by chance
        assert cosine(True) > 0.95 and cosine(True) > abs(cosine(False))


def _votes_problem(d: int = 20, n: int = 4):
    """A sum of step functions (a tree ensemble's votes: three thresholds per feature) on
    ``d`` features in ``[-1, 1]``, class 0 at the origin, and a pool of class 1."""
    rng = np.random.default_rng(0)
    thresholds, weights = rng.uniform(0.05, 0.5, (3, d)), rng.uniform(0.2, 1.0, (3, d))

    def proba(a):
        votes = (weights * (np.asarray(a)[:, None, :] >= thresholds)).sum((1, 2))
        p1 = 1 / (1 + np.exp(-(votes - 4.0)))
        return np.stack([1 - p1, p1], axis=1)

    space = FeatureSpace.from_arrays([-1.0] * d, [1.0] * d, scale=np.ones(d))
    pool = torch.full((6, d), 0.6, dtype=torch.float64)
    return (ProbaClassifier(proba, 2, (d,)), space, torch.zeros(n, d, dtype=torch.float64),
            pool, torch.ones(6, dtype=torch.long))


@pytest.mark.parametrize("share_on", [True, False])
def test_the_restarts_leave_the_line_descent_its_share_on_a_plateau_model(monkeypatch,
                                                                          share_on):
    from robustscope.core.checks import make_generator

    model, space, x, pool, pool_y = _votes_problem()
    if not share_on:
        monkeypatch.setattr(gradient_free_module, "DESCENT_FROM", 10**9)
        monkeypatch.setattr(gradient_free_module, "DESCENT_LOW_FROM", 10**9)
    seen: dict = {}
    further, descent = gradient_free_module.further_starts, gradient_free_module.line_descent

    def before_restarts(oracle, *args, **kwargs):
        seen["before"] = oracle.remaining(np.arange(oracle.n)).copy()
        return further(oracle, *args, **kwargs)

    def at_descent(oracle, *args, **kwargs):
        seen["entry"] = oracle.remaining(np.arange(oracle.n)).copy()
        seen["share"] = gradient_free_module.descent_share(oracle, 3000)
        return descent(oracle, *args, **kwargs)

    monkeypatch.setattr(gradient_free_module, "further_starts", before_restarts)
    monkeypatch.setattr(gradient_free_module, "line_descent", at_descent)
    out = gradient_free(model, x, torch.zeros(len(x), dtype=torch.long), space, "linf",
                        generator=make_generator(0), budget=3000, X_pool=pool, y_pool=pool_y)
    # 20 features, 15 queries per feature and sweep: 10 sweeps = 3,000 > 75% of 3,000
    assert seen["share"] == (2250 if share_on else 0)
    kept = np.minimum(seen["before"], 2250)
    if share_on:
        assert (seen["entry"] >= kept).all()
    else:  # the three restarts spend what the descent would have had
        assert (seen["entry"] < kept).any()
    assert (out.forward_queries <= 3000).all()
    assert (model.predict(out.x_adv[out.found]) == 1).all()


def test_no_share_for_the_descent_on_a_smooth_model_or_a_small_budget():
    from robustscope.core.checks import make_generator
    from robustscope.solvers.attacks.decision.linear_steps import boundary_steps
    from robustscope.solvers.attacks.decision.scaled_oracle import ScaledOracle
    from robustscope.solvers.attacks.decision.starts import find_starts
    from robustscope.threats import get_threat

    def projected(model, x, y, space, pool, pool_y):  # the cascade's first stage
        oracle = ScaledOracle(model, x, y, space, get_threat("linf"), budget=5000)
        find_starts(oracle, make_generator(0), None, pool, pool_y)
        assert torch.isfinite(oracle.best_r).all()
        boundary_steps(oracle)
        return oracle

    model, space, x, y, _ = _linear_problem(d=8, n=12)
    smooth = projected(model, x, y, space, x, y)
    assert not smooth.plateau.any()
    assert gradient_free_module.descent_share(smooth, 5000) == 0
    votes, vspace, vx, pool, pool_y = _votes_problem(d=20)
    flat = projected(votes, vx, torch.zeros(len(vx), dtype=torch.long), vspace, pool, pool_y)
    assert flat.plateau.any()
    assert gradient_free_module.descent_share(flat, 5000) == 3000  # 10 sweeps x 20 x 15
    assert gradient_free_module.descent_share(flat, 2999) == 1499  # DESCENT_LOW of it
    # radius() keeps a query of a budget for its check: 500 arrives here as 499
    assert gradient_free_module.descent_share(flat, 499) == 249
    assert gradient_free_module.descent_share(flat, 399) == 0  # under DESCENT_LOW_FROM
    wide, wspace, wx, wpool, wpool_y = _votes_problem(d=60)
    wide_flat = projected(wide, wx, torch.zeros(len(wx), dtype=torch.long), wspace, wpool,
                          wpool_y)
    # one grid pass over 60 lines is 540 queries: half of 1,000 does not pay for it
    assert gradient_free_module.descent_share(wide_flat, 1000) == 0
    assert gradient_free_module.descent_share(wide_flat, 1100) == 550


@pytest.mark.parametrize("budget", [1000, 3000])
def test_below_the_ceiling_the_first_search_leaves_the_descent_its_share(monkeypatch, budget):
    """Under DESCENT_FROM no restarts run, so the first step-down search itself stops short
    of the descent's share, and the descent starts attempts with DESCENT_LOW_MIN_LEFT
    queries left; from DESCENT_FROM the first search is not held back (the restarts are)
    and the descent needs MIN_LEFT (300)."""
    from robustscope.core.checks import make_generator

    model, space, x, pool, pool_y = _votes_problem()
    seen: dict = {}
    step_down, descent = gradient_free_module.step_down_search, gradient_free_module.line_descent

    def first_search(*args, oracle, **kwargs):
        seen.setdefault("cap", oracle.budget)
        return step_down(*args, oracle=oracle, **kwargs)

    def at_descent(oracle, *args, **kwargs):
        seen["entry"] = oracle.remaining(np.arange(oracle.n)).copy()
        seen["min_left"] = kwargs["min_left"]
        return descent(oracle, *args, **kwargs)

    monkeypatch.setattr(gradient_free_module, "step_down_search", first_search)
    monkeypatch.setattr(gradient_free_module, "line_descent", at_descent)
    ledger = QueryLedger(len(x))
    view = MeteredModel(model, ledger, np.arange(len(x)))
    out = gradient_free(view, x, torch.zeros(len(x), dtype=torch.long), space, "linf",
                        generator=make_generator(0), budget=budget, X_pool=pool,
                        y_pool=pool_y)
    if budget == 1000:
        assert seen["cap"] == 500 and seen["min_left"] == 100
        assert (seen["entry"] >= 500).all()  # what the first search was not allowed
    else:
        assert seen["cap"] == 3000 and seen["min_left"] == 300
    assert (ledger.forward == out.forward_queries).all()
    assert (out.forward_queries <= budget).all()
    assert (model.predict(out.x_adv[out.found]) == 1).all()


@pytest.mark.parametrize("case", ["smooth", "wide plateau"])
def test_without_a_share_the_descent_keeps_its_usual_floor(monkeypatch, case):
    """The smaller floor (DESCENT_LOW_MIN_LEFT) comes with the share only: a smooth model,
    and a plateau model on 60 features whose half of 1,000 queries pays for no grid pass
    (540 queries), get no share below DESCENT_FROM, and their descent needs MIN_LEFT."""
    from robustscope.core.checks import make_generator
    from robustscope.solvers.attacks.decision.line_descent import MIN_LEFT

    if case == "smooth":
        model, space, x, y, _ = _linear_problem(d=8, n=6)
        pool, pool_y = x, y
    else:
        model, space, x, pool, pool_y = _votes_problem(d=60)
        y = torch.zeros(len(x), dtype=torch.long)
    seen: dict = {}
    descent = gradient_free_module.line_descent

    def at_descent(oracle, *args, **kwargs):
        seen["min_left"] = kwargs["min_left"]
        return descent(oracle, *args, **kwargs)

    monkeypatch.setattr(gradient_free_module, "line_descent", at_descent)
    gradient_free(model, x, y, space, "linf", generator=make_generator(0), budget=1000,
                  X_pool=pool, y_pool=pool_y)
    assert seen["min_left"] == MIN_LEFT == 300
