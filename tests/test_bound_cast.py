"""The float32 copy of a bound graph that branch and bound's Adam steps run on: every map's
parameters cast (modules, functions' defaults and closures), the same logits, the original
untouched, and ``None`` where a map keeps a constant the copy cannot reach."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from network_helpers import random_mlp
from torch import nn

from robustscope.solvers.bounds import branch
from robustscope.solvers.bounds.cast import cast_network
from robustscope.solvers.bounds.graph import AFFINE, Network, Node, read_network


class Functional(nn.Module):
    """Every kind of map the graph reader builds from functions: constants in defaults
    (linear, convolution, arithmetic), reshapes, max-pool windows, a residual sum."""

    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.register_buffer("k", torch.randn(3, 2, 3, 3, generator=gen))
        self.register_buffer("w", torch.randn(4, 3 * 3 * 3, generator=gen))
        self.register_buffer("shift", torch.randn(1, 2, 8, 8, generator=gen))
        self.bn = nn.BatchNorm2d(3).eval()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        x = (x - self.shift) / 0.7 * 1.3
        x = F.relu(self.bn(F.conv2d(x, self.k, padding=1)))
        x = F.max_pool2d(x, 2)
        x = x + F.avg_pool2d(x, 1)
        x = F.avg_pool2d(x, 2, stride=1)
        x = torch.flatten(x, 1)
        return self.fc(torch.relu(F.linear(x, self.w)))


def _networks() -> list[tuple[Network, tuple[int, ...]]]:
    torch.manual_seed(0)
    cnn = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.BatchNorm2d(3), nn.ReLU(),
                        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(48, 5)).eval()
    with torch.no_grad():
        cnn[1].running_var.uniform_(0.5, 2.0)
    return [(read_network(random_mlp(1, 6, (16, 12), 4), (6,)), (6,)),
            (read_network(cnn, (2, 8, 8)), (2, 8, 8)),
            (read_network(Functional().eval(), (2, 8, 8)), (2, 8, 8))]


def test_the_float32_copy_computes_the_same_logits_with_float32_parameters():
    for net, shape in _networks():
        before = [p.clone() for nd in net.nodes if nd.bias is not None for p in [nd.bias]]
        fast = cast_network(net, torch.float32)
        assert fast is not None and fast.dtype == torch.float32
        x = torch.rand(5, *shape, dtype=torch.float64) * 2 - 1
        with torch.no_grad():
            values = fast.forward(x)
            want = net.logits(x)
        assert all(v.dtype == torch.float32 for v in values)  # no map computed in float64
        got = values[-1].reshape(5, -1).double()
        assert float((got - want).abs().max()) <= 1e-5 * (1 + float(want.abs().max()))
        # the original still computes in float64, with its own parameters
        assert net.dtype == torch.float64 and net.logits(x).dtype == torch.float64
        after = [nd.bias for nd in net.nodes if nd.bias is not None]
        assert all(a.dtype == torch.float64 and torch.equal(a, b)
                   for a, b in zip(after, before, strict=True))


def test_a_map_whose_constant_the_copy_cannot_reach_gives_no_copy(monkeypatch):
    net, _ = _networks()[0]
    hidden = torch.ones(4, dtype=torch.float64)

    def add_hidden(t):  # a global the copy leaves in float64
        return t + _HIDDEN[0]

    _HIDDEN[:] = [hidden]
    last = len(net.nodes) - 1
    node = Node(AFFINE, (last,), (4,), "shift", fn=add_hidden, bias=hidden,
                abs_fn=lambda r: r, abs_linear=True)
    odd = Network([*net.nodes, node], net.device, net.dtype)
    assert cast_network(odd, torch.float32) is None
    monkeypatch.setattr(branch, "FAST_MIN_MACS", 0)
    assert branch.fast_copy(odd) is odd  # branch and bound then steps in float64
    assert branch.fast_copy(net).dtype == torch.float32


def test_small_networks_step_in_float64_and_large_ones_in_float32():
    small, _ = _networks()[0]
    assert small.prefix_macs()[-1] < branch.FAST_MIN_MACS
    assert branch.fast_copy(small) is small
    large = read_network(random_mlp(2, 784, (256, 256), 10), (784,))
    assert large.prefix_macs()[-1] >= branch.FAST_MIN_MACS
    assert branch.fast_copy(large).dtype == torch.float32


_HIDDEN: list[torch.Tensor] = []


def test_the_l2_dual_stays_finite_in_float32_on_zero_and_fully_clipped_rows():
    """In float32 a floor of 1e-300 is 0: a row of zero coefficients, or one whose moving
    coordinates are all clipped by the box, once divided by zero and gave NaN bounds and
    gradients, which the Adam steps would carry into the slopes."""
    from robustscope.solvers.bounds.domain import make_domain

    x = torch.tensor([[0.5, 0.5, 0.0, 1.0]], dtype=torch.float64)
    # coordinate 2 may only rise by 0.01, coordinate 3 may not move: a tight box in a ball
    # of radius 5 (the L2 dual's t would grow without bound)
    dom64 = make_domain(x, torch.tensor([[-0.01, -0.01, 0.0, 0.0]]),
                        torch.tensor([[0.01, 0.01, 0.01, 0.0]]), torch.ones(4),
                        torch.tensor([5.0]), 2.0)
    rows = torch.tensor([[[0.0, 0.0, 0.0, 0.0],      # no coefficient at all
                          [1.0, -2.0, 0.0, 0.0],     # every moving coordinate clipped
                          [0.0, 0.0, 3.0, 7.0]]], dtype=torch.float64)
    want = dom64.minimum(rows)
    for dtype in (torch.float32, torch.float64):
        a = rows.to(dtype).requires_grad_(True)
        got = dom64.to(dtype).minimum(a)
        (grad,) = torch.autograd.grad(got.sum(), a)
        assert bool(torch.isfinite(got).all()) and bool(torch.isfinite(grad).all())
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)
    # the box's minimum, which the ball of radius 5 does not cut
    torch.testing.assert_close(want[0], torch.tensor([0.0, -0.03, -0.0]).double()
                               + (rows[0] * x[0]).sum(-1), rtol=0, atol=1e-12)
