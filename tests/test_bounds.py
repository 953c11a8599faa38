"""Bound propagation (IBP, CROWN, alpha-CROWN): graph reading, soundness against sampled
margins, the exact MILP radius and verified counterexamples, and the search's certify option."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from network_helpers import exact_cases, random_mlp
from scipy.optimize import linprog
from torch import nn

from robustscope import FeatureSpace, InputError
from robustscope.search.engine import radius
from robustscope.solvers.bounds import certify, dual_norm, forward, propagate
from robustscope.solvers.bounds.certify import (
    BISECT_RTOL,
    GAP_RTOL,
    bound_radius,
    certified_radius,
    margin_tolerance,
    proven,
)
from robustscope.solvers.bounds.domain import make_domain
from robustscope.solvers.bounds.forward import ForwardBounds
from robustscope.solvers.bounds.graph import read_network
from robustscope.solvers.bounds.propagate import (
    backward_bound,
    backward_work,
    crown_plan,
    margin_lower_bounds,
    preactivation_bounds,
)
from robustscope.solvers.bounds.relaxation import relaxation_gap
from robustscope.threats import L1, L2, LINF

THREATS = {"linf": LINF, "l2": L2, "l1": L1}
NORM_ORD = {"linf": np.inf, "l2": 2, "l1": 1}


class Standardise(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor([0.4]).reshape(1, 1, 1, 1))
        self.register_buffer("std", torch.tensor([0.3]).reshape(1, 1, 1, 1))

    def forward(self, x):
        return (x - self.mean) / self.std


class Residual(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x):
        return x + torch.relu(self.bn(self.conv(x)))


class Head(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 12), nn.Linear(12, 3)

    def forward(self, x):
        x = x.view(x.size(0), -1)
        return self.fc2(nn.functional.relu(self.fc1(x)))


def small_cnn(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    net = nn.Sequential(Standardise(), nn.Conv2d(1, 2, 3, padding=1), nn.ReLU(), Residual(2),
                        nn.MaxPool2d(2), nn.AvgPool2d(2), Head())
    with torch.no_grad():
        net[3].bn.running_mean.uniform_(-0.2, 0.2)
        net[3].bn.running_var.uniform_(0.5, 2.0)
    return net.eval()


def test_graph_reads_conv_residual_pool_and_standardising_layers():
    net = small_cnn(0)
    graph = read_network(net, (1, 8, 8))
    x = torch.rand(6, 1, 8, 8, dtype=torch.float64)
    with torch.no_grad():
        expected = net.double()(x)
    torch.testing.assert_close(graph.logits(x), expected, rtol=1e-12, atol=1e-12)
    assert graph.n_relus == 2 * 64 + 2 * 64 + 3 * 2 * 16 + 12  # max-pool as three ReLUs


def test_explicit_transposes_equal_autograd():
    """Convolutions, batch norm, max-pool windows and negations carry coefficients back
    without a forward pass; each must equal the vector-Jacobian product of its map."""
    net = nn.Sequential(nn.Conv2d(1, 3, 3, stride=2, padding=1), nn.BatchNorm2d(3),
                        nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(12, 2)).eval()
    with torch.no_grad():
        net[1].running_var.uniform_(0.5, 2.0)
        net[1].weight.uniform_(-2, 2)
    graph = read_network(net, (1, 9, 9))
    checked = 0
    for nd in graph.nodes:
        if nd.transpose is None or nd.kind != "affine":
            continue
        in_shape = graph.nodes[nd.parents[0]].shape
        a = torch.randn(5, *nd.shape, dtype=torch.float64)
        z = torch.zeros(5, *in_shape, dtype=torch.float64, requires_grad=True)
        (expected,) = torch.autograd.grad(nd.fn(z), z, grad_outputs=a)
        torch.testing.assert_close(nd.transpose(a), expected, rtol=1e-12, atol=1e-12)
        checked += 1
    assert checked >= 1 + 1 + 4 + 3 + 1  # conv, batch norm, 4 windows, 3 negations, linear


def test_linear_abs_maps_apply_the_absolute_matrix_to_signed_rows():
    """Where a node's ``abs_fn`` is marked linear, forward mode applies it to rows of any
    sign: it must equal ``v |W|^T`` with ``W`` the map's Jacobian, for every such node of a
    network with convolutions, batch norm (negative scales), pooling, flattening and a
    residual difference; the others keep ``|W| r`` for ``r >= 0``."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 3, 3, padding=1)
            self.bn = nn.BatchNorm2d(3)
            self.pool = nn.MaxPool2d(2)
            self.avg = nn.AvgPool2d(2)
            self.fc = nn.Linear(12, 2)

        def forward(self, x):
            h = torch.relu(self.bn(self.conv(x)))
            h = self.pool(h) - self.avg(h)
            return self.fc(torch.flatten(h * 0.5, 1))

    net = Net().eval()
    with torch.no_grad():
        net.bn.running_var.uniform_(0.5, 2.0)
        net.bn.weight.uniform_(-2, 2)
    graph = read_network(net, (1, 4, 4))
    linear = 0
    for nd in graph.nodes:
        if nd.kind != "affine":
            continue
        in_shape = graph.nodes[nd.parents[0]].shape
        size_in = math.prod(in_shape)
        jac = torch.autograd.functional.jacobian(
            lambda z, nd=nd, s=in_shape: (nd.fn(z.reshape(1, *s)) - nd.bias).reshape(-1),
            torch.zeros(size_in, dtype=torch.float64))
        v = torch.randn(7, size_in, dtype=torch.float64)
        r = v.abs()
        expected = (v @ jac.abs().T).reshape(7, *nd.shape)
        got_r = nd.abs_fn(r.reshape(7, *in_shape)).reshape(7, *nd.shape)
        torch.testing.assert_close(got_r, (r @ jac.abs().T).reshape(7, *nd.shape),
                                   rtol=1e-12, atol=1e-12)
        if nd.abs_linear:
            torch.testing.assert_close(nd.abs_fn(v.reshape(7, *in_shape)), expected,
                                       rtol=1e-12, atol=1e-12)
            linear += 1
    # conv, batch norm, 4 windows, 3 + 1 negations, average pool, flatten, linear
    assert linear >= 12


