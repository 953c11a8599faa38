"""Branch and bound over unstable ReLUs: sound subdomain bounds (beta terms included), proofs
below the exact MILP radius on many small random networks, brackets closed through verified
leaf counterexamples, and the search's ``certify="bab"``."""

from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np
import pytest
import torch
from network_helpers import exact_cases, random_mlp
from torch import nn

from robustscope import FeatureSpace
from robustscope.search.engine import radius
from robustscope.search.plan import SearchConfig
from robustscope.solvers.bounds import branch
from robustscope.solvers.bounds.cast import cast_network
from robustscope.solvers.bounds.certify import (
    FIRST_PROBE_GAP,
    bound_radius,
    branch_radius,
    certified_radius,
    margin_tolerance,
)
from robustscope.solvers.bounds.domain import make_domain
from robustscope.solvers.bounds.graph import read_network
from robustscope.solvers.bounds.propagate import margin_spec, preactivation_bounds
from robustscope.threats import L1, L2, LINF

THREATS = {"linf": LINF, "l2": L2, "l1": L1}


def float64_verifier(net: nn.Module, x: torch.Tensor, y: torch.Tensor, p: float):
    """``verify(i, x')`` of the float64 network: the size of ``x' - x_i`` where the class
    changes, else ``inf``; records the calls."""
    calls = []

    def verify(i: int, cand: torch.Tensor) -> float:
        calls.append(i)
        with torch.no_grad():
            changed = int(net(cand[None]).argmax(1)) != int(y[i])
        return float(torch.linalg.vector_norm(cand - x[i], ord=p)) if changed else math.inf

    return verify, calls


