"""The L1 minimum-norm solver (``solvers.minnorm_l1``) against closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.optimize import linprog
from torch import nn

from robustscope import FeatureSpace
from robustscope.core.statement import Statement
from robustscope.models import wrap_model
from robustscope.models.metered import MeteredModel
from robustscope.solvers.attacks.gradient.minnorm_l1 import linear_l1_step, minnorm_l1
from robustscope.solvers.exact.linear.closed_form import exact_linear_radius
from robustscope.threats.lp import L1, L2

pytestmark = pytest.mark.usefixtures("one_thread")


def _linear(d: int, k: int, seed: int) -> nn.Linear:
    torch.manual_seed(seed)
    net = nn.Linear(d, k).double()
    with torch.no_grad():
        net.weight.normal_()
        net.bias.normal_(std=0.3)
    return net.eval()


def _inputs(net: nn.Module, d: int, n: int, seed: int):
    x = torch.as_tensor(np.random.default_rng(seed).uniform(0, 1, size=(n, d)))
    with torch.no_grad():
        y = net(x).argmax(1)
    return x, y


def _solve(net, x, y, space, steps=100, **kw):
    # a metered view charged to nobody: it counts the rows it passes
    clf = MeteredModel(wrap_model(net, n_classes=net(x[:1]).shape[1], input_shape=(x.shape[1],)))
    return clf, minnorm_l1(clf, x, y, space, L1, None, Statement(),
                           torch.Generator().manual_seed(0), steps=steps, **kw)


def _greedy_binary(w: np.ndarray, margin: float, x: np.ndarray) -> float:
    """Closed-form L1 radius of a binary linear model in the box [0, 1] (scale 1): move the
    coordinates with the largest |w_i| first, each as far as its bound allows."""
    room = np.where(w > 0, x, 1 - x)  # descent on the margin lowers x_i where w_i > 0
    order = np.argsort(-np.abs(w))
    need, total = margin, 0.0
    for i in order:
        gain = abs(w[i]) * room[i]
        if gain >= need:
            return total + need / abs(w[i])
        need, total = need - gain, total + room[i]
    return float("inf")


def test_binary_linear_model_matches_the_greedy_fill():
    d = 20
    net = _linear(d, 2, seed=0)
    x, y = _inputs(net, d, 12, seed=1)
    space = FeatureSpace.box(d)
    _, out = _solve(net, x, y, space)
    W = net.weight.detach().numpy()
    b = net.bias.detach().numpy()
    for i in range(len(x)):
        yi = int(y[i])
        w = W[yi] - W[1 - yi]
        margin = float(w @ x[i].numpy() + b[yi] - b[1 - yi])
        want = _greedy_binary(w, margin, x[i].numpy())
        assert np.isfinite(want)
        assert want <= out.radius[i] <= 1.01 * want, (i, out.radius[i], want)


def test_multiclass_linear_model_matches_the_exact_solver():
    d, k = 30, 5
    net = _linear(d, k, seed=2)
    x, y = _inputs(net, d, 15, seed=3)
    space = FeatureSpace.box(d)
    _, out = _solve(net, x, y, space)
    exact = exact_linear_radius(net.weight.detach().numpy(), net.bias.detach().numpy(),
                                x.numpy(), y.numpy(), space, L1)
    ok = np.isfinite(exact.radius)
    assert ok.sum() >= 10
    assert (out.radius[ok] >= exact.radius[ok] * (1 - 1e-9)).all()
    assert (out.radius[ok] <= 1.01 * exact.radius[ok]).all()


def test_counterexamples_respect_box_scale_and_immutable_features():
    d = 16
    net = nn.Sequential(nn.Linear(d, 32), nn.ReLU(), nn.Linear(32, 4)).double()
    torch.manual_seed(4)
    for p in net.parameters():
        torch.nn.init.normal_(p)
    net.eval()
    mutable = np.ones(d, bool)
    mutable[[0, 3, 7]] = False
    lower, upper = np.zeros(d), np.full(d, 2.0)
    space = FeatureSpace.from_arrays(lower, upper, scale=np.full(d, 2.0), mutable=mutable)
    x = torch.as_tensor(np.random.default_rng(5).uniform(0, 2, size=(10, d)))
    with torch.no_grad():
        y = net(x).argmax(1)
    clf, out = _solve(net, x, y, space, steps=60)
    xa = out.x_adv
    assert out.found.all()
    assert (xa >= 0).all() and (xa <= 2).all()
    torch.testing.assert_close(xa[:, ~mutable], x[:, ~mutable], atol=0, rtol=0)
    with torch.no_grad():
        assert (net(xa).argmax(1) != y).all()  # each counterexample re-checked
    norms = ((xa - x) / 2.0).abs().sum(1).numpy()  # scaled units
    np.testing.assert_allclose(out.radius, norms, rtol=1e-12)


def test_costs_steps_gradient_calls_and_is_deterministic():
    d = 10
    net = _linear(d, 3, seed=6)
    x, y = _inputs(net, d, 7, seed=7)
    space = FeatureSpace.box(d)
    clf, first = _solve(net, x, y, space, steps=23)
    assert clf.forward_rows == 23 * len(x) and clf.backward_rows == 23 * len(x)
    _, second = _solve(net, x, y, space, steps=23)
    assert torch.equal(first.x_adv, second.x_adv)
    np.testing.assert_array_equal(first.radius, second.radius)


def test_rejects_other_threats_and_no_steps():
    net = _linear(4, 2, seed=8)
    x, y = _inputs(net, 4, 2, seed=9)
    clf = wrap_model(net, n_classes=2, input_shape=(4,))
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="threat must be L1"):
        minnorm_l1(clf, x, y, FeatureSpace.box(4), L2, None, Statement(), g)
    with pytest.raises(ValueError, match="steps"):
        minnorm_l1(clf, x, y, FeatureSpace.box(4), L1, None, Statement(), g, steps=0)


def test_linear_step_handles_an_unbounded_coordinate():
    """An unbounded coordinate (a tabular feature without an upper bound) can cover any
    margin: the step is finite, and the coordinates after it in the fill are untouched (an
    exclusive sum by subtraction gave inf - inf = NaN there)."""
    t = torch.as_tensor
    grad = t([[3.0, 1.0, 0.5]])  # filled in this order
    u = torch.zeros(1, 3, dtype=torch.float64)
    lo = t([[-math.inf, -1.0, -1.0]])  # the first coordinate falls without a bound
    hi = t([[1.0, 1.0, 1.0]])
    step, length = linear_l1_step(t([6.0]), grad, u, lo, hi)
    assert torch.isfinite(step).all()
    assert float(length[0]) == pytest.approx(2.0)
    assert step[0].tolist() == pytest.approx([-2.0, 0.0, 0.0])


def test_linear_step_is_the_l1_smallest_move_to_the_boundary():
    rng = np.random.default_rng(10)
    n, d = 20, 8
    grad = rng.normal(size=(n, d)) * (rng.uniform(size=(n, d)) < 0.8)
    u = rng.uniform(-0.5, 0.5, size=(n, d))
    lo, hi = u - rng.uniform(0, 1, size=(n, d)), u + rng.uniform(0, 1, size=(n, d))
    margin = rng.uniform(0, 2, size=n)
    t = torch.as_tensor
    step, length = linear_l1_step(t(margin), t(grad), t(u), t(lo), t(hi))
    for i in range(n):
        # s = p - q, min sum(p + q) s.t. grad.(p - q) <= -margin, box on u + s
        c = np.ones(2 * d)
        a_ub = np.concatenate([grad[i], -grad[i]])[None]
        bounds = [(0, max(hi[i, j] - u[i, j], 0)) for j in range(d)] + \
                 [(0, max(u[i, j] - lo[i, j], 0)) for j in range(d)]
        res = linprog(c, A_ub=a_ub, b_ub=[-margin[i]], bounds=bounds, method="highs")
        if res.status == 2:  # infeasible: the box cannot cover the margin
            assert not np.isfinite(length[i].item())
            continue
        assert res.status == 0
        assert abs(length[i].item() - res.fun) <= 1e-9 * max(1.0, res.fun)
        s = step[i].numpy()
        assert grad[i] @ s <= -margin[i] + 1e-9
        assert (u[i] + s >= lo[i] - 1e-12).all() and (u[i] + s <= hi[i] + 1e-12).all()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_runs_on_cuda():
    d = 12
    net = _linear(d, 3, seed=11).cuda()
    x, y = _inputs(net.cpu(), d, 6, seed=12)
    net = net.cuda()
    clf = wrap_model(net, n_classes=3, input_shape=(d,), device="cuda")
    out = minnorm_l1(clf, x.cuda(), y.cuda(), FeatureSpace.box(d), L1, None, Statement(),
                     torch.Generator(device="cuda").manual_seed(0), steps=30)
    assert out.x_adv.is_cuda and out.found.all()


def test_warm_start_targets_and_misclassified_inputs():
    d, k = 12, 4
    net = _linear(d, k, seed=13)
    x, y = _inputs(net, d, 8, seed=14)
    space = FeatureSpace.box(d)
    clf = wrap_model(net, n_classes=k, input_shape=(d,))
    g = torch.Generator().manual_seed(0)
    exact = exact_linear_radius(net.weight.detach().numpy(), net.bias.detach().numpy(),
                                x.numpy(), y.numpy(), space, L1)
    # a warm start: the exact counterexample pushed further out (still a counterexample)
    start = (x + 1.5 * (exact.x_adv - x)).clamp(0, 1)
    with torch.no_grad():
        still = net(start).argmax(1) != y
    warm = minnorm_l1(clf, x, y, space, L1, None, Statement(), g, steps=1, init=start)
    start_norm = (start - x).abs().sum(1).numpy()
    assert still.sum() >= 6 and warm.found[still.numpy()].all()  # one call: the start itself
    assert (warm.radius[still.numpy()] <= start_norm[still.numpy()] * (1 + 1e-12)).all()
    # a statement with a target class and a per-input class to push to
    target = (y + 1) % k
    out = minnorm_l1(clf, x, y, space, L1, None, Statement(target=2), g, steps=60)
    with torch.no_grad():
        assert (net(out.x_adv).argmax(1)[out.found] == 2).all()
    towards = minnorm_l1(clf, x, y, space, L1, None, Statement(), g, steps=60, towards=target)
    with torch.no_grad():
        reached = net(towards.x_adv).argmax(1)
    assert towards.found.sum() >= 6 and (reached[towards.found] != y[towards.found]).all()
    # an input the model already gets "wrong" has radius 0
    wrong = (y + 1) % k
    zero = minnorm_l1(clf, x, wrong, space, L1, None, Statement(), g, steps=3)
    np.testing.assert_array_equal(zero.radius, np.zeros(len(x)))


def test_counterexamples_satisfy_linear_relations():
    d = 6
    net = _linear(d, 3, seed=15)
    A, b = np.array([[1.0, 1.0, 0, 0, 0, 0], [0, 0, 1.0, -1.0, 0, 0]]), np.array([1.2, 0.0])
    space = FeatureSpace.box(d).constrain(inequalities=(A, b))
    rng = np.random.default_rng(16)
    X = rng.uniform(0, 1, size=(200, d))
    X = X[(X @ A.T <= b).all(1)][:10]
    x = torch.as_tensor(X)
    with torch.no_grad():
        y = net(x).argmax(1)
    _, out = _solve(net, x, y, space, steps=60)
    assert out.found.sum() >= 8
    xa = out.x_adv[out.found].numpy()
    assert (xa @ A.T <= b + 1e-7).all() and (xa >= 0).all() and (xa <= 1).all()
    with torch.no_grad():
        assert (net(out.x_adv).argmax(1)[out.found] != y[out.found]).all()


class _Saturating(nn.Module):
    """Two logits whose margin ``1 - sum_i w_i tanh(3 u_i)`` falls fast at the input and
    saturates: a linearised jump that fills a coordinate to its bound removes about a third
    of the margin it predicts, and the smallest L1 counterexample spreads over every
    coordinate (the gains are concave)."""

    def __init__(self, w: torch.Tensor) -> None:
        super().__init__()
        self.w = w

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        margin = 1 - (self.w * torch.tanh(3 * x)).sum(dim=1)
        return torch.stack([margin, torch.zeros_like(margin)], dim=1)


def _saturating_radius(w: np.ndarray) -> float:
    """Smallest sum(u) with sum(w_i tanh(3 u_i)) >= 1, u in [0, 1]: equal marginal gains
    ``3 w_i sech^2(3 u_i) = lam``, bisected on lam."""
    lo, hi = 1e-12, 3 * w.max()
    for _ in range(200):
        lam = (lo + hi) / 2
        u = np.clip(np.arccosh(np.sqrt(np.maximum(3 * w / lam, 1.0))) / 3, 0, 1)
        lo, hi = (lam, hi) if (w * np.tanh(3 * u)).sum() >= 1 else (lo, lam)
    u = np.clip(np.arccosh(np.sqrt(np.maximum(3 * w / lo, 1.0))) / 3, 0, 1)
    return float(u.sum())


def test_a_curved_model_gets_dense_jumps_instead_of_greedy_ones(monkeypatch):
    """Where the greedy jump removes much less margin than it predicts, the run switches to
    dense jumps: at 16 steps it ends within 5% of the smallest counterexample (measured:
    0.1%), where greedy jumps alone (the switch disabled) fill coordinates to their bound
    and end 1.8x above it."""
    d = 100
    w = torch.as_tensor(np.linspace(0.03, 0.05, d))
    net = _Saturating(w).double()
    x = torch.zeros(3, d, dtype=torch.float64)
    y = torch.zeros(3, dtype=torch.int64)
    exact = _saturating_radius(w.numpy())
    space = FeatureSpace.box(d)
    radii = {}
    for name, share in (("switch", None), ("greedy only", -np.inf)):
        if share is not None:
            monkeypatch.setattr(
                "robustscope.solvers.attacks.gradient.minnorm_l1.LINEAR_SHARE", share)
        _, out = _solve(net, x, y, space, steps=16, refine=0.0)
        radii[name] = np.where(out.found, out.radius, np.inf).max()
    assert radii["switch"] >= exact * (1 - 1e-9)
    assert radii["switch"] <= 1.05 * exact
    assert radii["greedy only"] >= 1.5 * exact