@pytest.mark.parametrize("layer, name", [(nn.Sigmoid(), "Sigmoid"), (nn.Tanh(), "Tanh")])
def test_unsupported_operation_is_named(layer, name):
    net = nn.Sequential(nn.Linear(4, 5), layer, nn.Linear(5, 2))
    with pytest.raises(InputError, match=f"'1'.*{name}"):
        read_network(net, (4,))


def test_product_of_activations_is_refused():
    class Square(nn.Module):
        def forward(self, x):
            return x * x

    with pytest.raises(InputError, match="product"):
        read_network(Square(), (3,))


def _sampled_margins(net, x, y, lo, hi, eps, p, rng, samples=200):
    """Smallest margin seen at random points of the domain (vertices for Linf)."""
    n, d = x.shape
    worst = torch.full((n, 3), math.inf, dtype=torch.float64)
    for _ in range(samples):
        g = torch.as_tensor(rng.standard_normal((n, d)))
        if p == math.inf:
            u = torch.sign(g) * eps[:, None]
        else:
            u = g / torch.linalg.vector_norm(g, ord=p, dim=1, keepdim=True) * eps[:, None]
            u = u * torch.as_tensor(rng.uniform(0.5, 1.0, (n, 1)))
        u = torch.minimum(torch.maximum(u, lo), hi)
        with torch.no_grad():
            logits = net((x + u).reshape(n, 1, 8, 8))
        m = logits.gather(1, y[:, None]) - logits
        worst = torch.minimum(worst, m.scatter(1, y[:, None], math.inf))
    return worst


@pytest.mark.parametrize("p", [math.inf, 2.0, 1.0])
def test_bounds_lie_below_every_sampled_margin(p):
    rng = np.random.default_rng(1)
    net = small_cnn(1).double()
    graph = read_network(net, (1, 8, 8))
    x = torch.rand(3, 64, dtype=torch.float64)
    lo, hi = -x, 1 - x
    eps = torch.full((3,), {math.inf: 0.02, 2.0: 0.15, 1.0: 0.6}[p], dtype=torch.float64)
    dom = make_domain(x, lo, hi, torch.ones(64), eps, p)
    with torch.no_grad():
        y = net(x.reshape(3, 1, 8, 8)).argmax(1)
    worst = _sampled_margins(net, x, y, lo, hi, eps, p, rng)
    bounds = {m: margin_lower_bounds(graph, dom, y, m, steps=4)
              for m in ("ibp", "crown", "alpha-crown")}
    for lb in bounds.values():
        assert (lb <= worst + 1e-9).all()
    assert (bounds["alpha-crown"] >= bounds["crown"] - 1e-12).all()
    assert (bounds["crown"] >= bounds["ibp"] - 1e-9).double().mean() > 0.9