@pytest.mark.parametrize("steps_in", ["float64", "float32", "a wrong copy"])
@pytest.mark.parametrize("warm", [False, True])
@pytest.mark.parametrize("p", [math.inf, 2.0, 1.0])
def test_subdomain_bounds_lie_below_every_sampled_margin_of_the_subdomain(p, warm, steps_in,
                                                                         monkeypatch):
    """Random splits of unstable neurons: the bound (alpha and beta optimised) is below the
    margin at every sampled point that satisfies the split constraints, from CROWN's slopes
    or (``warm``) from arbitrary slopes and multipliers, some outside [0, 1] and below 0
    (clamped where they are used), as a child inherits them; with the Adam steps on the
    network itself, on its float32 copy, or on a float32 copy whose logits are 100 too
    high for class ``y`` (its steps then find every margin proven at once): the bound is
    computed on the network from the values they reach, whatever they are. (The tolerance
    is out of reach, and every subdomain gets the deciding pass: the pass skipped far below
    the tolerance is tested below.)"""
    monkeypatch.setattr(branch, "NEAR", 1e12)
    rng = np.random.default_rng(5)
    net = random_mlp(7, 5, (12, 10), 4).double()
    graph = read_network(net, (5,))
    x = torch.as_tensor(rng.uniform(0.3, 0.7, (1, 5)))
    eps = torch.tensor([{math.inf: 0.15, 2.0: 0.3, 1.0: 0.5}[p]], dtype=torch.float64)
    dom = make_domain(x, -x, 1 - x, torch.ones(5), eps, p)
    with torch.no_grad():
        y = int(net(x).argmax(1))
        root = preactivation_bounds(graph, dom)
    feeds = [graph.nodes[r].parents[0] for r in graph.relus]
    # sample the ball (and its surface) inside the box
    g = torch.as_tensor(rng.standard_normal((20000, 5)))
    if p == math.inf:
        u = torch.as_tensor(rng.uniform(-1, 1, (20000, 5))) * eps
        u[:5000] = torch.sign(g[:5000]) * eps
    else:
        u = g / torch.linalg.vector_norm(g, ord=p, dim=1, keepdim=True) * eps
        u = u * torch.as_tensor(rng.uniform(0, 1, (20000, 1))) ** 0.3
    pts = torch.clamp(x + u, 0, 1)
    with torch.no_grad():
        logits = net(pts)
        pres = [net[:2 * j + 1](pts) for j in range(len(feeds))]
    m = 8
    clamps = {k: (torch.full((m, graph.nodes[k].size), -math.inf, dtype=torch.float64),
                  torch.full((m, graph.nodes[k].size), math.inf, dtype=torch.float64))
              for k in feeds}
    for row in range(m):  # 2 unstable neurons per layer fixed to a sampled point's sides
        at = int(rng.integers(len(pts)))
        for j, k in enumerate(feeds):
            zl, zu = (b.reshape(-1) for b in root[k])
            unstable = torch.nonzero((zl < 0) & (zu > 0)).flatten().numpy()
            for i in rng.choice(unstable, size=min(2, len(unstable)), replace=False):
                side = 0 if pres[j][at, i] >= 0 else 1
                clamps[k][side][row, i] = 0.0
    sub = dom.subset(torch.zeros(m, dtype=torch.long))
    with torch.no_grad():
        pre = preactivation_bounds(graph, sub, splits=clamps)
    signs = {k: (lo == 0).double() - (hi == 0).double() for k, (lo, hi) in clamps.items()}
    spec = margin_spec(torch.full((m,), y), 4)
    start = None
    if warm:
        gen = torch.Generator().manual_seed(3)
        start = branch.Warm(
            {r: 1.5 * torch.rand(m, 4, *graph.nodes[r].shape, generator=gen,
                                 dtype=torch.float64) - 0.25 for r in graph.relus},
            {k: 2 * torch.rand(m, 4, graph.nodes[k].size, generator=gen,
                               dtype=torch.float64) - 0.5 for k in feeds})
    fast = None if steps_in == "float64" else cast_network(graph, torch.float32)
    tolerance = 1e6
    if steps_in == "a wrong copy":
        lift = torch.zeros(4, dtype=torch.float32)
        lift[y] = 100.0
        out = fast.nodes[-1]
        fast.nodes[-1] = replace(out, fn=lambda t, f=out.fn: f(t) + lift, bias=out.bias + lift)
        tolerance = 0.0
    lb, _, ended = branch.subdomain_bound(graph, sub, pre, spec, signs, steps=15,
                                          tolerance=tolerance, warm=start, fast=fast)
    assert lb.dtype == torch.float64
    assert torch.isfinite(lb[:, torch.arange(4) != y]).all()  # every row was bounded
    assert all(a.dtype == (fast or graph).dtype for a in ended.alphas.values())
    margins = logits[:, [y]] - logits
    checked = 0
    for row in range(m):
        inside = torch.ones(len(pts), dtype=torch.bool)
        for j, k in enumerate(feeds):
            s = signs[k][row]
            inside &= (((s * pres[j]) >= 0) | (s == 0)).all(dim=1)
        if inside.sum() == 0:
            continue
        checked += 1
        worst = margins[inside].min(dim=0).values
        bound = lb[row].clone()
        bound[y] = -math.inf
        assert (bound <= worst + 1e-9).all(), row
    assert checked == m


def test_children_start_from_their_parents_slopes_and_multipliers():
    """Both children of a subdomain inherit its clamps, alpha and beta, active copy first;
    the neuron just split is clamped to its side in each and starts at multiplier 0 in
    both."""
    feeds = [1, 3]
    inf = math.inf
    parent = branch.Pending(
        {1: torch.tensor([[-inf, -inf], [0.0, -inf]]), 3: torch.tensor([[-inf], [-inf]])},
        {1: torch.tensor([[inf, inf], [inf, inf]]), 3: torch.tensor([[inf], [inf]])},
        branch.Warm({2: torch.tensor([[[0.2, 0.7]], [[0.9, 0.1]]]),
                     4: torch.tensor([[[0.5]], [[0.6]]])},
                    {1: torch.tensor([[[1.0, 2.0]], [[3.0, 4.0]]]),
                     3: torch.tensor([[[5.0]], [[6.0]]])}))
    node, index = torch.tensor([0, 1]), torch.tensor([1, 0])
    kids = parent.children(node, index, feeds)
    warm = kids.warm
    assert torch.equal(warm.alphas[2], torch.cat([parent.warm.alphas[2]] * 2))
    assert torch.equal(warm.alphas[4], torch.cat([parent.warm.alphas[4]] * 2))
    # parent 0 split neuron 1 of node 1, parent 1 neuron 0 of node 3
    assert warm.betas[1][:, 0].tolist() == [[1.0, 0.0], [3.0, 4.0], [1.0, 0.0], [3.0, 4.0]]
    assert warm.betas[3][:, 0].tolist() == [[5.0], [0.0], [5.0], [0.0]]
    assert kids.lo[1].tolist() == [[-inf, 0.0], [0.0, -inf], [-inf, -inf], [0.0, -inf]]
    assert kids.hi[1].tolist() == [[inf, inf], [inf, inf], [inf, 0.0], [inf, inf]]
    assert kids.lo[3].tolist() == [[-inf], [0.0], [-inf], [-inf]]
    assert kids.hi[3].tolist() == [[inf], [inf], [inf], [0.0]]
    assert parent.warm.betas[1][0, 0, 1] == 2.0  # the parent's own are kept
    both = kids.then(parent)
    assert len(both) == 6 and torch.equal(both.warm.betas[3][4:], parent.warm.betas[3])
    assert torch.equal(both.lo[1][4:], parent.lo[1])
    assert kids.then(parent.drop(2)) is kids  # an empty rest adds nothing


