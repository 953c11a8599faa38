"""Lower bounds of linear functions of a network's output over a :class:`Domain`.

- IBP (interval bound propagation): one forward pass of intervals; cheapest, loosest.
- CROWN (Zhang et al., NeurIPS 2018): each ReLU with pre-activation bounds ``[l, u]`` is
  enclosed between two lines, ``alpha z <= relu(z) <= u (z - l) / (u - l)``; the
  specification ``C . out`` is carried backwards through the graph to a linear function of
  the input, whose minimum over the domain is exact (Linf, L1) or dual (L2). Pre-activation
  bounds of every ReLU come from the same backward pass aimed at that layer (for neurons
  IBP leaves unstable), intersected with IBP's.
- alpha-CROWN (Xu et al., ICLR 2021): the lower slopes ``alpha`` in ``[0, 1]`` of the last
  pass are optimised by gradient ascent on the bound (one set per specification row); every
  ``alpha`` in ``[0, 1]`` gives a valid bound, and the best seen is kept.

All arithmetic is float64 on the network's device, batched over inputs.
"""

from __future__ import annotations

import math

import torch

from robustscope.solvers.bounds.domain import Domain
from robustscope.solvers.bounds.graph import AFFINE, INPUT, RELU, SUM, Network
from robustscope.solvers.registry import BOUND_METHODS

METHODS = BOUND_METHODS
#: Largest number of coefficients (inputs x rows x node size) carried in one backward pass;
#: bigger specifications are split into chunks.
MAX_COEFFICIENTS = 2 ** 24
#: A layer with more unstable neurons than this (over the batch) keeps its interval bounds:
#: CROWN would cost a backward pass to the input per neuron and side (minutes per input on a
#: CPU for a 32x32 convolution). Raise it on an accelerator.
MAX_CROWN_NEURONS = 512
#: Gradient steps and step size of alpha-CROWN.
ALPHA_STEPS = 20
ALPHA_LR = 0.1

Bounds = dict[int, tuple[torch.Tensor, torch.Tensor]]


def interval_bounds(net: Network, dom: Domain, known: Bounds | None = None) -> Bounds:
    """IBP: ``{node: (lower, upper)}``, each ``(n, *shape)``, for every node; where
    ``known`` holds tighter bounds of a node they are intersected in before going on."""
    lo, hi = dom.input_interval()
    out: Bounds = {0: (lo.reshape(len(lo), *net.input_shape),
                       hi.reshape(len(hi), *net.input_shape))}
    for k, nd in enumerate(net.nodes):
        if nd.kind == INPUT:
            continue
        if nd.kind == AFFINE:
            zl, u = out[nd.parents[0]]
            mid, rad = (zl + u) / 2, (u - zl) / 2
            c = nd.fn(mid)
            r = nd.abs_fn(rad)
            out[k] = (c - r, c + r)
        elif nd.kind == RELU:
            zl, u = out[nd.parents[0]]
            out[k] = (zl.clamp_min(0), u.clamp_min(0))
        else:
            out[k] = (sum(out[p][0] for p in nd.parents), sum(out[p][1] for p in nd.parents))
        if known is not None and k in known:
            out[k] = (torch.maximum(out[k][0], known[k][0]),
                      torch.minimum(out[k][1], known[k][1]))
    return out


