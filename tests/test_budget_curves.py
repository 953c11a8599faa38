"""benchmarks/peers/budget_curves.py: the bisection keeps each input within its budget, and
the cache keeps the smallest confirmed radius per input as the best known."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bc():
    spec = importlib.util.spec_from_file_location(
        "budget_curves", ROOT / "benchmarks" / "peers" / "budget_curves.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["budget_curves"] = module
    spec.loader.exec_module(module)
    return module


class FakeNet:
    """Stands in for ``methods.Counting``: only its pass counter is read."""

    def __init__(self) -> None:
        self.passes = 0


def threshold_attack(net: FakeNet, truth: np.ndarray, X: np.ndarray, cost: int):
    """Succeeds iff eps >= the input's true radius; each probe costs ``cost`` passes."""
    def at(i, eps):
        net.passes += cost
        return X[i:i + 1] + eps, bool(eps >= truth[i])
    return at


@pytest.mark.parametrize("budget,cost", [(50, 3), (200, 15), (1000, 83)])
def test_bisection_stays_within_budget_and_brackets_the_truth(bc, budget, cost):
    truth = np.array([0.003, 0.05, 0.4, 0.99, 2.0])   # the last is beyond the max radius 1
    X = np.zeros((5, 4))
    net = FakeNet()
    r, _, used = bc.budget_bisection(threshold_attack(net, truth, X, cost), net, X, 1.0, budget)
    assert (used <= budget).all() and used.sum() == net.passes
    assert np.isinf(r[-1])
    assert (r[:-1] >= truth[:-1]).all()
    probes = budget // cost
    # 7 doublings at most, then halvings: the bracket shrinks once per remaining probe
    assert (r[:-1] - truth[:-1] <= 2.0 ** -(probes - 8)).all()


def test_probe_dearer_than_the_budget_is_not_at_budget(bc):
    def run_at(steps):
        return bc.M.Run(np.zeros(2), np.zeros((2, 1)), np.full(2, 10.0 * steps + 5), 0.0)
    run, steps = bc.fit_steps(run_at, 10, 60, 10)
    assert steps == 5 and np.median(run.queries) <= 60
    with pytest.raises(bc.NotAtBudget):
        bc.fit_steps(run_at, 10, 4, 10)


def test_cache_keeps_the_best_confirmed_radius_and_prefers_exact(bc, tmp_path):
    cache = bc.Cache(tmp_path / "r.json")
    slot = cache.slot("mlp", "linf", ["a", "b", "c"], "net1")
    bc.record(slot, "fmn", "50", bc.Measured([0.5, math.inf, 0.3], [49] * 3, 0.1, "steps=24"))
    bc.record(slot, "robustscope", "50", bc.Measured([0.4, 0.7, 0.35], [32] * 3, 0.1, ""))
    ref, _ = bc.reference(slot, 3)
    assert ref.tolist() == [0.4, 0.7, 0.3]
    assert slot["best_by"] == ["robustscope@50", "robustscope@50", "fmn@50"]
    slot["exact"] = {"radius": [0.39, math.nan, 0.3], "seconds_per_input": 1.0,
                     "time_limit": 10.0}
    assert bc.reference(slot, 3)[0].tolist() == [0.39, 0.7, 0.3]
    cache.save()
    again = bc.Cache(tmp_path / "r.json").slot("mlp", "linf", ["a", "b"], "net1")  # a prefix
    assert bc.get(again, "fmn", "50", 2).radius == [0.5, math.inf]
    assert bc.get(again, "fmn", "100", 2) is None
    assert bc.Cache(tmp_path / "r.json").slot("mlp", "linf", ["x"], "net1")["entries"] == {}
    # the same inputs through another network (retrained elsewhere): nothing is reused ...
    assert bc.Cache(tmp_path / "r.json").slot("mlp", "linf", ["a", "b"], "net2")["best"] == []
    # ... except to render what is cached (no fingerprint given)
    assert bc.Cache(tmp_path / "r.json").slot("mlp", "linf", ["a"], None)["best"] != []


def test_model_fingerprint_follows_the_weights(bc):
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    same = torch.nn.Linear(3, 2)
    same.load_state_dict(net.state_dict())
    assert bc.model_fingerprint(net) == bc.model_fingerprint(same)
    with torch.no_grad():
        same.bias[0] += 1e-6
    assert bc.model_fingerprint(net) != bc.model_fingerprint(same)