def test_subdomains_far_below_the_tolerance_skip_the_deciding_pass_but_keep_their_losses():
    """With the steps on a float32 copy, a subdomain whose last step's bound cannot reach
    the tolerance gets no float64 pass: its bound is ``-inf`` (valid, and open), and the
    losses branching reads come from the copy's last step; one within reach gets the pass
    and a finite bound below the float64 network's own."""
    rng = np.random.default_rng(2)
    net = random_mlp(3, 6, (16, 16), 3).double()
    graph = read_network(net, (6,))
    x = torch.as_tensor(rng.uniform(0.3, 0.7, (1, 6)))
    dom = make_domain(x, -x, 1 - x, torch.ones(6), torch.tensor([0.2], dtype=torch.float64),
                      math.inf)
    with torch.no_grad():
        y = int(net(x).argmax(1))
        pre = preactivation_bounds(graph, dom)
    feeds = [graph.nodes[r].parents[0] for r in graph.relus]
    signs = {k: torch.zeros(1, graph.nodes[k].size, dtype=torch.float64) for k in feeds}
    spec = margin_spec(torch.tensor([y]), 3)
    fast = cast_network(graph, torch.float32)
    exact, _, _ = branch.subdomain_bound(graph, dom, pre, spec, signs, 3, 1e6, fast=graph)
    far, losses, _ = branch.subdomain_bound(graph, dom, pre, spec, signs, 3, 1e6, fast=fast)
    others = torch.arange(3) != y
    assert torch.isneginf(far[0, others]).all()
    assert set(losses) == set(feeds)
    assert all(v.dtype == torch.float64 and torch.isfinite(v).all() and (v >= 0).all()
               for v in losses.values())
    assert any((v > 0).any() for v in losses.values())  # an unstable neuron costs the bound
    reach = float(exact[0, others].min()) + 1e-3
    near, _, _ = branch.subdomain_bound(graph, dom, pre, spec, signs, 3, reach, fast=fast)
    assert torch.isfinite(near[0, others]).all()


def test_may_prove_allows_for_the_unseen_last_update_and_the_copys_rounding():
    """The skip rule: the last bound plus twice the previous step's gain plus ``NEAR`` of
    the bound's size must reach the tolerance; without an earlier step every row passes."""
    lb = torch.tensor([[-0.5], [-0.01], [-0.2], [float("nan")]], dtype=torch.float64)
    prev = torch.tensor([[-0.6], [-0.01], [-0.3], [0.0]], dtype=torch.float64)
    got = branch._may_prove(lb, prev, 0.0).tolist()
    assert got == [False, False, True, True]  # -0.5+0.2 < 0; -0.01+0 < 0; -0.2+0.2 ~ 0; NaN
    assert branch._may_prove(lb, None, 0.0).all()


