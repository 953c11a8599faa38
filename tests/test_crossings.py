"""The crossing search of the gradient-free cascade (L2 / L1 on scored plateau models)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from robustscope.core.errors import InputError
from robustscope.core.space import FeatureSpace
from robustscope.models.base import QueryLedger
from robustscope.models.blackbox import ProbaClassifier
from robustscope.models.metered import MeteredModel
from robustscope.solvers.attacks.decision import crossings
from robustscope.solvers.attacks.decision.crossings import (
    _ruined,
    crossing_search,
    profile_cost,
    search_plan,
)
from robustscope.solvers.attacks.decision.gradient_free import gradient_free
from robustscope.solvers.attacks.decision.scaled_oracle import ScaledOracle
from robustscope.threats import get_threat

D = 8
#: Four cheap crossings (0.1 each, 1 nat of margin each) and one dear one (0.3, 5 nats):
#: under L2 the nearest counterexample crosses the four cheap ones (radius 0.2), not the
#: dear one alone (0.3); under L1 the dear one alone (0.3) beats the four (0.4).
CHEAP, DEAR = 0.1, 0.3


def _step_model(label_only: bool = False) -> ProbaClassifier:
    """Log-odds ``3.5 - sum of the drops past each threshold``: additive steps like a boosted
    ensemble of stumps; class 0 while the log-odds stay positive."""

    def proba(a):
        a = np.asarray(a)
        logit = 3.5 - (a[:, :4] > CHEAP).sum(1) - 5.0 * (a[:, 4] > DEAR)
        p0 = 1 / (1 + np.exp(-logit))
        if label_only:
            p0 = (logit > 0).astype(float)
        return np.stack([p0, 1 - p0], axis=1)

    return ProbaClassifier(proba, 2, (D,))


def _oracle(model, threat: str = "l2", budget: int | None = None, ledger=None):
    space = FeatureSpace.from_arrays([-1.0] * D, [1.0] * D, scale=np.ones(D))
    x = torch.zeros(1, D, dtype=torch.float64)
    return ScaledOracle(model, x, torch.zeros(1, dtype=torch.long), space,
                        get_threat(threat), budget=budget, ledger=ledger)


def _dear_counterexample(oracle: ScaledOracle) -> None:
    u = torch.zeros(1, 1, D, dtype=torch.float64)
    u[0, 0, 4] = 0.35
    adv, _, _, _ = oracle.query(np.arange(1), u)
    assert adv[0, 0]


def test_the_search_spreads_an_l2_counterexample_over_the_cheap_crossings():
    model = _step_model()
    ledger = QueryLedger(1)
    oracle = _oracle(MeteredModel(model, ledger, np.arange(1)), budget=2000)
    _dear_counterexample(oracle)
    assert crossing_search(oracle, torch.Generator().manual_seed(0), rounds=4)
    u = oracle.best_u[0].numpy()
    assert (u[:4] > CHEAP).all() and u[4] == 0 and (u[5:] == 0).all()
    # pinned just past each threshold: within 0.35 * sqrt(2) / 2**6 of it
    assert (u[:4] <= CHEAP + 0.35 * math.sqrt(2) / 2**6 + 1e-12).all()
    assert oracle.best_r[0] < 0.21
    assert model.predict(oracle.candidates())[0] == 1  # the model confirms it
    assert ledger.forward[0] == oracle.used[0] <= 2000


def test_under_l1_the_dear_crossing_alone_is_kept():
    oracle = _oracle(_step_model(), threat="l1", budget=2000)
    _dear_counterexample(oracle)
    crossing_search(oracle, torch.Generator().manual_seed(0), rounds=4)
    u = oracle.best_u[0].numpy()
    # pinned, not replaced by the four (whose L1 norm, 0.49 before pinning, is past the reach)
    assert u[4] > DEAR and oracle.best_r[0] < 0.35
    assert (u[:4] == 0).all()


def test_a_label_only_model_gets_its_profile_and_nothing_more():
    oracle = _oracle(_step_model(label_only=True), budget=2000)
    u = torch.zeros(1, 1, D, dtype=torch.float64)
    u[0, 0, :4] = 0.14  # the four cheap crossings: no single feature changes the decision
    assert oracle.query(np.arange(1), u)[0][0, 0]
    before = oracle.best_r.clone()
    assert not crossing_search(oracle, torch.Generator().manual_seed(0))
    assert oracle.used[0] == 1 + profile_cost(oracle)  # the start, then the profile only
    assert torch.equal(oracle.best_r, before)


def test_the_search_stays_within_the_budget_and_skips_inputs_that_cannot_profile():
    cost = profile_cost(_oracle(_step_model()))
    assert cost == 1 + 2 * D * len(crossings.LEVELS)
    for budget in (cost, cost + 1, cost + 17, cost + 300):
        oracle = _oracle(_step_model(), budget=budget)
        _dear_counterexample(oracle)
        ran = crossing_search(oracle, torch.Generator().manual_seed(1))
        assert oracle.used[0] <= budget
        assert (ran is not None) == (budget >= cost + 2)  # the start, profile, one more
        if not ran:
            assert oracle.used[0] == 1


def test_the_plan_keeps_a_share_with_the_finest_profile_that_fits():
    oracle = _oracle(_step_model())  # 8 features: profiles of 129 and 49 queries
    fine, coarse = profile_cost(oracle), profile_cost(oracle, crossings.COARSE_LEVELS)
    assert (fine, coarse) == (129, 49)
    assert search_plan(oracle, 5000) == (2000, crossings.LEVELS)
    assert search_plan(oracle, 1000) == (400, crossings.LEVELS)
    assert search_plan(oracle, 499) == (199, crossings.COARSE_LEVELS)  # 500 in radius()
    assert search_plan(oracle, 474) == (0, ())  # 189 kept: under MIN_RESERVE
    wide = ScaledOracle(_step_model(), torch.zeros(1, D), torch.zeros(1, dtype=torch.long),
                        FeatureSpace.from_arrays([-1.0] * D, [1.0] * D, scale=np.ones(D)),
                        get_threat("l2"))
    wide.mutable = torch.ones(40, dtype=torch.bool)  # as if 40 features: 641 and 241 queries
    assert search_plan(wide, 5000) == (2000, crossings.LEVELS)
    assert search_plan(wide, 2000) == (800, crossings.COARSE_LEVELS)
    assert search_plan(wide, 1000) == (0, ())  # 399 kept: neither profile fits in half


def test_a_ruin_takes_back_one_to_three_moves_and_keeps_the_rest():
    g = torch.Generator().manual_seed(0)
    best = torch.tensor([[0.5, 0.0, -0.2, 0.1, 0.3, 0.0],
                         [0.0, 0.0, 0.7, 0.0, 0.0, 0.0]], dtype=torch.float64)
    for _ in range(50):
        ruined = _ruined(best, g)
        taken = (best != 0) & (ruined == 0)
        assert ((ruined == 0) | (ruined == best)).all()  # nothing moves elsewhere
        assert 1 <= int(taken[0].sum()) <= 3 and int(taken[1].sum()) == 1


def test_the_oracle_knows_scores_from_decisions():
    scored = _oracle(_step_model())
    blind = _oracle(_step_model(label_only=True))
    u = torch.zeros(1, 3, D, dtype=torch.float64)
    u[0, 1, 0] = 0.2  # one threshold crossed: the log-odds fall, the decision stays
    u[0, 2, 4] = 0.35  # a counterexample: its margin is not compared
    for oracle in (scored, blind):
        oracle.query(np.arange(1), u[:, :1])
        assert not oracle.scored[0]  # one point says nothing
        oracle.query(np.arange(1), u[:, 1:])
    assert scored.scored[0] and not blind.scored[0]


def test_the_cascade_runs_the_search_on_scored_plateaus_only(monkeypatch):
    x = torch.zeros(1, D, dtype=torch.float64)
    y = torch.zeros(1, dtype=torch.long)
    space = FeatureSpace.from_arrays([-1.0] * D, [1.0] * D, scale=np.ones(D))
    pool = torch.zeros(2, D, dtype=torch.float64)
    pool[1, 0], pool[1, 4] = 0.5, 0.9  # of the other class: the first counterexample, on
    # whose path from the input the margin moves without the decision (a scored model)

    calls = []
    original = crossings._profile
    monkeypatch.setattr(crossings, "_profile",
                        lambda *a, **k: calls.append(1) or original(*a, **k))

    def run(model, threat="l2", budget=3000, **kw):
        calls.clear()
        out = gradient_free(model, x, y, space, threat, budget=budget, X_pool=pool,
                            y_pool=torch.tensor([0, 1]), **kw)
        return out, bool(calls)

    out, ran = run(_step_model())
    assert ran and out.radius[0] < 0.21 and out.forward_queries[0] <= 3000
    out, ran = run(_step_model(), budget=500)  # a share of 200, the coarse profile (49)
    assert ran and out.forward_queries[0] <= 500
    _, ran = run(_step_model(), budget=470)  # a share of 188: under MIN_RESERVE
    assert not ran
    _, ran = run(_step_model(), crossings=False)
    assert not ran
    _, ran = run(_step_model(), crossings=True, threat="linf")
    assert not ran  # a move's size is its Linf cost: nothing to spread
    _, ran = run(_step_model(label_only=True))
    assert not ran
    _, ran = run(_smooth_model())  # its margin moves under small differences
    assert not ran


def _smooth_model() -> ProbaClassifier:
    def proba(a):
        logit = 3.5 - 10 * np.asarray(a)[:, :5].sum(1)
        p0 = 1 / (1 + np.exp(-logit))
        return np.stack([p0, 1 - p0], axis=1)

    return ProbaClassifier(proba, 2, (D,))


def test_a_mixed_batch_searches_each_input_on_its_own_budget():
    """Three inputs: a counterexample to spread, none at all, and one whose budget runs out
    after its profile. Each is charged its own queries, none past the budget."""
    model = _step_model()
    space = FeatureSpace.from_arrays([-1.0] * D, [1.0] * D, scale=np.ones(D))
    ledger = QueryLedger(3)
    x = torch.zeros(3, D, dtype=torch.float64)
    oracle = ScaledOracle(MeteredModel(model, ledger, np.arange(3)), x,
                          torch.zeros(3, dtype=torch.long), space, get_threat("l2"),
                          budget=600)
    u = torch.zeros(3, 1, D, dtype=torch.float64)
    u[0, 0, 4] = u[2, 0, 4] = 0.35
    oracle.query(np.array([0, 2]), u[[0, 2]])
    oracle.used[2] = 600 - profile_cost(oracle) - 1  # the profile and one more query left
    crossing_search(oracle, torch.Generator().manual_seed(0))
    assert oracle.best_r[0] < 0.21 and math.isinf(oracle.best_r[1])
    assert oracle.used[1] == 0 and oracle.used[2] == 600 and oracle.used[0] <= 600
    # the ledger saw what each input was asked: the third its start, profile and one more
    assert ledger.forward.tolist() == [oracle.used[0], 0, 1 + profile_cost(oracle) + 1]


def test_without_a_budget_or_rounds_the_search_refuses_to_start():
    oracle = _oracle(_step_model())
    _dear_counterexample(oracle)
    with pytest.raises(InputError, match="budget"):
        crossing_search(oracle, torch.Generator())
    assert crossing_search(oracle, torch.Generator().manual_seed(0), rounds=2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
@pytest.mark.parametrize("threat", ["l2", "linf"])
def test_the_cascade_called_directly_runs_on_cuda(threat):
    """Called without a generator on CUDA inputs, the decision solvers draw on the CPU
    generator they make themselves and move the draws (a CUDA generator cannot draw CPU
    tensors)."""
    x = torch.zeros(2, D, dtype=torch.float64, device="cuda")
    space = FeatureSpace.from_arrays([-1.0] * D, [1.0] * D, scale=np.ones(D))
    pool = torch.zeros(2, D, dtype=torch.float64, device="cuda")
    pool[1, 0], pool[1, 4] = 0.5, 0.9
    out = gradient_free(ProbaClassifier(_step_model()._predict_proba, 2, (D,), device="cuda"),
                        x, torch.zeros(2, dtype=torch.long, device="cuda"), space, threat,
                        budget=1500, X_pool=pool, y_pool=torch.tensor([0, 1], device="cuda"))
    assert np.isfinite(out.radius).all() and (out.forward_queries <= 1500).all()


@pytest.mark.parametrize("spend", [True, False])
def test_what_the_polish_leaves_goes_back_to_the_constructions(monkeypatch, spend):
    from robustscope.solvers.attacks.decision import gradient_free as cascade

    monkeypatch.setattr(cascade, "SPEND_LEFTOVER", spend)
    x = torch.zeros(1, D, dtype=torch.float64)
    pool = torch.zeros(2, D, dtype=torch.float64)
    pool[1, 0], pool[1, 4] = 0.5, 0.9
    space = FeatureSpace.from_arrays([-1.0] * D, [1.0] * D, scale=np.ones(D))
    out = gradient_free(_step_model(), x, torch.zeros(1, dtype=torch.long), space, "l2",
                        budget=1000, X_pool=pool, y_pool=torch.tensor([0, 1]))
    # the polish needs a few dozen of the 200 queries kept for it; the rest is spent only
    # when it goes back to the crossing search
    assert (out.forward_queries[0] == 1000) == spend
    assert out.forward_queries[0] <= 1000 and out.radius[0] < 0.21