def lower_bounds(net: Network, dom: Domain, spec: torch.Tensor, method: str = "crown",
                 steps: int = ALPHA_STEPS) -> torch.Tensor:
    """Lower bounds ``(n, s)`` of ``spec[i] . out(x')`` over each input's domain, ``spec``
    ``(n, s, k)``. ``method`` is one of :data:`METHODS`."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got '{method}'")
    ibp = interval_bounds(net, dom)
    last = len(net.nodes) - 1
    if method == "ibp":
        lo, hi = ibp[last]
        lo, hi = lo.reshape(len(lo), -1), hi.reshape(len(hi), -1)
        mid, rad = (lo + hi) / 2, (hi - lo) / 2
        return (spec * mid[:, None, :]).sum(-1) - (spec.abs() * rad[:, None, :]).sum(-1)
    bounds = preactivation_bounds(net, dom, ibp)
    if method == "crown":
        with torch.no_grad():
            return backward_bound(net, dom, bounds, last, spec)
    return _optimised_bound(net, dom, bounds, last, spec, steps)


def preactivation_bounds(net: Network, dom: Domain, ibp: Bounds | None = None) -> Bounds:
    """CROWN bounds ``{node: (lower, upper)}`` of every node that feeds a ReLU, tightened
    with IBP's (only neurons IBP leaves unstable are bounded backwards, and only in layers
    with at most ``MAX_CROWN_NEURONS`` of them; IBP is rerun from the bounds found so far
    before each layer). The differences inside a rewritten
    max-pooling get the rerun IBP's bounds only (CROWN on them costs a backward pass per
    window element for little gain)."""
    ibp = interval_bounds(net, dom) if ibp is None else ibp
    bounds: Bounds = {}
    n = len(dom.x)
    behind = _behind_relu(net)
    with torch.no_grad():
        for r in net.relus:
            k = net.nodes[r].parents[0]
            if k in bounds:
                continue
            if bounds:  # intervals again, from the tighter bounds found so far
                ibp = interval_bounds(net, dom, bounds)
            lo, hi = (t.reshape(n, -1).clone() for t in ibp[k])
            if (dom.p == math.inf and not behind[k]) or net.nodes[k].pooling:
                # an affine function of the input over a box: IBP is exact already;
                # max-pooling's differences: intervals from the tightened bounds suffice
                bounds[k] = ibp[k]
                continue
            unstable = ((lo < 0) & (hi > 0)).any(dim=0).nonzero().reshape(-1)
            if len(unstable) > MAX_CROWN_NEURONS:
                bounds[k] = ibp[k]
                continue
            size = net.nodes[k].size
            chunk = max(1, MAX_COEFFICIENTS // max(1, n * 2 * _widest(net, k)))
            for start in range(0, len(unstable), chunk):
                idx = unstable[start:start + chunk]
                m = len(idx)
                spec = torch.zeros(n, 2 * m, size, dtype=dom.x.dtype, device=dom.x.device)
                rows = torch.arange(m, device=dom.x.device)
                spec[:, rows, idx] = 1.0
                spec[:, rows + m, idx] = -1.0
                lb = backward_bound(net, dom, bounds, k, spec)
                lo[:, idx] = torch.maximum(lo[:, idx], lb[:, :m])
                hi[:, idx] = torch.minimum(hi[:, idx], -lb[:, m:])
            shape = (n, *net.nodes[k].shape)
            bounds[k] = (lo.reshape(shape), hi.reshape(shape))
    return bounds


def _behind_relu(net: Network) -> list[bool]:
    """Per node: some ReLU lies between it and the input."""
    out: list[bool] = []
    for nd in net.nodes:
        out.append(any(out[p] or net.nodes[p].kind == RELU for p in nd.parents))
    return out


def _widest(net: Network, k: int) -> int:
    return max(nd.size for nd in net.nodes[:k + 1])


def relu_relaxation(zl: torch.Tensor, u: torch.Tensor):
    """Per neuron: ``(upper slope, upper intercept, default lower slope, unstable mask)``."""
    active, unstable = zl >= 0, (zl < 0) & (u > 0)
    width = (u - zl).clamp_min(1e-300)
    up_slope = torch.where(active, torch.ones_like(zl),
                           torch.where(unstable, u / width, torch.zeros_like(zl)))
    up_int = torch.where(unstable, -zl * u / width, torch.zeros_like(zl))
    low_slope = torch.where(active, torch.ones_like(zl),
                            torch.where(unstable & (u >= -zl), torch.ones_like(zl),
                                        torch.zeros_like(zl)))
    return up_slope, up_int, low_slope, unstable


def backward_bound(net: Network, dom: Domain, bounds: Bounds, target: int,
                   spec: torch.Tensor, alphas: dict[int, torch.Tensor] | None = None
                   ) -> torch.Tensor:
    """CROWN: lower bounds ``(n, s)`` of ``spec . value(target)``, ``spec``
    ``(n, s, size of target)``, given pre-activation ``bounds`` of every ReLU before
    ``target``. ``alphas`` (optional) maps a ReLU node to lower slopes ``(n, s, *shape)``
    (clamped to [0, 1] here)."""
    n, s = spec.shape[:2]
    coef: dict[int, torch.Tensor] = {target: spec.reshape(n, s, *net.nodes[target].shape)}
    const = torch.zeros(n, s, dtype=spec.dtype, device=spec.device)
    a_in = None
    for k in range(target, -1, -1):
        a = coef.pop(k, None)
        if a is None:
            continue
        nd = net.nodes[k]
        if nd.kind == INPUT:
            a_in = a
        elif nd.kind == AFFINE:
            const = const + (a * nd.bias).flatten(2).sum(-1)
            _accumulate(coef, nd.parents[0], _transpose(net, nd, a))
        elif nd.kind == SUM:
            for p in nd.parents:
                _accumulate(coef, p, a)
        elif nd.kind == RELU:
            zl, u = bounds[nd.parents[0]]
            up_slope, up_int, low_slope, unstable = relu_relaxation(zl[:, None], u[:, None])
            if alphas is not None and k in alphas:
                low_slope = torch.where(unstable, alphas[k].clamp(0, 1), low_slope)
            pos, neg = a.clamp_min(0), a.clamp_max(0)
            const = const + (neg * up_int).flatten(2).sum(-1)
            _accumulate(coef, nd.parents[0], pos * low_slope + neg * up_slope)
    if a_in is None:  # the target does not depend on the input
        return const
    return const + dom.minimum(a_in.reshape(n, s, -1))


def _accumulate(coef: dict, k: int, a: torch.Tensor) -> None:
    coef[k] = coef[k] + a if k in coef else a


def _transpose(net: Network, nd, a: torch.Tensor) -> torch.Tensor:
    """Coefficients ``a`` ``(n, s, *shape)`` of an affine node's output carried to its
    parent: ``a . W`` for the node's linear part ``W``."""
    n, s = a.shape[:2]
    flat = a.reshape(n * s, *nd.shape)
    in_shape = net.nodes[nd.parents[0]].shape
    if nd.transpose is not None:
        out = nd.transpose(flat)
    else:
        with torch.enable_grad():
            z = torch.zeros(n * s, *in_shape, dtype=a.dtype, device=a.device,
                            requires_grad=True)
            out = torch.autograd.grad(nd.fn(z), z, grad_outputs=flat,
                                      create_graph=a.requires_grad)[0]
    return out.reshape(n, s, *in_shape)


