"""The projection onto a boundary linearised at a counterexample
(solvers/attacks/gradient/boundary_projection.py) and the search's projection stage
(search/refine.py: project, project_what_is_left)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog, minimize
from test_search_plan import _data, _state
from torch import nn

from robustscope import FeatureSpace, radius
from robustscope.core.statement import DECISION_CHANGE, Statement
from robustscope.models import wrap_model
from robustscope.search import minnorm_runs, refine
from robustscope.search.plan import (
    BLACKBOX_CONFIG,
    RELATIONS_CONFIG,
    SearchConfig,
    plan_attack,
)
from robustscope.solvers.attacks.gradient.boundary_projection import (
    AIM,
    halfspace_step,
    project_to_boundaries,
)
from robustscope.threats import get_threat


def _smallest_by_scipy(need: float, g: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                       p: float) -> float:
    """``min ||s||_p`` s.t. ``g . s <= -need``, ``lo <= s <= hi`` by scipy (``inf`` where
    infeasible): linear programs for L1 and Linf, SLSQP from several starts for L2."""
    d = len(g)
    box = [(lo[i], hi[i] if np.isfinite(hi[i]) else None) for i in range(d)]
    if p == 1.0:  # s = s+ - s-, both >= 0
        bounds = [(0, None if not np.isfinite(hi[i]) else hi[i]) for i in range(d)]
        bounds += [(0, -lo[i]) for i in range(d)]
        res = linprog(np.ones(2 * d), A_ub=np.concatenate([g, -g])[None], b_ub=[-need],
                      bounds=bounds)
        return res.fun if res.status == 0 else math.inf
    if p == math.inf:  # variables s and t, |s_i| <= t
        rows = [np.concatenate([g, [0.0]])]
        for i in range(d):
            for sign in (1.0, -1.0):
                row = np.zeros(d + 1)
                row[i], row[-1] = sign, -1.0
                rows.append(row)
        res = linprog(np.eye(d + 1)[-1], A_ub=np.array(rows), b_ub=[-need] + [0.0] * (2 * d),
                      bounds=box + [(0, None)])
        return res.fun if res.status == 0 else math.inf
    rng = np.random.default_rng(0)
    best = math.inf
    feasible = _feasible_point(need, g, lo, hi)  # a start SLSQP cannot miss from afar
    if feasible is None:
        return math.inf
    for k in range(6):
        start = feasible if k == 0 else rng.uniform(np.maximum(lo, -3), np.minimum(hi, 3))
        res = minimize(lambda v: v @ v, start, jac=lambda v: 2 * v, method="SLSQP",
                       bounds=box, constraints=[{"type": "ineq", "fun": lambda v: -need - g @ v,
                                                 "jac": lambda v: -g}],
                       options={"ftol": 1e-14, "maxiter": 500})
        if res.success and g @ res.x <= -need + 1e-9:
            best = min(best, math.sqrt(res.fun))
    return best


def _feasible_point(need: float, g: np.ndarray, lo: np.ndarray, hi: np.ndarray):
    """Some ``s`` in the box with ``g . s <= -need`` (a linear program), else ``None``."""
    box = [(lo[i], hi[i] if np.isfinite(hi[i]) else None) for i in range(len(g))]
    res = linprog(np.zeros(len(g)), A_ub=g[None], b_ub=[-need], bounds=box)
    return res.x if res.status == 0 else None


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), d=st.integers(1, 7),
       p=st.sampled_from([1.0, 2.0, math.inf]))
def test_halfspace_step_is_the_smallest_move_in_the_box(seed, d, p):
    rng = np.random.default_rng(seed)
    g = rng.normal(size=d) * (rng.random(d) > 0.2)  # some coordinates the margin ignores
    lo, hi = -2 * rng.random(d), 2 * rng.random(d)
    if rng.random() < 0.3:
        hi[0] = math.inf  # an unbounded side
    need = 3 * rng.random()
    step, length = halfspace_step(torch.tensor([need], dtype=torch.float64),
                                  torch.tensor(g[None]), torch.tensor(lo[None]),
                                  torch.tensor(hi[None]), p)
    s, got = step[0].numpy(), float(length[0])
    ref = _smallest_by_scipy(need, g, lo, hi, p)
    if not math.isfinite(ref):
        assert got == math.inf
        return
    # feasible, inside the box, and as short as the solver's optimum
    assert g @ s <= -need + 1e-9 * max(1.0, need)
    assert np.all(s >= lo - 1e-12) and np.all(s <= hi + 1e-12)
    assert got == pytest.approx(np.linalg.norm(s, ord=p), rel=1e-12)
    assert got <= ref * (1 + 1e-6) + 1e-9
    assert got >= ref * (1 - 1e-6) - 1e-9


def test_halfspace_step_needs_no_move_where_the_margin_is_already_covered():
    g = torch.tensor([[1.0, -2.0]], dtype=torch.float64)
    box = torch.full((1, 2), 1.0, dtype=torch.float64)
    for p in (1.0, 2.0, math.inf):
        step, length = halfspace_step(torch.tensor([-0.5], dtype=torch.float64), g, -box, box, p)
        assert torch.all(step == 0) and float(length[0]) == 0.0


def test_halfspace_step_reports_a_margin_the_box_cannot_cover():
    g = torch.tensor([[1.0, 1.0]], dtype=torch.float64)
    box = torch.full((1, 2), 0.1, dtype=torch.float64)
    for p in (1.0, 2.0, math.inf):
        _, length = halfspace_step(torch.tensor([1.0], dtype=torch.float64), g, -box, box, p)
        assert float(length[0]) == math.inf


def test_halfspace_step_rejects_other_norms():
    one = torch.ones(1, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match="p must be 1, 2 or inf"):
        halfspace_step(one[:, 0], one, -one, one, 3.0)


@pytest.mark.parametrize("threat", ["linf", "l2", "l1"])
def test_projection_lands_on_the_boundary_of_a_linear_model(threat):
    """On a linear model the linearisation is the model: from any point the projection lands
    ``AIM`` past the boundary, at the closed-form distance ``margin / ||w||_dual`` (a box
    wide enough not to bind)."""
    torch.manual_seed(0)
    net = nn.Linear(5, 3).double()
    X = np.random.default_rng(1).uniform(-1, 1, (6, 5))
    space = FeatureSpace.box(5, -50.0, 50.0)
    model = wrap_model(net, input_shape=(5,), example=X)
    x = torch.as_tensor(X)
    with torch.no_grad():
        logits = net(x)
    y = logits.argmax(1)
    other = logits.scatter(1, y[:, None], -math.inf).argmax(1)  # the runner-up class
    anywhere = x + torch.as_tensor(np.random.default_rng(2).normal(size=(6, 5)))
    t = get_threat(threat)
    cand, length = project_to_boundaries(model, x, y, anywhere, other, space, t,
                                         DECISION_CHANGE)
    w = net.weight.detach()[y] - net.weight.detach()[other]
    margin = (logits.gather(1, y[:, None]) - logits.gather(1, other[:, None]))[:, 0]
    dual = {"linf": 1.0, "l2": 2.0, "l1": math.inf}[threat]
    exact = margin / torch.linalg.vector_norm(w, ord=dual, dim=1)
    np.testing.assert_allclose(length.numpy(), exact.numpy(), rtol=2 * AIM)
    assert torch.all(length >= exact)
    with torch.no_grad():
        after = net(cand)
    moved = after.gather(1, y[:, None])[:, 0] - after.gather(1, other[:, None])[:, 0]
    assert torch.all(moved < 0)  # past the boundary ...
    assert torch.all(moved > -1e-4 * margin)  # ... by about AIM of the margin


@pytest.mark.parametrize("threat", ["linf", "l2", "l1"])
def test_the_projection_stage_takes_a_far_counterexample_onto_the_boundary(threat):
    """A counterexample 1.7-3.7x beyond a linear model's boundary: the stage's first class
    (the counterexample's own) brings it to the exact radius, verified; without the stage
    it would stay where it is."""
    torch.manual_seed(3)
    net = nn.Linear(6, 2).double()
    with torch.no_grad():  # clean margin 0.05 at the centre of the box
        net.bias.copy_(torch.stack([0.05 - 0.5 * (net.weight[0] - net.weight[1]).sum(),
                                    torch.zeros((), dtype=torch.float64)]))
    X = 0.5 + 0.01 * np.random.default_rng(0).standard_normal((4, 6))
    y = net(torch.as_tensor(X)).argmax(1).numpy()
    state = _state(net, X, y, budget=None, threat=threat)
    w = (net.weight[y] - net.weight[1 - y]).detach()
    m0 = (state.clean_logits.gather(1, state.y[:, None]) - state.clean_logits.gather(
        1, 1 - state.y[:, None])).reshape(-1)
    v = -torch.sign(w) * 0.02
    t_star = m0 / (w * -v).sum(dim=1)
    start = torch.as_tensor([1.7, 2.3, 2.9, 3.7], dtype=torch.float64) * t_star
    sub = torch.arange(len(X))
    assert state.check(sub, state.x + start[:, None] * v).all()
    before = state.best_r.clone()
    plan = plan_attack(None, 2, 2, state.config, l1=threat == "l1")
    improved = refine.project_round(state, sub, plan, 2, [0])
    assert torch.equal(improved, sub)
    dual = {"linf": 1.0, "l2": 2.0, "l1": math.inf}[threat]
    exact = m0 / torch.linalg.vector_norm(w, ord=dual, dim=1)
    assert torch.all(state.best_r < before)
    assert torch.all(state.best_r >= exact * (1 - 1e-12))
    np.testing.assert_allclose(state.best_r.numpy(), exact.numpy(), rtol=2 * AIM)
    assert state.check(sub, state.best_x).all()


def test_the_projection_reaches_a_nearer_class_than_the_counterexamples():
    """Three classes, the counterexample in the far one: after the projection in its own
    class (which on a linear model lands on that class's boundary), the next class by logit
    is the nearer boundary, and the projection takes the input there."""
    net = nn.Linear(2, 3).double()
    with torch.no_grad():  # class 0 wins at the origin; class 1 is 0.1 away, class 2 0.5
        net.weight.copy_(torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]))
        net.bias.copy_(torch.tensor([0.0, -0.1, -0.5]))
    X = np.zeros((1, 2))
    space = FeatureSpace.box(2, -5.0, 5.0)
    state = _state(net, X, np.array([0]), budget=None, space=space, threat="l1")
    sub = torch.arange(1)
    far = torch.tensor([[0.0, 0.9]], dtype=torch.float64)  # class 2 wins here
    assert state.check(sub, far).all()
    plan = plan_attack(None, 2, 3, state.config, l1=True)
    assert plan.project == 2
    improved = refine.project_round(state, sub, plan, 2, [0])
    assert torch.equal(improved, sub) and float(state.best_r[0]) == pytest.approx(0.5, rel=1e-5)
    refine.project(state, sub, plan, 2, improved)
    assert int(state.best_logits.argmax(1)) == 1
    assert float(state.best_r[0]) == pytest.approx(0.1, rel=2 * AIM)


def _ten_class_mlp():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 10)).eval()
    X = np.random.default_rng(1).uniform(0, 1, (8, 6))
    with torch.no_grad():
        y = net(torch.as_tensor(X, dtype=torch.float32)).argmax(1).numpy()
    return X, y, net


@pytest.mark.parametrize("budget", [None, 70])
def test_projection_stays_within_each_inputs_ceiling(budget):
    """Ten classes, L1: the planned projection reaches 3, what is left goes to the others,
    one class a round, and no input spends more than its ceiling (the budget, else the
    plan's passes)."""
    X, y, net = _ten_class_mlp()
    state = _state(net, X, y, budget=budget, threat="l1")
    sub = torch.arange(len(X))
    plan = plan_attack(budget, 2, 10, state.config, l1=True)
    assert plan.project == 3
    minnorm_runs.minnorm_runs(state, sub, 10, 0, 2)
    assert torch.isfinite(state.best_r).all()
    refine.project(state, sub, plan, 2, refine.project_round(state, sub, plan, 2, [0]))
    before = state.ledger.used().copy()
    refine.project_what_is_left(state, sub, plan, 2)
    ceiling = plan.passes if budget is None else budget
    assert state.ledger.used().max() <= ceiling
    assert (state.ledger.used() > before).any()


def test_projection_is_a_part_of_the_search_and_charged_like_every_part():
    X, y, net = _data()
    res = radius(net, X, y, threat="l1", space=FeatureSpace.box(6), budget=50,
                 certify="none")
    parts = res.meta["passes_by_part"]
    assert parts["projection"] > 0
    assert sum(parts.values()) == res.queries.sum()
    assert res.queries.max() <= 50
    assert res.meta["attack_plan"]["project"] == 3


def test_only_l1_plans_the_projection_and_every_threat_projects_what_is_left():
    config = SearchConfig()
    for budget in (50, 200, None):
        l1 = plan_attack(budget, 2, 10, config, l1=True)
        linf = plan_attack(budget, 2, 10, config)
        assert l1.project == 3 and l1.project_rounds == 1 and l1.project_left
        assert linf.project == 0 and linf.project_rounds == 0 and linf.project_left
    # a targeted statement: the target's boundary only
    assert plan_attack(200, 2, 10, config, l1=True, aim=False).project == 1
    # too few passes for the untargeted run to pay for it
    assert plan_attack(30, 2, 10, config, l1=True).project == 0
    # not measured on black boxes or under relations: off there
    for off in (BLACKBOX_CONFIG, RELATIONS_CONFIG):
        plan = plan_attack(None, 2, 10, off, l1=True)
        assert plan.project == 0 and not plan.project_left


def test_a_targeted_statement_is_projected_onto_its_target_alone():
    """A targeted statement's margin has one boundary: what is left is not spent projecting
    onto it again for every other class of a 10-class network (at most a try, a second try
    and a round of the same two per input)."""
    X, y, net = _ten_class_mlp()
    state = _state(net, X, y, budget=None, threat="linf")
    state.statement = Statement(target=int((y[0] + 1) % 10))
    sub = torch.arange(len(X))[torch.as_tensor(y) != state.statement.target]
    minnorm_runs.minnorm_runs(state, sub, 30, 0, 2)
    sub = sub[torch.isfinite(state.best_r[sub])]
    assert len(sub) >= 3
    plan = plan_attack(None, 2, 10, state.config, aim=False)
    before = state.ledger.used().copy()
    refine.project_what_is_left(state, sub, plan, 2)
    assert (state.ledger.used() - before).max() <= 4 * (2 + 1)
    pred = state.best_logits[sub].argmax(1)
    assert (pred == state.statement.target).all()
