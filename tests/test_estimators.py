"""Black-box gradient estimators: accuracy against autograd, scaled steps, budgets, log(0)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robustscope.core.errors import BudgetExhausted
from robustscope.core.space import FeatureSpace
from robustscope.core.statement import DECISION_CHANGE
from robustscope.models.base import QueryLedger
from robustscope.models.blackbox import ProbaClassifier
from robustscope.models.estimators import FiniteDifference, finite_difference, nes, spsa
from robustscope.models.metered import MeteredModel
from robustscope.models.torch_model import TorchClassifier


def _cos(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cosine_similarity(a.reshape(len(a), -1), b.reshape(len(b), -1))


def _smooth_model(d: int = 6, k: int = 3, seed: int = 0) -> TorchClassifier:
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(d, 16), torch.nn.Tanh(), torch.nn.Linear(16, k))
    return TorchClassifier(net.double(), k, (d,), dtype=torch.float64)


def _objective(labels):
    return lambda logits: DECISION_CHANGE.margin(logits, labels)


def test_finite_difference_matches_autograd():
    model = _smooth_model()
    x = torch.randn(5, 6, dtype=torch.float64)
    y = model.predict(x)
    obj = _objective(y)
    logits, values, grad = model.value_and_grad(x, obj)
    est_logits, est_values, est = finite_difference(model, x, obj, h=1e-4)
    assert torch.allclose(est_logits, logits)
    assert torch.allclose(est_values, values)
    assert (_cos(est, grad) > 0.9999).all()
    assert torch.allclose(est, grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("make", [nes, spsa])
def test_random_direction_estimators_point_along_the_gradient(make):
    model = _smooth_model()
    x = torch.randn(5, 6, dtype=torch.float64)
    obj = _objective(model.predict(x))
    _, _, grad = model.value_and_grad(x, obj)
    estimator = make(samples=400, sigma=1e-4, generator=torch.Generator().manual_seed(1))
    _, _, est = estimator(model, x, obj)
    # 400 antithetic directions in 6 dimensions: the estimate is close in direction
    assert (_cos(est, grad) > 0.95).all()
    # and unbiased in size (proper normalisation), within Monte Carlo error
    ratio = est.norm(dim=1) / grad.norm(dim=1)
    assert ((ratio > 0.8) & (ratio < 1.25)).all()


def test_fd_step_is_per_feature_in_scaled_units():
    """One feature's range is 1e4 times another's: an unscaled step of the size that suits
    the large feature would wreck the small one; the scaled step gets both right."""
    scale = np.array([1e-2, 1e2, 1.0])
    w = torch.tensor([30.0, 0.002, 0.5], dtype=torch.float64)

    class Curvy(torch.nn.Module):
        def forward(self, x):
            s = torch.sin(x[:, 0] * 100.0) * 0.3 + (x * w).sum(1) + 1e-4 * x[:, 1] ** 2
            return torch.stack([torch.zeros_like(s), s], dim=1)

    white = TorchClassifier(Curvy().double(), 2, (3,), dtype=torch.float64)
    black = ProbaClassifier(
        lambda a: torch.softmax(Curvy()(torch.as_tensor(a)), 1).numpy(), 2, (3,))
    space = FeatureSpace.from_arrays([-np.inf] * 3, [np.inf] * 3, scale=scale)
    x = torch.tensor([[0.013, 40.0, 0.2], [-0.004, -75.0, 1.1]], dtype=torch.float64)
    obj = lambda logits: logits[:, 1] - logits[:, 0]  # noqa: E731
    _, _, grad = white.value_and_grad(x, obj)
    _, _, est = FiniteDifference(h=1e-4, space=space)(black, x, obj)
    assert torch.allclose(est, grad, rtol=1e-3, atol=1e-8)
    # the same relative step without the scale (one step for all features) is far off
    _, _, bad = FiniteDifference(h=1e-4 * 1e2)(black, x, obj)
    assert not torch.allclose(bad, grad, rtol=1e-2)


def test_immutable_features_are_not_probed():
    model = _smooth_model()
    space = FeatureSpace.from_arrays([-np.inf] * 6, [np.inf] * 6,
                                     mutable=[True, False, True, True, False, True])
    x = torch.randn(3, 6, dtype=torch.float64)
    ledger = QueryLedger(3)
    estimator = FiniteDifference(1e-4, space)
    _, _, est = estimator(model, x, _objective(model.predict(x)), ledger=ledger)
    assert (est[:, [1, 4]] == 0).all()
    assert estimator.cost(6) == 2 * 4 + 1
    assert (ledger.forward == 9).all()


def test_queries_are_charged_and_the_budget_holds():
    model = _smooth_model()
    x = torch.randn(4, 6, dtype=torch.float64)
    obj = _objective(model.predict(x))
    ledger = QueryLedger(4, budget=30)
    estimator = spsa(samples=10)
    estimator(model, x, obj, ledger=ledger)  # 21 queries per input
    assert (ledger.forward == 21).all()
    seen = []  # rows the adapter evaluates
    real = model._logits
    model._logits = lambda z: seen.append(len(z)) or real(z)
    before = len(seen)
    with pytest.raises(BudgetExhausted, match="input"):
        estimator(model, x, obj, ledger=ledger)
    assert len(seen) == before  # refused before querying
    # charged through the metered view it is given as well
    outer = QueryLedger(4)
    FiniteDifference(1e-3)(MeteredModel(model, outer, np.arange(4)), x, obj)
    assert (outer.forward == 13).all()


def test_probabilities_of_zero_give_finite_losses_and_gradients():
    def hard(a):
        p1 = (a[:, 0] > 0).astype(float)  # probabilities exactly 0 and 1
        return np.stack([1 - p1, p1], axis=1)

    model = ProbaClassifier(hard, 2, (2,))
    x = torch.tensor([[0.5, 0.0], [-0.5, 1.0], [1e-5, 0.0]], dtype=torch.float64)
    y = torch.tensor([1, 0, 1])
    nll = lambda logits: torch.nn.functional.cross_entropy(logits, y, reduction="none")  # noqa: E731
    logits, values, grad = finite_difference(model, x, nll, h=1e-3)
    assert torch.isfinite(logits).all() and torch.isfinite(values).all()
    assert torch.isfinite(grad).all()
    assert grad[2, 0] < 0  # the step crosses the jump: the loss falls towards class 1


def test_same_contract_as_value_and_grad():
    """FiniteDifference(h, space) gives what Classifier.value_and_grad gives with the
    per-feature step h·scale, so it can stand in for it."""
    model = _smooth_model()
    black = ProbaClassifier(lambda a: torch.softmax(model.module(torch.as_tensor(a)), 1).numpy(),
                            3, (6,))
    space = FeatureSpace.from_arrays([-np.inf] * 6, [np.inf] * 6,
                                     scale=[0.1, 1, 10, 100, 1, 0.01])
    x = torch.randn(4, 6, dtype=torch.float64) * torch.as_tensor(space.scale)
    obj = _objective(black.predict(x))
    ref = black.value_and_grad(x, obj, fd_step=torch.as_tensor(1e-3 * space.scale))
    est = FiniteDifference(1e-3, space)(black, x, obj)
    for a, b in zip(ref, est, strict=True):
        assert a.shape == b.shape and torch.allclose(a, b, rtol=1e-6, atol=1e-9)


def test_fd_probes_are_valid_inputs_of_the_feature_space():
    """Integer features step by whole numbers, probes stop at the bounds, categorical and
    immutable features are not probed; the model raises on any invalid input."""
    space = FeatureSpace.from_arrays(
        [0, 0, 0, 0, 0, -1], [10, 1, 1, 1, 1, 1],
        types=["integer", "binary", "categorical", "categorical", "real", "real"],
        mutable=[True, True, True, True, True, False], groups=[[2, 3]])
    w = np.array([0.3, -0.7, 0.2, -0.2, 1.5, 0.4])
    frozen = np.array([0.25, -0.5])

    def proba(a):
        space.check_data(a, "probe")  # raises InputError on an invalid probe
        assert np.isin(a[:, 5], frozen).all()
        s = a @ w
        p1 = 1 / (1 + np.exp(-s))
        return np.stack([1 - p1, p1], axis=1)

    model = ProbaClassifier(proba, 2, (6,))
    x = torch.tensor([[0.0, 1.0, 1.0, 0.0, 0.999, 0.25], [7.0, 0.0, 0.0, 1.0, 0.5, -0.5]],
                     dtype=torch.float64)
    obj = lambda logits: logits[:, 1] - logits[:, 0]  # noqa: E731  (= s, linear)
    estimator = FiniteDifference(h=0.05, space=space)
    _, _, grad = estimator(model, x, obj)
    assert estimator.cost(6) == 2 * 3 + 1
    expected = torch.as_tensor(np.tile(w, (2, 1)))
    expected[:, [2, 3, 5]] = 0.0
    assert torch.allclose(grad, expected, atol=1e-9)
