"""The white-box search's budget plan and its allocation across inputs (issue #14): the plan
never exceeds a budget, closed brackets are never charged again, the passes of each part add
up to the ledger, and the search runs on CUDA where one is present."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from robustscope import FeatureSpace, radius
from robustscope.core.statement import DECISION_CHANGE, rounding_margin
from robustscope.models import wrap_model
from robustscope.models.base import QueryLedger
from robustscope.models.metered import MeteredModel
from robustscope.search import minnorm_runs, refine
from robustscope.search.plan import (
    ALONE_PASSES,
    SearchConfig,
    StageLedger,
    plan_attack,
    projection_passes,
)
from robustscope.search.state import BatchState
from robustscope.solvers.attacks.gradient.targets import first_order_distances, rank_by_distance
from robustscope.threats import get_threat


def _run_cost(config: SearchConfig, grad_cost: int) -> int:
    return config.pgd_restarts * (config.pgd_steps * grad_cost + 1) + 1


@settings(max_examples=200, deadline=None)
@given(budget=st.integers(1, 20_000), grad_cost=st.sampled_from([2, 3, 65, 129]),
       n_classes=st.integers(2, 20), solver=st.sampled_from(["auto", "minnorm"]),
       l1=st.booleans())
def test_planned_runs_fit_the_budget(budget, grad_cost, n_classes, solver, l1):
    config = SearchConfig()
    plan = plan_attack(budget, grad_cost, n_classes, config, solver, l1=l1)
    runs = ((plan.minnorm_steps > 0) + (plan.refine_steps > 0) + (plan.wide_steps > 0)
            + plan.targets)
    spent = ((plan.minnorm_steps + plan.refine_steps + plan.wide_steps
              + plan.targets * plan.target_steps + plan.ranked + plan.aimed) * grad_cost
             + runs + plan.line_steps + 1 + ALONE_PASSES  # the clean pass, the calls alone
             + (projection_passes(grad_cost) if plan.project else 0))
    if plan.probe_steps:  # at least four probes fit beside the runs
        spent += 4 * _run_cost(config, grad_cost)
    assert spent <= max(budget, 1 + ALONE_PASSES)
    assert plan.targets <= max(0, n_classes - 2)
    assert plan.targets == 0 or plan.target_steps >= config.min_run_steps
    assert solver == "auto" or plan.probe_steps == 0
    # classes are ranked only for targeted runs, and only where there is a choice
    assert plan.ranked == 0 or (plan.targets and n_classes - 2 > plan.targets)
    # only L1 refines, and only with two runs worth their steps
    assert plan.refine_steps == 0 or (
        l1 and min(plan.minnorm_steps, plan.refine_steps) >= 2 * config.min_run_steps)
    # a second step scale only under Linf / L2, and only with two runs worth their steps
    assert plan.wide_steps == 0 or (
        not l1 and min(plan.minnorm_steps, plan.wide_steps) >= config.wide_min_steps)


def _projection_steps(plan, grad_cost: int) -> int:
    return -(-projection_passes(grad_cost) // grad_cost) if plan.project else 0


def test_l1_plans_share_the_untargeted_steps_with_a_refining_run():
    config = SearchConfig(wide_share=0.0)  # Linf with one step scale: the untargeted run
    for budget in (200, 1000, None):
        plain = plan_attack(budget, 2, 10, config, aim=False)
        l1 = plan_attack(budget, 2, 10, config, l1=True)
        assert plain.refine_steps == 0 and l1.refine_steps > 0
        # the refining run's verification pass costs at most one untargeted step (both pay
        # their projections from the untargeted steps, the targeted plan for one class)
        plain_steps = plain.minnorm_steps + _projection_steps(plain, 2)
        l1_steps = l1.minnorm_steps + l1.refine_steps + _projection_steps(l1, 2)
        assert plain_steps - 1 <= l1_steps <= plain_steps
        assert l1.targets == plain.targets and l1.target_steps == plain.target_steps
    assert plan_attack(100, 2, 10, config, l1=True).refine_steps == 0  # 15 steps each: too few


def test_linf_plans_split_the_untargeted_steps_between_two_step_scales():
    config = SearchConfig()
    one = SearchConfig(wide_share=0.0)
    for budget in (300, 1000, None):
        split, single = plan_attack(budget, 2, 10, config), plan_attack(budget, 2, 10, one)
        assert split.wide_steps > 0 and single.wide_steps == 0
        # the second run's verification pass costs at most one step
        total = split.minnorm_steps + split.wide_steps
        assert single.minnorm_steps - 1 <= total <= single.minnorm_steps
        assert abs(split.minnorm_steps - split.wide_steps) <= 1
        assert split.targets == single.targets and split.target_steps == single.target_steps
    assert plan_attack(200, 2, 10, config).wide_steps == 0  # 31 steps each: too few
    assert plan_attack(1000, 2, 10, config, l1=True).wide_steps == 0


def test_the_long_step_run_starts_from_the_input_aimed_like_the_first(monkeypatch):
    X, y, net = _data()
    seen = []
    real = minnorm_runs.MINNORM

    def spy(*args, **kwargs):
        seen.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(minnorm_runs, "MINNORM", spy)
    # the planned cascade alone (without the convergence rounds that follow it by default)
    res = radius(net, X, y, threat="linf", space=FeatureSpace.box(6), certify="none",
                 config=SearchConfig(converge_ceiling=None))
    plan = res.meta["attack_plan"]
    assert plan["wide_steps"] > 0
    first, wide = seen[0], seen[1]
    assert "step_start" not in first and wide["step_start"] == SearchConfig().wide_step
    assert wide["steps"] == plan["wide_steps"] and wide["init"] is None
    assert (first["towards"] is None) == (wide["towards"] is None)
    if first["towards"] is not None:
        assert torch.equal(first["towards"], wide["towards"])
    parts = res.meta["passes_by_part"]
    assert parts["minnorm, long steps"] > 0 and sum(parts.values()) == res.queries.sum()
    assert res.queries.max() <= 300 + 1 + ALONE_PASSES


def test_l1_search_spends_passes_on_the_refining_run():
    X, y, net = _data()
    res = radius(net, X, y, threat="l1", space=FeatureSpace.box(6), certify="none",
                 config=SearchConfig(converge_ceiling=None))
    parts = res.meta["passes_by_part"]
    assert parts["refine"] > 0 and sum(parts.values()) == res.queries.sum()
    assert res.meta["attack_plan"]["refine_steps"] > 0
    assert res.queries.max() <= 300 + 1 + ALONE_PASSES


def test_plan_grows_with_the_budget_and_defaults_to_150_gradients():
    config = SearchConfig()
    small, large = (plan_attack(b, 2, 10, config) for b in (50, 1000))
    assert small.targets == 0 and small.probe_steps == 0  # too small: one run gets it all
    # aiming takes 3 of its steps, the projection 2
    assert small.minnorm_steps + small.aimed + _projection_steps(small, 2) >= 18
    assert large.targets == config.targets and large.probe_steps == config.pgd_steps
    assert large.minnorm_steps > small.minnorm_steps
    assert plan_attack(None, 2, 10, config).passes == 300


def _mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 4)).eval()


def _data(n: int = 12, seed: int = 1) -> tuple[np.ndarray, np.ndarray, nn.Module]:
    net = _mlp()
    X = np.random.default_rng(seed).uniform(0, 1, (n, 6))
    with torch.no_grad():
        y = net(torch.as_tensor(X, dtype=torch.float32)).argmax(1).numpy()
    return X, y, net


@settings(max_examples=8, deadline=None)
@given(budget=st.integers(3, 400))
def test_no_input_spends_more_than_its_budget(budget):
    X, y, net = _data()
    res = radius(net, X, y, threat="linf", space=FeatureSpace.box(6), budget=budget,
                 certify="none")
    assert res.queries.max() <= budget
    assert sum(res.meta["passes_by_part"].values()) == res.queries.sum()


def test_parts_add_up_without_a_budget_and_the_default_stays_near_its_plan():
    X, y, net = _data()
    res = radius(net, X, y, threat="l2", space=FeatureSpace.box(6), certify="none",
                 config=SearchConfig(converge_ceiling=None))
    parts = res.meta["passes_by_part"]
    assert sum(parts.values()) == res.queries.sum()
    assert {"clean", "minnorm", "targeted minnorm", "line search"} <= set(parts)
    assert res.meta["attack_plan"]["passes"] == 300
    # the bisection stops at the plan's passes; only the clean pass and the calls alone
    # may come on top
    assert res.queries.max() <= 300 + 1 + ALONE_PASSES


def _state(net: nn.Module, X: np.ndarray, y: np.ndarray, budget: int | None,
           space: FeatureSpace | None = None, threat: str = "linf"):
    space = space or FeatureSpace.box(6)
    model = wrap_model(net, input_shape=(6,), example=X)
    x = torch.as_tensor(X, dtype=torch.float64)
    yt = torch.as_tensor(y)
    ledger = QueryLedger(len(X), budget)
    logits = MeteredModel(model, ledger, np.arange(len(X))).logits(x).detach().to(torch.float64)
    return BatchState(
        model, space, get_threat(threat), DECISION_CHANGE, ledger, x, yt,
        np.arange(len(X)), logits, torch.zeros(len(X), dtype=torch.bool),
        max_radius=1.0, rtol=0.01, generator=torch.Generator().manual_seed(0),
        config=SearchConfig(), stages=StageLedger())


def test_closed_brackets_are_never_charged_again():
    X, y, net = _data(8)
    state = _state(net, X, y, budget=None)
    sub = torch.arange(len(X))
    plan = plan_attack(None, 2, 4, state.config)
    minnorm_runs.minnorm_runs(state, sub, 20, 0, 2)
    # input 0: certified; input 1: its bracket already within rtol
    state.exact[0] = True
    state.attack_lo[1] = state.best_r[1] * (1 - state.rtol / 2)
    before = state.ledger.used().copy()
    minnorm_runs.minnorm_runs(state, sub, 10, 2, 2)
    refine.bisect_with_pgd(state, sub, 2, plan)
    spent = state.ledger.used() - before
    assert spent[0] == 0 and spent[1] == 0
    assert spent[2:].sum() > 0


def _closed_three_ways(state) -> None:
    """Input 0 certified, input 1 closed against a certified lower bound, input 2 closed only
    against a failed probe (``attack_lo``)."""
    state.exact[0] = True
    state.lower[1] = state.best_r[1] * (1 - state.rtol / 2)
    state.attack_lo[2] = state.best_r[2] * (1 - state.rtol / 2)


def test_leftover_uses_an_explicit_budget_on_every_uncertified_input():
    X, y, net = _data(8)
    budget = 1000
    state = _state(net, X, y, budget=budget)
    sub = torch.arange(len(X))
    plan = plan_attack(budget, 2, 4, state.config)
    minnorm_runs.minnorm_runs(state, sub, 20, 0, 2)
    assert torch.isfinite(state.best_r[:3]).all()
    _closed_three_ways(state)
    r_before = state.best_r.clone()
    before = state.ledger.used().copy()
    minnorm_runs.spend_leftover(state, sub, 2, plan)
    spent = state.ledger.used() - before
    assert spent[0] == 0 and spent[1] == 0
    # a failed probe proves nothing: under a budget that input is searched further
    assert (spent[2:] > 0).all()
    used = state.ledger.used()
    assert used.max() <= budget
    # what is left to each searched input no longer pays for a run of min_run_steps
    too_little = state.config.min_run_steps * 2 + plan.line_steps + 1
    assert (budget - used[2:] < too_little).all()
    assert (state.best_r <= r_before).all()


def test_leftover_without_a_budget_stops_at_the_plan_and_at_closed_brackets():
    X, y, net = _data(8)
    state = _state(net, X, y, budget=None)
    sub = torch.arange(len(X))
    plan = plan_attack(None, 2, 4, state.config)
    minnorm_runs.minnorm_runs(state, sub, 20, 0, 2)
    _closed_three_ways(state)
    before = state.ledger.used().copy()
    minnorm_runs.spend_leftover(state, sub, 2, plan)
    spent = state.ledger.used() - before
    assert (spent[:3] == 0).all()
    assert state.ledger.used().max() <= plan.passes
    opened = state.still_open(sub)
    assert (spent[3:][opened[3:].numpy()] > 0).all()


def test_leftover_is_a_part_of_the_search_where_the_plan_leaves_passes():
    X, y, net = _data()
    # a budget plans the cascade only where no convergence rounds follow it
    res = radius(net, X, y, threat="l1", space=FeatureSpace.box(6), budget=3000,
                 certify="none", config=SearchConfig(converge_ceiling=None))
    parts = res.meta["passes_by_part"]
    assert parts.get("leftover", 0) > 0
    assert sum(parts.values()) == res.queries.sum()
    assert res.queries.max() <= 3000


def test_targeted_runs_skip_the_class_already_reached():
    X, y, net = _data(8)
    state = _state(net, X, y, budget=None)
    sub = torch.arange(len(X))
    minnorm_runs.minnorm_runs(state, sub, 20, 0, 2)
    reached = state.best_logits.argmax(1)
    targets = minnorm_runs.targets_beyond_best(state, sub, 2)
    assert not (targets == state.y[:, None]).any()
    has = torch.isfinite(state.best_r)
    assert not (targets[has] == reached[has][:, None]).any()


@pytest.mark.parametrize("refine", [True, False])
def test_the_refining_run_aims_at_the_class_reached_from_its_counterexample(
        refine, monkeypatch):
    """The plan's refining L1 run aims at the best counterexample's class, from that
    counterexample (a second step scale in the same class); a plain targeted run aims at
    another class, from the input."""
    X, y, net = _data(8)
    state = _state(net, X, y, budget=None, threat="l1")
    sub = torch.arange(len(X))
    minnorm_runs.minnorm_runs(state, sub, 20, 0, 2)
    assert torch.isfinite(state.best_r).all()
    reached = state.best_logits.argmax(1).clone()
    best_x, best_r = state.best_x.clone(), state.best_r.clone()
    seen = {}
    real = minnorm_runs.MINNORM

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(minnorm_runs, "MINNORM", spy)
    minnorm_runs.minnorm_runs(state, sub, 10, 1, 2, refine=refine)
    if refine:
        assert torch.equal(seen["towards"], reached)
        assert torch.equal(seen["init"], best_x)
    else:
        assert not (seen["towards"] == reached).any()
        assert seen["init"] is None
    assert (state.best_r <= best_r).all()


def test_the_untargeted_run_is_aimed_only_where_another_boundary_is_clearly_nearer():
    X, y, net = _data(12)
    state = _state(net, X, y, budget=None)
    sub = torch.arange(len(X))
    plan = plan_attack(None, 2, 4, state.config)
    assert plan.aimed == 3
    before = state.ledger.used().copy()
    aim = minnorm_runs.aim_untargeted(state, sub, plan, 2)
    assert (state.ledger.used() - before == 2 * plan.aimed).all()  # a gradient per class
    classes, distance = first_order_distances(
        state.model, state.x, state.y, state.clean_logits, state.space, state.threat,
        DECISION_CHANGE, 3)
    nearest = distance.min(dim=1).values
    clear = nearest < state.config.aim_ratio * distance[:, 0]
    assert torch.equal(aim >= 0, clear)
    assert torch.equal(aim[clear], classes[clear].gather(
        1, distance[clear].argmin(dim=1, keepdim=True))[:, 0])
    assert clear.any() and not clear.all()  # the data exercise both branches


def test_aiming_is_a_part_of_the_search_under_linf_and_not_under_l1():
    X, y, net = _data()
    for threat, aimed in (("linf", True), ("l1", False)):
        res = radius(net, X, y, threat=threat, space=FeatureSpace.box(6), certify="none")
        parts = res.meta["passes_by_part"]
        assert ("aiming" in parts) == aimed
        assert (res.meta["attack_plan"]["aimed"] > 0) == aimed
        assert sum(parts.values()) == res.queries.sum()


def test_margins_leave_rows_aimed_at_minus_one_untargeted():
    logits = torch.tensor([[3.0, 1.0, 2.0, 0.0], [0.5, 2.0, 1.5, -1.0]])
    label = torch.tensor([0, 1])
    towards = torch.tensor([3, -1])
    margin = DECISION_CHANGE.margin(logits, label, towards)
    assert margin.tolist() == [3.0, 0.5]  # row 0 aimed at class 3, row 1 at its runner-up
    smooth = DECISION_CHANGE.smooth_margin(logits, label, towards)
    untargeted = DECISION_CHANGE.smooth_margin(logits, label)
    assert smooth[0] == 3.0 and smooth[1] == untargeted[1]


def test_bisection_warm_starts_from_the_last_failed_probe():
    X, y, net = _data(4)
    state = _state(net, X, y, budget=None)
    eps = torch.full((4,), 0.05, dtype=torch.float64)
    state.near_u[:] = 0.01
    state.near_ok[:2] = True
    state.attack_lo[:2] = 0.02
    start, _ = refine._probe_start(state, torch.arange(4), eps)
    assert torch.equal(start[:2], state.near_u[:2])  # failed probe below eps: reused
    assert torch.equal(start[2:], torch.zeros_like(start[2:]))  # nothing known: from 0


def test_probes_start_cold_on_discrete_spaces():
    X, y, net = _data(4)
    X = np.round(X * 4) / 4  # integer features below, on a grid of 1/4 in raw units
    space = FeatureSpace.from_arrays(np.zeros(6), np.ones(6) * 4, types=["integer"] * 6)
    state = _state(net, X * 4, y, budget=None, space=space)
    state.near_u[:] = 0.01
    state.near_ok[:] = True
    state.best_r[:] = 0.1
    eps = torch.full((4,), 0.05, dtype=torch.float64)
    # a shrunk or earlier iterate rounds into a local trap there: every probe starts at 0
    start, _ = refine._probe_start(state, torch.arange(4), eps)
    assert torch.equal(start, torch.zeros_like(state.near_u))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
def test_search_runs_on_cuda():
    X, y, net = _data()
    cpu = radius(net, X, y, threat="linf", space=FeatureSpace.box(6), budget=200, seed=0)
    gpu = radius(net, X, y, threat="linf", space=FeatureSpace.box(6), budget=200, seed=0,
                 device="cuda")
    assert np.isfinite(gpu.radius).all()
    assert gpu.queries.max() <= 200
    # float rounding differs between devices; the radii agree to the bracket's width
    np.testing.assert_allclose(gpu.radius, cpu.radius, rtol=0.05)


def test_ranking_puts_the_nearest_linear_boundary_first():
    # an affine model with no box in reach: the first-order distance is the exact one, so the
    # first ranked class is the class of the exact L1 radius
    d, k = 12, 6
    net = nn.Linear(d, k).double()
    torch.manual_seed(3)
    for p in net.parameters():
        torch.nn.init.normal_(p)
    X = np.random.default_rng(4).normal(size=(20, d))
    space = FeatureSpace.from_arrays(np.full(d, -1e6), np.full(d, 1e6), scale=np.ones(d))
    model = wrap_model(net, input_shape=(d,), example=X)
    x = torch.as_tensor(X)
    with torch.no_grad():
        logits = net(x)
    y = logits.argmax(1)
    ledger = QueryLedger(len(X), None)
    view = MeteredModel(model, ledger, np.repeat(np.arange(len(X)), k - 1))
    ranked = rank_by_distance(view, x, y, logits, space, get_threat("l1"), DECISION_CHANGE, k - 1)
    w, b = net.weight.detach().numpy(), net.bias.detach().numpy()
    for i in range(len(X)):
        c = w - w[int(y[i])]
        margin = (w[int(y[i])] - w) @ X[i] + b[int(y[i])] - b
        dist = np.where(np.arange(k) == int(y[i]), np.inf,
                        margin / np.abs(c).max(axis=1).clip(1e-30))
        assert int(ranked[i, 0]) == int(np.argmin(dist))
    assert (ledger.used() == 2 * (k - 1)).all()  # one forward and one backward per class


def test_targets_follow_the_ranking_and_skip_label_and_reached_class():
    X, y, net = _data(4)
    state = _state(net, X, y, budget=None)
    sub = torch.arange(4)
    ranking = torch.tensor([[3, 1, 2]] * 4)  # labels are 0..3; ranking excludes nothing yet
    targets = minnorm_runs.targets_beyond_best(state, sub, 2, ranking)
    for i in range(4):
        expected = [c for c in (3, 1, 2, 0) if c != int(state.y[i])][:2]
        assert targets[i].tolist() == expected


@pytest.mark.parametrize("threat", ["linf", "l2", "l1"])
def test_line_search_finds_the_boundary_of_a_linear_model_on_the_ray(threat):
    """On a linear model the margin along the segment is linear: the chord's zero is the
    boundary, so the line search ends at it to 2e-6 (bisection's 8 steps reach only
    2**-8 of the segment), never above the counterexample it started from, and each
    counterexample it keeps is verified."""
    torch.manual_seed(3)
    net = nn.Linear(6, 2).double()
    with torch.no_grad():  # clean margin 0.05 at the centre of the box
        net.bias.copy_(torch.stack([0.05 - 0.5 * (net.weight[0] - net.weight[1]).sum(),
                                    torch.zeros((), dtype=torch.float64)]))
    X = 0.5 + 0.01 * np.random.default_rng(0).standard_normal((4, 6))
    y = net(torch.as_tensor(X)).argmax(1).numpy()
    state = _state(net, X, y, budget=None, threat=threat)
    w = (net.weight[y] - net.weight[1 - y]).detach()            # (4, 6): margin's gradient
    m0 = (state.clean_logits.gather(1, state.y[:, None]) - state.clean_logits.gather(
        1, 1 - state.y[:, None])).reshape(-1)
    v = -w / w.abs().sum(dim=1, keepdim=True)                   # margin falls by |w|²/|w|₁
    t_star = m0 / (w * -v).sum(dim=1)                           # the boundary on x + t v
    start = torch.as_tensor([1.7, 2.3, 2.9, 3.7], dtype=torch.float64) * t_star
    assert (start[:, None] * v.abs()).max() < 0.5               # inside the box, no clip
    sub = torch.arange(len(X))
    assert state.check(sub, state.x + start[:, None] * v).all()
    before = state.best_r.clone()
    refine.line_search(state, sub, 8)
    exact = state.threat.norm(t_star[:, None] * v)
    assert torch.all(state.best_r <= before)
    # LINE_AIM (1e-6) past the boundary, never below it (every radius is verified)
    assert torch.all(state.best_r >= exact * (1 - 1e-12))
    np.testing.assert_allclose(state.best_r.numpy(), exact.numpy(), rtol=2 * refine.LINE_AIM)
    assert state.check(sub, state.best_x).all()


def test_ranking_reuses_the_distances_the_aiming_paid_for():
    """At a budget where the untargeted run is aimed (3 runner-ups) and the targets are
    ranked (9 classes), the ranking pays only for the 6 classes the aiming did not compute,
    and it is the ranking of all 9 computed afresh."""
    torch.manual_seed(7)
    net = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 10)).double()
    X = np.random.default_rng(8).uniform(0, 1, (6, 6))
    y = net(torch.as_tensor(X)).argmax(1).numpy()
    state = _state(net, X, y, budget=1000)
    plan = plan_attack(1000, 2, 10, state.config)
    assert plan.aimed == 3 and plan.ranked == 9
    sub = torch.arange(len(X))
    minnorm_runs.aim_untargeted(state, sub, plan, 2)
    before = state.ledger.used().copy()
    ranking = minnorm_runs.rank_targets(state, sub, plan, 2)
    assert (state.ledger.used() - before == 2 * (plan.ranked - plan.aimed)).all()
    fresh = _state(net, X, y, budget=1000)
    clean = fresh.ledger.used().copy()
    expected = minnorm_runs.rank_targets(fresh, sub, plan, 2)  # no aiming: all 9 paid for
    assert (fresh.ledger.used() - clean == 2 * plan.ranked).all()
    assert torch.equal(ranking, expected)


def test_line_search_points_clear_the_float32_rounding_of_the_boundary():
    """A float32 model: the line search aims past the boundary by the logits' rounding
    (core.statement.rounding_margin), so each counterexample it keeps is one in any batch,
    not only in the batch it was checked in."""
    torch.manual_seed(3)
    net = nn.Linear(6, 2)
    with torch.no_grad():
        net.bias.copy_(torch.stack([0.05 - 0.5 * (net.weight[0] - net.weight[1]).sum(),
                                    torch.zeros(())]))
    X = 0.5 + 0.01 * np.random.default_rng(0).standard_normal((4, 6))
    with torch.no_grad():
        y = net(torch.as_tensor(X, dtype=torch.float32)).argmax(1).numpy()
    state = _state(net, X, y, budget=None, threat="l2")
    assert state.model.dtype == torch.float32
    sub = torch.arange(len(X))
    w = (net.weight[y] - net.weight[1 - y]).detach().double()
    far = state.x - 0.4 * w / torch.linalg.vector_norm(w, dim=1, keepdim=True)
    assert state.check(sub, far).all()
    refine.line_search(state, sub, 8)
    assert (state.best_r < 0.4 * 0.99).all()
    # past by more than a few float32 ulps of the logits' size (rounding_margin asks 16)
    floor = 8 * torch.finfo(torch.float32).eps * (1 + state.clean_logits.abs().amax(1))
    assert (rounding_margin(state.clean_logits, torch.float32) > floor).all()
    with torch.no_grad():  # each point alone, outside any batch
        for i in range(len(X)):
            z = net(state.best_x[i:i + 1].float())[0].double()
            assert z[y[i]] - z[1 - y[i]] < -floor[i]