def test_batch_bounds_are_sound_and_no_looser_than_one_input_at_a_time(monkeypatch):
    """Each input bounds its own unstable neurons (max-pooling's differences included); the
    batch pads them with stable ones, which may only tighten. With the work cap at 0 every
    intermediate bound is an interval and the result is still sound."""
    rng = np.random.default_rng(4)
    net = small_cnn(2).double()
    graph = read_network(net, (1, 8, 8))
    x = torch.rand(4, 64, dtype=torch.float64)
    lo, hi = -x, 1 - x
    eps = torch.tensor([0.005, 0.02, 0.04, 0.01], dtype=torch.float64)
    dom = make_domain(x, lo, hi, torch.ones(64), eps, math.inf)
    with torch.no_grad():
        y = net(x.reshape(4, 1, 8, 8)).argmax(1)
    worst = _sampled_margins(net, x, y, lo, hi, eps, math.inf, rng)
    batch = margin_lower_bounds(graph, dom, y, "crown")
    assert (batch <= worst + 1e-9).all()
    for i in range(4):
        alone = margin_lower_bounds(graph, dom.subset(torch.tensor([i])), y[i:i + 1], "crown")
        assert (batch[i] >= alone[0] - 1e-9).all()
    monkeypatch.setattr(propagate, "MAX_CROWN_WORK", 0)
    capped = margin_lower_bounds(graph, dom, y, "crown")
    assert (capped <= worst + 1e-9).all()
    assert (capped <= batch + 1e-9).double().mean() > 0.9