def test_the_open_subdomains_leave_depth_first_and_in_order():
    """The stack hands out the last pushed block first, a batch that spans blocks in line
    order, and copies only what it hands out (the rest stays in its blocks)."""
    def block(values):
        v = torch.tensor(values, dtype=torch.float64)[:, None]
        return branch.Pending({1: v}, {1: v + 10}, branch.Warm({2: v[:, None]}, {1: v[:, None]}))

    stack = branch.Stack([block([0.0])])
    stack.push(block([1.0, 2.0, 3.0]))
    stack.push(block([]))  # nothing to push
    stack.push(block([4.0, 5.0]))
    assert len(stack) == 6 and len(stack.blocks) == 3
    head = stack.pop(3)
    assert head.lo[1].flatten().tolist() == [4.0, 5.0, 1.0]
    assert head.hi[1].flatten().tolist() == [14.0, 15.0, 11.0]
    assert head.warm.betas[1].flatten().tolist() == [4.0, 5.0, 1.0]
    assert [b.lo[1].flatten().tolist() for b in stack.blocks] == [[0.0], [2.0, 3.0]]
    assert stack.pop(10).lo[1].flatten().tolist() == [2.0, 3.0, 0.0]
    assert len(stack) == 0


@pytest.mark.parametrize("steps_in", ["float32", "float64"])
def test_a_proof_holds_just_below_the_exact_radius_and_never_just_above_it(steps_in):
    """Every margin's search closes at 0.98 of the exact MILP radius; at 1.05 of it some
    margin fails, which ends the proof with ``proven`` not ``True``; with the Adam steps on
    a float32 copy or on the float64 network itself (the default for networks this small)."""
    space = FeatureSpace.box(4)
    checked = 0
    for _, net, x, y, exact in exact_cases(LINF, range(9)):
        graph = read_network(net, (4,))
        x, y = x[:1], y[:1]
        lo, hi = space.delta_bounds(x)
        tol = float(margin_tolerance(graph.logits(x), torch.float64)[0])
        below = make_domain(x, lo, hi, space.scale, torch.as_tensor(exact[:1] * 0.98),
                            math.inf)
        above = below.with_eps(torch.as_tensor(exact[:1] * 1.05))
        later = time.perf_counter() + 30
        fast = cast_network(graph, torch.float32) if steps_in == "float32" else graph
        assert branch.prove(graph, below, int(y[0]), tol, later, fast=fast).proven is True
        assert branch.prove(graph, above, int(y[0]), tol, later, fast=fast).proven is not True
        checked += 1
    assert checked >= 4


@pytest.mark.parametrize("threat", ["linf", "l1"])
@pytest.mark.parametrize("refresh", [True, False])
def test_branch_and_bound_closes_below_the_exact_milp_radius(threat, refresh, monkeypatch):
    """Many small random networks: every proof lies at most at the exact radius, and
    branch and bound reaches it (within 1e-4) from a loose upper bound, through the leaf
    counterexamples it verifies. ``refresh``: pre-activation bounds recomputed per
    subdomain (these networks' default) or clamped from the root's."""
    if not refresh:
        monkeypatch.setattr(branch, "REFRESH_WORK", 0)
    p = THREATS[threat].p
    space = FeatureSpace.box(4)
    checked = closed = 0
    for _, net, x, y, exact in exact_cases(THREATS[threat], range(12)):
        graph = read_network(net, (4,))
        lo, hi = space.delta_bounds(x)
        upper = torch.as_tensor(exact * 1.3)
        dom = make_domain(x, lo, hi, space.scale, upper, p)
        tol = margin_tolerance(graph.logits(x), torch.float64)
        crown = certified_radius(graph, dom, y, upper, tol, "crown")
        verify, calls = float64_verifier(net, x, y, p)
        cert, domains, verified = branch_radius(graph, dom, y, crown, upper, tol, 10.0,
                                                verify)
        cert = cert.numpy()
        assert (cert <= exact * (1 + 1e-6) + 1e-9).all()
        # the verified upper end: a counterexample's size, at most the given one
        assert (verified <= upper.numpy()).all()
        assert (verified >= exact * (1 - 1e-6)).all()
        reached = cert >= exact * (1 - 1e-4)
        assert (verified[reached] < upper.numpy()[reached]).all()
        assert (cert >= crown.numpy() - 1e-12).all()
        assert (domains >= 1).all()
        closed += int((cert >= exact * (1 - 1e-4)).sum())
        checked += len(exact)
    assert checked >= 12
    assert closed >= 0.9 * checked, (closed, checked)