def _optimised_bound(net: Network, dom: Domain, bounds: Bounds, target: int,
                     spec: torch.Tensor, steps: int) -> torch.Tensor:
    """alpha-CROWN on the last backward pass: Adam on the lower slopes, best bound kept."""
    n, s = spec.shape[:2]
    alphas = {}
    for r in net.relus:
        zl, u = bounds[net.nodes[r].parents[0]]
        _, _, low, _ = relu_relaxation(zl, u)
        alphas[r] = low[:, None].expand(n, s, *net.nodes[r].shape).clone().requires_grad_(True)
    with torch.no_grad():
        best = backward_bound(net, dom, bounds, target, spec)
    if not alphas or steps <= 0:
        return best
    opt = torch.optim.Adam(list(alphas.values()), lr=ALPHA_LR)
    for _ in range(steps):
        with torch.enable_grad():
            lb = backward_bound(net, dom, bounds, target, spec, alphas)
            opt.zero_grad()
            (-lb.sum()).backward()
        best = torch.maximum(best, lb.detach())
        opt.step()
        with torch.no_grad():
            for a in alphas.values():
                a.clamp_(0, 1)
    with torch.no_grad():
        best = torch.maximum(best, backward_bound(net, dom, bounds, target, spec, alphas))
    return best


def margin_spec(y: torch.Tensor, k: int, dtype=torch.float64) -> torch.Tensor:
    """``(n, k, k)``: row ``j`` is ``e_y - e_j`` (the margin of class ``y`` over ``j``);
    row ``y`` is zero."""
    n = len(y)
    eye = torch.eye(k, dtype=dtype, device=y.device)
    spec = eye[y][:, None, :] - eye[None, :, :]
    return spec.expand(n, k, k).clone()


def margin_lower_bounds(net: Network, dom: Domain, y: torch.Tensor, method: str = "crown",
                        steps: int = ALPHA_STEPS) -> torch.Tensor:
    """``(n, k)`` lower bounds of ``logit_y - logit_j`` (``inf`` at ``j = y``)."""
    k = net.n_classes
    lb = lower_bounds(net, dom, margin_spec(y, k), method, steps)
    return lb.scatter(1, y[:, None], math.inf)