def test_a_node_over_the_work_cap_bounds_its_largest_gaps_by_crown(monkeypatch):
    """Where bounding every unstable neuron of a node by backward CROWN would carry more than
    ``MAX_CROWN_WORK``, the pass bounds as many as fit, per input those with the largest
    relaxation gap (or score, where the certified radius search passes a previous probe's),
    and the others keep their interval bounds: each neuron's bound is then either CROWN's or
    the interval's, and every node still encloses sampled values."""
    rng = np.random.default_rng(9)
    net = small_cnn(5).double()
    graph = read_network(net, (1, 8, 8))
    x = torch.rand(2, 64, dtype=torch.float64)
    eps = torch.full((2,), 0.08, dtype=torch.float64)
    dom = make_domain(x, -x, 1 - x, torch.ones(64), eps, math.inf)
    monkeypatch.setattr(forward, "MAX_FORWARD_WORK", 0)  # CROWN alone tightens the intervals
    full = preactivation_bounds(graph, dom)
    monkeypatch.setattr(propagate, "MAX_CROWN_WORK", 0)
    interval = preactivation_bounds(graph, dom)
    depth, carried = crown_plan(graph)
    # the first node CROWN bounds (under Linf a node with no ReLU before it keeps IBP's)
    k = min(j for j in full if depth[j] > 0)
    lo, hi = (t.reshape(2, -1) for t in interval[k])
    unstable = ((lo < 0) & (hi > 0)).sum(dim=1)
    assert unstable.min() >= 4
    fits = 3
    monkeypatch.setattr(propagate, "MAX_CROWN_WORK", backward_work(fits, carried[k]))
    partial = preactivation_bounds(graph, dom)
    top = relaxation_gap(lo, hi).argsort(dim=1, descending=True)[:, :fits]
    chosen = torch.zeros_like(lo, dtype=torch.bool).scatter(1, top, True)
    for got, crown, ibp in zip(partial[k], full[k], interval[k], strict=True):
        got, crown, ibp = (t.reshape(2, -1) for t in (got, crown, ibp))
        torch.testing.assert_close(got[chosen], crown[chosen], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(got[~chosen], ibp[~chosen], rtol=0, atol=0)
    assert (partial[k][0].reshape(2, -1)[chosen] > lo[chosen] + 1e-9).any()
    # scores (a previous probe's losses) rank the neurons instead, where given
    scores = torch.as_tensor(rng.uniform(size=lo.shape))
    ranked = preactivation_bounds(graph, dom, priority={k: scores})
    unstable_scores = torch.where((lo < 0) & (hi > 0), scores, -1.0)
    top = unstable_scores.argsort(dim=1, descending=True)[:, :fits]
    picked = torch.zeros_like(chosen).scatter(1, top, True)
    assert not torch.equal(picked, chosen)
    for got, crown, ibp in zip(ranked[k], full[k], interval[k], strict=True):
        got, crown, ibp = (t.reshape(2, -1) for t in (got, crown, ibp))
        torch.testing.assert_close(got[picked], crown[picked], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(got[~picked], ibp[~picked], rtol=0, atol=0)
    for _ in range(100):
        g = torch.as_tensor(rng.standard_normal((2, 64)))
        u = torch.minimum(torch.maximum(torch.sign(g) * eps[:, None], -x), 1 - x)
        values = graph.forward((x + u).reshape(2, 1, 8, 8))
        for j, (b_lo, b_hi) in partial.items():
            v = values[j].reshape(2, -1)
            assert (v >= b_lo.reshape(2, -1) - 1e-9).all()
            assert (v <= b_hi.reshape(2, -1) + 1e-9).all()


@pytest.mark.parametrize("p", [math.inf, 2.0, 1.0])
def test_forward_bounds_hold_every_sampled_node_value(p):
    """Forward-mode functions enclose every node of a conv / residual / max-pool network
    at points sampled in the domain."""
    rng = np.random.default_rng(6)
    net = small_cnn(3).double()
    graph = read_network(net, (1, 8, 8))
    x = torch.rand(2, 64, dtype=torch.float64)
    eps = torch.full((2,), {math.inf: 0.03, 2.0: 0.2, 1.0: 0.8}[p], dtype=torch.float64)
    dom = make_domain(x, -x, 1 - x, torch.ones(64), eps, p)
    relu_bounds = preactivation_bounds(graph, dom)
    fwd = ForwardBounds(graph, dom)
    feeds = sorted({graph.nodes[r].parents[0] for r in graph.relus} | {len(graph.nodes) - 1})
    bounds = {k: fwd.bounds(k, relu_bounds) for k in feeds}
    for _ in range(100):
        g = torch.as_tensor(rng.standard_normal((2, 64)))
        u = torch.sign(g) if p == math.inf else g / torch.linalg.vector_norm(
            g, ord=p, dim=1, keepdim=True)
        u = torch.minimum(torch.maximum(u * eps[:, None], -x), 1 - x)
        values = graph.forward((x + u).reshape(2, 1, 8, 8))
        for k, (lo, hi) in bounds.items():
            v = values[k].reshape(2, -1)
            assert (v >= lo - 1e-9).all() and (v <= hi + 1e-9).all(), k


@pytest.mark.parametrize("p", [2.0, 1.0])
def test_first_layer_takes_the_balls_dual_norm_where_forward_mode_does_not_fit(p, monkeypatch):
    """Without forward mode, a node affine in the input is bounded over the L1 / L2 ball by
    its rows' dual norms (and over the box by IBP): where the box does not bind that is
    forward mode's exact bound, it encloses sampled values, and it certifies more than IBP
    alone (the fallback before)."""
    rng = np.random.default_rng(8)
    net = small_cnn(4).double()
    graph = read_network(net, (1, 8, 8))
    first = graph.nodes[graph.relus[0]].parents[0]
    x = torch.full((2, 64), 0.5, dtype=torch.float64) + 0.01 * torch.rand(2, 64)
    eps = torch.full((2,), {2.0: 0.3, 1.0: 0.45}[p], dtype=torch.float64)  # inside the box
    dom = make_domain(x, -x, 1 - x, torch.ones(64), eps, p)
    exact = preactivation_bounds(graph, dom)[first]
    monkeypatch.setattr(forward, "MAX_FORWARD_WORK", 0)
    monkeypatch.setattr(propagate, "MAX_CROWN_WORK", 0)
    ball = preactivation_bounds(graph, dom)[first]
    for e, b in zip(exact, ball, strict=True):
        torch.testing.assert_close(b, e, rtol=1e-6, atol=1e-7)  # (L2: a dual, to 1e-8)
    for _ in range(50):
        g = torch.as_tensor(rng.standard_normal((2, 64)))
        u = g / torch.linalg.vector_norm(g, ord=p, dim=1, keepdim=True) * eps[:, None]
        v = graph.forward((x + u).reshape(2, 1, 8, 8))[first]
        assert (v >= ball[0] - 1e-9).all() and (v <= ball[1] + 1e-9).all()

    with torch.no_grad():
        y = net(x.reshape(2, 1, 8, 8)).argmax(1)
    tol = torch.zeros(2, dtype=torch.float64)
    upper = torch.full((2,), 5.0, dtype=torch.float64)
    with_norms = certified_radius(graph, dom, y, upper, tol, "crown")
    monkeypatch.setattr(propagate, "ball_bounds",
                        lambda net, dom, k, value: (value - math.inf, value + math.inf))
    interval_only = certified_radius(graph, dom, y, upper, tol, "crown")
    assert (with_norms > 1.5 * interval_only).all()
    assert dual_norm.row_norms(graph, first, dom.scale, p).shape == (graph.nodes[first].size,)
    monkeypatch.setattr(dual_norm, "MAX_ROW_WORK", 0)  # too big a node: IBP's bound stays
    lo, hi = dual_norm.ball_bounds(graph, dom, first, ball[0].reshape(2, -1))
    assert torch.isinf(lo).all() and torch.isinf(hi).all()


def test_forward_bounds_equal_crown_after_one_relu_layer():
    net = random_mlp(7, 5, (9,), 4).double()
    graph = read_network(net, (5,))
    x = torch.rand(3, 5, dtype=torch.float64)
    dom = make_domain(x, -x, 1 - x, torch.ones(5), torch.full((3,), 0.1, dtype=torch.float64),
                      math.inf)
    relu_bounds = preactivation_bounds(graph, dom)
    last = len(graph.nodes) - 1
    lo, hi = ForwardBounds(graph, dom).bounds(last, relu_bounds)
    spec = torch.cat([torch.eye(4), -torch.eye(4)]).to(torch.float64).expand(3, 8, 4)
    crown = backward_bound(graph, dom, relu_bounds, last, spec)
    torch.testing.assert_close(lo, crown[:, :4], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(hi, -crown[:, 4:], rtol=1e-10, atol=1e-10)


def test_certified_radius_closes_its_bracket(monkeypatch):
    """Regula falsi ends with the certified radius proven and an unproven probe within
    BISECT_RTOL (or GAP_RTOL of the smaller of itself and the bracket left) above it, in a
    few probes; on most inputs that is within the same tolerance of the largest strength
    CROWN proves (60 halvings here; CROWN's bound is not monotone in the strength
    everywhere, so not on all)."""
    net = random_mlp(5, 4, (12, 12), 3).double()
    graph = read_network(net, (4,))
    x = torch.as_tensor(np.random.default_rng(5).uniform(0.2, 0.8, (6, 4)))
    space = _digits_box(4)
    lo, hi = space.delta_bounds(x)
    with torch.no_grad():
        logits = graph.logits(x)
    y = logits.argmax(1)
    tol = margin_tolerance(logits, torch.float64)
    upper = torch.full((6,), 0.5, dtype=torch.float64)
    dom = make_domain(x, lo, hi, space.scale, upper, math.inf)
    probes: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    original = certify.worst_margin

    def recording(net_, dom_, *args, **kwargs):
        m = original(net_, dom_, *args, **kwargs)
        probes.append((dom_.x.clone(), dom_.eps.clone(), m.clone()))
        return m

    monkeypatch.setattr(certify, "worst_margin", recording)
    got = certified_radius(graph, dom, y, upper, tol, "crown")
    monkeypatch.undo()
    assert proven(graph, dom.with_eps(got), y, tol, "crown").all()
    rows = torch.cat([r for r, _, _ in probes])
    eps = torch.cat([e for _, e, _ in probes])
    unproven = torch.cat([m for _, _, m in probes]) <= 0
    for i in range(6):
        mine = (rows == x[i]).all(dim=1)
        width = torch.maximum(BISECT_RTOL * eps,
                              GAP_RTOL * torch.minimum(eps, upper[i] - eps))
        above = mine & unproven & (eps > got[i]) & (eps - got[i] <= width)
        assert above.any(), i
    assert len(probes) <= 8
    a, b = torch.zeros(6, dtype=torch.float64), upper.clone()
    for _ in range(60):
        mid = (a + b) / 2
        ok = proven(graph, dom.with_eps(mid), y, tol, "crown")
        a, b = torch.where(ok, mid, a), torch.where(ok, b, mid)
    width = torch.maximum(BISECT_RTOL * a, GAP_RTOL * torch.minimum(a, upper - a))
    assert ((got >= a - width) & (got <= a * (1 + 1e-9))).sum() >= 5


def test_a_loose_bound_is_still_found_to_two_percent_of_itself():
    """Far below the attack's radius (IBP, the radius 100x the bound), the bound comes
    within GAP_RTOL of the largest strength IBP proves: the gap rule does not stop at 2% of
    the open bracket, which would be many times the bound itself."""
    net = random_mlp(6, 4, (16, 16), 3).double()
    graph = read_network(net, (4,))
    x = torch.as_tensor(np.random.default_rng(6).uniform(0.3, 0.7, (5, 4)))
    dom = make_domain(x, torch.full((5, 4), -10.0), torch.full((5, 4), 10.0), torch.ones(4),
                      torch.ones(5), math.inf)
    with torch.no_grad():
        logits = graph.logits(x)
    y = logits.argmax(1)
    tol = margin_tolerance(logits, torch.float64)
    a, b = torch.zeros(5, dtype=torch.float64), torch.full((5,), 10.0, dtype=torch.float64)
    for _ in range(60):  # IBP's bound only loosens as the box grows: bisection is exact
        mid = (a + b) / 2
        ok = proven(graph, dom.with_eps(mid), y, tol, "ibp")
        a, b = torch.where(ok, mid, a), torch.where(ok, b, mid)
    got = certified_radius(graph, dom, y, 100 * a, tol, "ibp")
    assert (got <= a * (1 + 1e-9)).all()
    assert (got >= a * (1 - GAP_RTOL)).all()


@pytest.mark.parametrize("p", [1.0, 2.0])
def test_domain_minimum_against_linear_programming(p):
    rng = np.random.default_rng(2)
    d = 6
    x = torch.zeros(1, d, dtype=torch.float64)
    lo = torch.as_tensor(-rng.uniform(0, 0.5, (1, d)))
    hi = torch.as_tensor(rng.uniform(0, 0.5, (1, d)))
    eps = torch.tensor([0.6], dtype=torch.float64)
    dom = make_domain(x, lo, hi, torch.ones(d), eps, p)
    g = torch.as_tensor(rng.standard_normal((1, 4, d)))
    got = dom.minimum(g)[0].numpy()
    for s in range(4):
        gs = g[0, s].numpy()
        if p == 1.0:  # u = a - b, a, b >= 0: min g.u, sum(a + b) <= eps
            res = linprog(np.concatenate([gs, -gs]), A_ub=np.ones((1, 2 * d)), b_ub=[0.6],
                          bounds=[(0, h) for h in hi[0].numpy()] +
                                 [(0, -v) for v in lo[0].numpy()])
            assert got[s] == pytest.approx(res.fun, abs=1e-9)
        else:  # dual bound: below the value at random feasible points, above the dual norm
            u = rng.standard_normal((2000, d))
            u = u / np.linalg.norm(u, axis=1, keepdims=True) * rng.uniform(0, 0.6, (2000, 1))
            u = np.clip(u, lo[0].numpy(), hi[0].numpy())
            assert got[s] <= (u @ gs).min() + 1e-12
            assert got[s] >= -0.6 * np.linalg.norm(gs) - 1e-12


@pytest.mark.parametrize("eps", [0.05, 0.4, 1.2, 3.0])
def test_l2_dual_reaches_the_convex_programs_minimum(eps):
    """The L2 dual's multiplier iteration gives the minimum of the convex program over box
    and ball (solved by SLSQP here) from below, whether the ball, the box or both bind."""
    from scipy.optimize import minimize

    rng = np.random.default_rng(11)
    d, rows = 12, 6
    x = torch.as_tensor(np.where(rng.uniform(size=(1, d)) < 0.5, 0.0, rng.uniform(size=(1, d))))
    dom = make_domain(x, -x, 1 - x, torch.ones(d), torch.tensor([eps]), 2.0)
    g = torch.as_tensor(rng.standard_normal((1, rows, d)) * rng.uniform(0.01, 3, (1, rows, 1)))
    got = dom.minimum(g)[0].numpy() - (g[0].numpy() @ x[0].numpy())
    lo, hi = -x[0].numpy(), 1 - x[0].numpy()
    for s in range(rows):
        gs = g[0, s].numpy()
        res = minimize(lambda u, gs=gs: gs @ u, np.zeros(d), jac=lambda u, gs=gs: gs,
                       bounds=list(zip(lo, hi, strict=True)), method="SLSQP",
                       constraints=[{"type": "ineq", "fun": lambda u: eps ** 2 - u @ u,
                                     "jac": lambda u: -2 * u}],
                       options={"ftol": 1e-14, "maxiter": 500})
        assert got[s] <= res.fun + 1e-9
        assert got[s] >= res.fun - 1e-6 * (1 + abs(res.fun))


def _digits_box(n_features: int) -> FeatureSpace:
    return FeatureSpace.box(n_features)


@pytest.mark.parametrize("threat", ["linf", "l1"])
def test_certified_radius_is_below_the_exact_milp_radius(threat, monkeypatch):
    """Many small random networks: certified <= exact (MILP, closed) for every method, also
    where the work cap lets backward CROWN bound only a few neurons per node (ranked by the
    previous probe's scores)."""
    space = _digits_box(4)
    checked = 0
    for seed, net, x, y, exact in exact_cases(THREATS[threat], range(14)):
        graph = read_network(net, (4,))
        lo, hi = space.delta_bounds(x)
        upper = torch.as_tensor(exact * 1.5)
        dom = make_domain(x, lo, hi, space.scale, upper, THREATS[threat].p)
        tol = margin_tolerance(graph.logits(x), torch.float64)
        for method in ("ibp", "crown", "alpha-crown"):
            cert = certified_radius(graph, dom, y, upper, tol, method, steps=3).numpy()
            assert (cert <= exact * (1 + 1e-6) + 1e-9).all(), (seed, method)
            if method != "ibp":
                assert (cert > 0).all()
        with monkeypatch.context() as m:
            m.setattr(forward, "MAX_FORWARD_WORK", 0)
            m.setattr(propagate, "MAX_CROWN_WORK", 50)  # one or two neurons per node
            cert = certified_radius(graph, dom, y, upper, tol, "crown").numpy()
            assert (cert <= exact * (1 + 1e-6) + 1e-9).all(), (seed, "capped")
        checked += len(exact)
    assert checked >= 12


@pytest.mark.parametrize("threat", ["linf", "l2", "l1"])
def test_certified_bound_is_below_every_verified_counterexample(digits, digits_mlp, threat):
    X, y = digits[0][:15], digits[1][:15]
    space = FeatureSpace.box(64)
    res = radius(digits_mlp, X, y, threat=threat, space=space, certify="crown")
    correct = res.status != "misclassified"
    assert (res.lower_bound[correct] > 0).all()
    found = np.isfinite(res.radius)
    assert (res.lower_bound[found] <= res.radius[found]).all()
    # every counterexample is verified again here: the certified ball holds none
    u = (res.x_adv - X).reshape(len(X), -1) / space.scale
    size = np.linalg.norm(u, ord=NORM_ORD[threat], axis=1)
    with torch.no_grad():
        adv = digits_mlp(torch.tensor(res.x_adv, dtype=torch.float32)).argmax(1).numpy()
    flipped = (adv != y) & correct
    assert (size[flipped] >= res.lower_bound[flipped]).all()
    assert res.meta["certify"] == "crown"


def test_bracket_of_a_linear_network_closes():
    """Without ReLUs CROWN is exact: at the closed-form radius the bracket closes."""
    torch.manual_seed(0)
    net = nn.Linear(5, 3).double()
    x = torch.rand(4, 5, dtype=torch.float64) * 0.2 + 0.4
    space = FeatureSpace.from_arrays(np.full(5, -10.0), np.full(5, 10.0), np.ones(5))
    with torch.no_grad():
        logits = net(x)
    y = logits.argmax(1)
    w = net.weight.detach()
    # Linf radius without active bounds: min_j margin_j / ||w_y - w_j||_1
    diff = w[y][:, None, :] - w[None, :, :]
    margin = logits.gather(1, y[:, None]) - logits
    r = (margin / diff.abs().sum(-1).clamp_min(1e-12)).scatter(1, y[:, None], math.inf)
    exact = r.amin(1).numpy()
    out = bound_radius(net, x, y.numpy(), space, LINF, exact * (1 + 1e-7),
                       model_dtype=torch.float64)
    assert out.meta["closed"].all()
    assert (out.lower_bound <= exact).all()


@pytest.mark.parametrize("device", [
    "cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                          reason="no CUDA device"))])
@pytest.mark.parametrize("threat", ["linf", "l2", "l1"])
def test_bounds_run_on_the_models_device_and_match_the_cpu(device, threat, monkeypatch):
    """The certified radius of a conv / residual / max-pool network on ``device`` equals the
    CPU's (float64 both), forward mode off so that the dual-norm first layer runs too."""
    monkeypatch.setattr(forward, "MAX_FORWARD_WORK", 0)
    net = small_cnn(5).double()
    x = torch.rand(3, 1, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        y = net(x).argmax(1).numpy()
    space = FeatureSpace.box((1, 8, 8))
    upper = np.full(3, {"linf": 0.3, "l2": 2.0, "l1": 6.0}[threat])
    ref = bound_radius(net, x, y, space, THREATS[threat], upper, method="crown",
                       model_dtype=torch.float64)
    out = bound_radius(net.to(device), x.to(device), y, space, THREATS[threat], upper,
                       method="crown", model_dtype=torch.float64)
    assert (ref.lower_bound > 0).all()
    np.testing.assert_allclose(out.lower_bound, ref.lower_bound, rtol=1e-6)


def test_certify_option_is_checked(digits, digits_mlp):
    X, y = digits[0][:3], digits[1][:3]
    with pytest.raises(InputError, match="certify"):
        radius(digits_mlp, X, y, certify="milp")
    res = radius(digits_mlp, X, y, space=FeatureSpace.box(64), certify="none")
    assert (res.lower_bound == 0).all() and res.meta["certify"] is None


def test_cli_certify_fills_lower_bounds(tmp_path, digits, digits_mlp):
    import pandas as pd
    from typer.testing import CliRunner

    from robustscope.cli.app import app

    X, y = digits
    np.savez(tmp_path / "data.npz", X=X[:6].reshape(6, 1, 8, 8), y=y[:6])
    path = tmp_path / "net.pt"
    torch.jit.script(nn.Sequential(nn.Flatten(), *digits_mlp)).save(str(path))
    out = tmp_path / "radii.csv"
    result = CliRunner().invoke(app, ["radius", "--model", str(path), "--data",
                                      str(tmp_path / "data.npz"), "--out", str(out),
                                      "--certify", "crown", "--quiet"])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out)
    correct = table["status"] != "misclassified"
    assert (table["lower_bound"][correct] > 0).all()
    assert (table["lower_bound"] <= table["radius"]).all()


@pytest.mark.parametrize("share, certified", [(0.0, False), (1e9, True)])
def test_auto_certifies_when_its_cost_is_within_the_share(
        digits, digits_mlp, monkeypatch, share, certified):
    import robustscope.search.certification as certification

    monkeypatch.setattr(certification, "AUTO_CERTIFY_SHARE", share)
    X, y = digits[0][:4], digits[1][:4]
    res = radius(digits_mlp, X, y, threat="linf", space=FeatureSpace.box(64))
    correct = res.status != "misclassified"
    assert (res.lower_bound[correct] > 0).all() == certified
    assert (res.lower_bound <= res.radius).all()


def test_auto_measures_crowns_time_and_stops_where_it_costs_more_than_the_search(
        digits, digits_mlp, monkeypatch):
    """Under ``auto`` CROWN runs on chunks of 1, 2, 4, ... inputs, timed; where the next
    chunk would take it past the search's own time it stops (the inputs bounded keep their
    bounds), and a later batch where one input would not fit skips at once."""
    import time

    import robustscope.search.certification as certification

    calls = []
    real = certification.BOUND_PROPAGATION

    def slow(*args, **kwargs):
        calls.append(len(args[0]))  # the solver problem's inputs
        time.sleep(0.5)
        return real(*args, **kwargs)

    monkeypatch.setattr(certification, "BOUND_PROPAGATION", slow)
    X, y = digits[0][:8], digits[1][:8]
    res = radius(digits_mlp, X, y, threat="linf", space=FeatureSpace.box(64), batch_size=4)
    assert calls == [1]
    correct = np.flatnonzero(res.status != "misclassified")
    certified = np.flatnonzero(res.lower_bound > 0)
    assert certified.tolist() == [correct[0]]
    assert res.meta["certify_seconds_per_input"] >= 0.5
    assert (res.lower_bound <= res.radius).all()


def test_a_module_whose_reading_fails_is_refused_as_bad_input():
    class Branchy(nn.Module):
        def forward(self, x):
            if x.sum() > 0:  # data-dependent control flow: torch.fx cannot trace it
                return x
            return -x

    with pytest.raises(InputError, match="bound propagation"):
        read_network(Branchy(), (3,))


@pytest.mark.parametrize("p", [math.inf, 2.0])
def test_optimised_preactivation_bounds_are_sound_and_no_looser_than_crown(p):
    """alpha-CROWN's node-by-node bounds contain every sampled point's pre-activations and,
    on a three-hidden-layer network, are strictly tighter than CROWN's somewhere (fewer
    or narrower unstable neurons for branch and bound)."""
    net_t = random_mlp(5, 6, (16, 16, 16), 3).double()
    net = read_network(net_t, (6,), "cpu")
    gen = torch.Generator().manual_seed(1)
    x = torch.rand(2, 6, dtype=torch.float64, generator=gen)
    eps = torch.full((2,), 0.15 if p == math.inf else 0.3, dtype=torch.float64)
    dom = make_domain(x, -x, 1 - x, torch.ones(6), eps, p)
    crown = propagate.preactivation_bounds(net, dom)
    tight = propagate.optimised_preactivation_bounds(net, dom)
    # points of each input's domain: the box, inside the ball
    u = torch.rand(2, 4000, 6, dtype=torch.float64, generator=gen) * 2 - 1
    if p == 2.0:
        u = u / u.norm(dim=2, keepdim=True).clamp_min(1)
    pts = (x[:, None] + eps[:, None, None] * u).clamp(0, 1).reshape(-1, 6)
    values = net.forward(pts)
    gained = 0.0
    for k, (lo, hi) in tight.items():
        v = values[k].reshape(2, 4000, -1)
        assert (v >= lo.reshape(2, 1, -1) - 1e-9).all() and (v <= hi.reshape(2, 1, -1) + 1e-9).all()
        c_lo, c_hi = crown[k]
        gained += float((lo - c_lo).sum() + (c_hi - hi).sum())
    assert gained > 0
