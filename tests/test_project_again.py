"""The boundary projection again after the step-down search, under L2 on smooth black boxes:
the step-down search leaves it its queries, it starts from the counterexample the search
ended with, and it never runs where it cannot help (Linf, small budgets, flat margins)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from blackbox_helpers import logistic_box

from robustscope.solvers.attacks.decision import gradient_free as gradient_free_module
from robustscope.solvers.attacks.decision.gradient_free import (
    PROJECT_AGAIN,
    PROJECT_AGAIN_FROM,
    gradient_free,
    project_again_share,
)
from robustscope.solvers.attacks.decision.linear_steps import boundary_steps
from robustscope.solvers.attacks.decision.scaled_oracle import ScaledOracle
from robustscope.threats import get_threat

D = 5


def _logistic(n: int = 3, seed: int = 0):
    """A logistic black box on ``D`` features (:func:`blackbox_helpers.logistic_box`)."""
    return logistic_box(n, D, seed, bias=0.3)


@pytest.mark.parametrize("threat, budget, flat, expected", [
    ("l2", 500, False, PROJECT_AGAIN * (D + 16)),
    ("l2", PROJECT_AGAIN_FROM - 1, False, 0),
    ("linf", 500, False, 0),
    ("l2", 500, True, 0),
])
def test_the_share_is_kept_only_under_l2_from_its_floor_on_smooth_models(threat, budget,
                                                                          flat, expected):
    model, space, x, y, _ = _logistic()
    oracle = ScaledOracle(model, x, y, space, get_threat(threat), budget=budget)
    oracle.plateau[1] = flat  # one input whose margin the first projection found flat
    assert project_again_share(oracle, budget) == expected


def _recorded(monkeypatch, planted: torch.Tensor | None = None):
    """Record each call of the boundary projection (the ``rounds`` asked, the step-down
    search's calls so far, the budget the oracle showed); the step-down search is replaced
    by a stand-in that records the budget it was shown and says every input converged; with
    ``planted`` (scaled, ``(n, D)``) it asks the model about those counterexamples, which the
    oracle then holds, and the first projection is left out."""
    calls: list[dict] = []
    searches: list[int] = []

    def projection(oracle, rounds=None, **kwargs):
        calls.append({"rounds": rounds, "after_search": len(searches),
                      "budget": oracle.budget, "best": oracle.best_r.clone()})
        if rounds is not None or planted is None:  # the first one is left out with a plant
            boundary_steps(oracle, **({} if rounds is None else {"rounds": rounds}))

    def search(*args, oracle=None, **kwargs):
        searches.append(oracle.budget)
        if planted is not None:
            oracle.query(np.arange(oracle.n), planted.unsqueeze(1))
        out = oracle.output()
        out.meta["converged"] = np.ones(oracle.n, dtype=np.int8)
        return out

    monkeypatch.setattr(gradient_free_module, "boundary_steps", projection)
    monkeypatch.setattr(gradient_free_module, "step_down_search", search)
    monkeypatch.setattr(gradient_free_module, "hop_skip_jump", lambda *a, **k: None)
    return calls, searches


@pytest.mark.parametrize("threat", ["l2", "linf"])
def test_the_projection_runs_again_after_the_step_down_search_under_l2(monkeypatch, threat):
    """Under L2 the step-down search is shown a budget short of the rounds kept, and the
    second projection runs after it with those rounds and the rest of the budget; under Linf
    only the first projection runs and the search keeps its budget."""
    model, space, x, y, _ = _logistic()
    calls, searches = _recorded(monkeypatch)
    budget = 600
    gradient_free(model, x, y, space, threat, budget=budget, crossings=False, polish_share=0.0)
    kept = PROJECT_AGAIN * (D + 16)
    if threat == "l2":
        assert [c["rounds"] for c in calls] == [None, PROJECT_AGAIN]
        assert calls[1]["after_search"] == 1
        assert searches[0] == budget - kept
        assert calls[1]["budget"] == budget
    else:
        assert [c["rounds"] for c in calls] == [None]
        assert searches[0] == budget


def test_the_second_projection_starts_from_the_step_down_search_s_counterexample(monkeypatch):
    """A stand-in step-down search leaves each input a counterexample half again as far as
    the boundary and off its normal; the second projection takes it to the boundary's
    nearest point (its 2% overshoot), within the per-input budget."""
    model, space, x, y, step = _logistic()
    off = torch.zeros_like(step)
    off[:, 0] = 1.0
    off -= (off * step).sum(1, keepdim=True) / (step * step).sum(1, keepdim=True) * step
    planted = 1.5 * step + 0.3 * step.norm(dim=1, keepdim=True) * off / off.norm(dim=1,
                                                                                   keepdim=True)
    calls, _ = _recorded(monkeypatch, planted)
    budget = 500
    run = gradient_free(model, x, y, space, "l2", budget=budget, crossings=False,
                        polish_share=0.0)
    exact = step.norm(dim=1)
    assert torch.allclose(calls[1]["best"], planted.norm(dim=1))  # what it started from
    assert (torch.as_tensor(run.radius) <= exact * 1.03).all()
    assert (torch.as_tensor(run.radius) >= exact * (1 - 1e-9)).all()
    assert (run.forward_queries <= budget).all()