def test_bab_closed_counts_brackets_against_the_verified_points():
    """``bound_radius(method="bab")`` from a loose upper bound: leaf points verified by the
    model lower the bracket's top, and ``meta["closed"]`` measures the certified radius
    against that top (against the loose bound given, no bracket would count as closed)."""
    space = FeatureSpace.box(4)
    closed = total = 0
    for _, net, x, y, exact in exact_cases(LINF, range(4)):
        verify, _ = float64_verifier(net, x, y, math.inf)
        upper = exact * 1.3
        out = bound_radius(net, x, y.numpy(), space, LINF, upper, method="bab",
                           model_dtype=torch.float64, time_limit=10.0, verify=verify)
        top = out.meta["verified_upper"]
        assert (top <= upper).all() and (top >= exact * (1 - 1e-6)).all()
        expected = out.lower_bound >= top * (1 - 2 * FIRST_PROBE_GAP)
        assert (out.meta["closed"] == expected).all()
        assert not (out.lower_bound >= upper * (1 - 2 * FIRST_PROBE_GAP)).any()
        closed += int(out.meta["closed"].sum())
        total += len(exact)
    assert closed >= 0.75 * total, (closed, total)


def test_l2_proofs_lie_below_every_counterexample_of_a_dense_search():
    """L2 has no exact solver here: on 2-d inputs a dense polar grid, refined by bisection
    along its rays, finds (nearly) the smallest counterexample; every branch and bound
    proof lies below it, and most reach it (where CROWN does not)."""
    rng = np.random.default_rng(11)
    space = FeatureSpace.box(2, -1.0, 2.0)
    angles = np.linspace(0, 2 * np.pi, 720, endpoint=False)
    radii = np.linspace(0, 1.5, 1500)[1:]
    dirs = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    checked, reached = 0, []
    for seed in range(10):
        net = random_mlp(seed, 2, ((16,), (8, 8))[seed % 2], 3).double()
        graph = read_network(net, (2,))
        x = torch.as_tensor(rng.uniform(0.2, 0.8, (2, 2)))
        with torch.no_grad():
            y = net(x).argmax(1)
        smallest = np.full(2, np.inf)
        for i in range(2):
            pts = x[i].numpy() + radii[:, None, None] * dirs[None]
            with torch.no_grad():
                cls = net(torch.as_tensor(pts.reshape(-1, 2))).argmax(1).numpy()
            flips = (cls != int(y[i])).reshape(len(radii), len(angles))
            if not flips.any():
                continue
            # the first ring that flips, then the exact crossing along its flipping rays
            ring = np.argmax(flips.any(axis=1))
            for a in np.flatnonzero(flips[ring]):
                lo_r, hi_r = radii[ring - 1] if ring else 0.0, radii[ring]
                for _ in range(40):
                    mid = (lo_r + hi_r) / 2
                    with torch.no_grad():
                        c = net(torch.as_tensor(x[i].numpy() + mid * dirs[a])[None]).argmax(1)
                    lo_r, hi_r = (lo_r, mid) if int(c) != int(y[i]) else (mid, hi_r)
                smallest[i] = min(smallest[i], hi_r)
        ok = np.isfinite(smallest)
        if not ok.any():
            continue
        upper = torch.as_tensor(smallest[ok])
        lo, hi = space.delta_bounds(x[ok])
        dom = make_domain(x[ok], lo, hi, space.scale, upper, 2.0)
        tol = margin_tolerance(graph.logits(x[ok]), torch.float64)
        crown = certified_radius(graph, dom, y[ok], upper, tol, "crown")
        cert, _, verified = branch_radius(graph, dom, y[ok], crown, upper, tol, 2.0)
        assert (verified == smallest[ok]).all()  # no verifier: nothing lowers the top
        assert (cert.numpy() <= smallest[ok] + 1e-9).all()
        assert (cert >= crown - 1e-12).all()
        reached.append(cert.numpy() >= smallest[ok] * (1 - 1e-4))
        checked += int(ok.sum())
    assert checked >= 8
    assert np.concatenate(reached).mean() >= 0.6


def test_a_proof_past_its_deadline_gives_up():
    net = random_mlp(0, 4, (8,), 3).double()
    graph = read_network(net, (4,))
    x = torch.full((1, 4), 0.5, dtype=torch.float64)
    dom = make_domain(x, -x, 1 - x, torch.ones(4), torch.tensor([0.4]), math.inf)
    with torch.no_grad():
        y = int(net(x).argmax(1))
    out = branch.prove(graph, dom, y, 1e-12, deadline=time.perf_counter() - 1)
    assert out.proven is None and out.domains == 0


def test_search_certify_bab_closes_brackets_of_the_digits_mlp(digits, digits_mlp):
    X, y = digits[0][:6], digits[1][:6]
    space = FeatureSpace.box(64)
    config = SearchConfig(exact_time_limit=5.0)
    crown = radius(digits_mlp, X, y, threat="linf", space=space, certify="crown")
    res = radius(digits_mlp, X, y, threat="linf", space=space, certify="bab", config=config)
    correct = res.status != "misclassified"
    assert res.meta["certify"] == "bab"
    assert (res.lower_bound[correct] <= res.radius[correct]).all()
    assert (res.lower_bound[correct] >= crown.lower_bound[correct] - 1e-12).all()
    assert (res.status[correct] == "exact").sum() >= correct.sum() - 1
    # every counterexample is the model's own: called again, it changes the decision
    with torch.no_grad():
        adv = digits_mlp(torch.tensor(res.x_adv[correct], dtype=torch.float32)).argmax(1)
    assert (adv.numpy() != y[correct]).all()


@pytest.mark.parametrize("how", [{"solver": "exact", "certify": "none"}, {"certify": "bab"}])
def test_boundary_counterexamples_change_the_decision_in_any_batch(digits, digits_mlp, how):
    """MILP incumbents and branch and bound points lie on the decision boundary; pushed off
    it, they must change the decision whether the model sees them alone or together (float32
    rounding differs between batch sizes: a push of 1e-7 failed alone on 6 of 29 inputs)."""
    X, y = digits[0][:12], digits[1][:12]
    res = radius(digits_mlp, X, y, threat="linf", space=FeatureSpace.box(64),
                 config=SearchConfig(exact_time_limit=5.0), **how)
    found = (res.status != "misclassified") & np.isfinite(res.radius)
    assert found.sum() >= 10
    adv = torch.tensor(res.x_adv[found], dtype=torch.float32)
    with torch.no_grad():
        together = digits_mlp(adv).argmax(1).numpy()
        alone = np.array([int(digits_mlp(a[None]).argmax(1)) for a in adv])
    assert (together != y[found]).all() and (alone != y[found]).all()


def test_a_deadline_in_the_past_ends_every_bound_loop_with_a_valid_bound():
    """alpha-CROWN takes no step, the certified bisection no probe, branch and bound no
    batch once the deadline has passed: each keeps what it holds (CROWN's bound, 0, gave
    up), which is as sound as a finished run's."""
    from robustscope.solvers.bounds.propagate import lower_bounds

    net_t = random_mlp(3, 5, (12, 12), 3).double()
    net = read_network(net_t, (5,), "cpu")
    x = torch.rand(2, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    y = net_t(x).argmax(1)
    dom = make_domain(x, -x, 1 - x, torch.ones(5), torch.full((2,), 0.3), math.inf)
    spec = margin_spec(y, 3)
    crown = lower_bounds(net, dom, spec, "crown")
    past = time.perf_counter() - 1
    assert torch.equal(lower_bounds(net, dom, spec, "alpha-crown", deadline=past), crown)
    assert lower_bounds(net, dom, spec, "alpha-crown").sum() >= crown.sum()
    tol = torch.zeros(2, dtype=torch.float64)
    upper = torch.full((2,), 0.5, dtype=torch.float64)
    assert torch.equal(certified_radius(net, dom, y, upper, tol, deadline=past),
                       torch.zeros(2, dtype=torch.float64))
    assert (certified_radius(net, dom, y, upper, tol) > 0).all()
    outcome = branch.prove(net, dom.subset(torch.tensor([0])), int(y[0]), 0.0, past)
    assert outcome.proven is None and outcome.domains == 0
