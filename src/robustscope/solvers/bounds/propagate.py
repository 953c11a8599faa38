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
import time

import torch

from robustscope.solvers.bounds.domain import Domain
from robustscope.solvers.bounds.dual_norm import ball_bounds
from robustscope.solvers.bounds.forward import ForwardBounds, forward_fits
from robustscope.solvers.bounds.graph import AFFINE, INPUT, RELU, SUM, Network
from robustscope.solvers.bounds.relaxation import relaxation_gap, relu_relaxation
from robustscope.solvers.registry import BOUND_METHODS

METHODS = BOUND_METHODS
#: Largest number of coefficients (inputs x rows x node size) carried in one backward pass;
#: bigger specifications are split into chunks.
MAX_COEFFICIENTS = 2 ** 24
#: Most coefficients one input's backward pass may carry (:func:`backward_work`) to bound
#: a node's unstable neurons by CROWN. Where all of them would cost more, the pass bounds
#: as many as fit (:func:`crown_rows`), those with the largest relaxation gap or, in the
#: certified radius search, those the previous probe scored highest (see
#: :func:`preactivation_bounds`); the others keep their interval and forward-mode bounds.
#: Measured on a 2-core CPU (median radius / bound and seconds per input, 2-3 inputs,
#: CROWN): with whole nodes only (a node over the cap kept interval bounds) and 2e7,
#: LeNet-5 Linf 4.04 at 3.6 s, the tiny colour CNN Linf 11.1 at 1.5 s (L2 97 at 4.2 s);
#: with the neurons of largest gap and 1e7, 3.82 at 3.3 s and 8.4 at 2.4 s (L2 72 at 6.4 s);
#: the CNN with every unstable neuron bounded (no cap) 2.4 at 53 s (more, and the probe
#: ranking's effect, in ``docs/certified.md``). Raise it on an accelerator, or for tighter
#: bounds at that cost.
MAX_CROWN_WORK = 10 ** 7
#: Gradient steps and step size of alpha-CROWN.
ALPHA_STEPS = 20
ALPHA_LR = 0.1

Bounds = dict[int, tuple[torch.Tensor, torch.Tensor]]
#: Per ReLU node: ``(upper slope, upper intercept, default lower slope, unstable mask)``.
Relaxed = dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]


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
                 steps: int = ALPHA_STEPS, priority: dict[int, torch.Tensor] | None = None,
                 losses: dict[int, torch.Tensor] | None = None,
                 deadline: float | None = None) -> torch.Tensor:
    """Lower bounds ``(n, s)`` of ``spec[i] . out(x')`` over each input's domain, ``spec``
    ``(n, s, k)``. ``method`` is one of :data:`METHODS`. ``priority`` (CROWN, alpha-CROWN)
    orders the neurons a node bounds where not all fit (see :func:`preactivation_bounds`);
    ``losses``, where given, is filled by the last backward pass as
    :func:`backward_bound` fills it. alpha-CROWN takes no further step after ``deadline``
    (``time.perf_counter()`` seconds; its best bound so far is as valid as the last)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got '{method}'")
    ibp = interval_bounds(net, dom)
    last = len(net.nodes) - 1
    if method == "ibp":
        lo, hi = ibp[last]
        lo, hi = lo.reshape(len(lo), -1), hi.reshape(len(hi), -1)
        mid, rad = (lo + hi) / 2, (hi - lo) / 2
        return (spec * mid[:, None, :]).sum(-1) - (spec.abs() * rad[:, None, :]).sum(-1)
    bounds = preactivation_bounds(net, dom, ibp, priority=priority)
    if method == "crown":
        with torch.no_grad():
            return backward_bound(net, dom, bounds, last, spec, losses=losses)
    return _optimised_bound(net, dom, bounds, last, spec, steps, losses, deadline)


def preactivation_bounds(net: Network, dom: Domain, ibp: Bounds | None = None,
                         splits: Bounds | None = None,
                         priority: dict[int, torch.Tensor] | None = None) -> Bounds:
    """Bounds ``{node: (lower, upper)}`` of every node that feeds a ReLU (max-pooling's
    differences included): IBP's, intersected with forward-mode linear bounds
    (:mod:`~robustscope.solvers.bounds.forward`, where they fit in memory) and then with
    backward CROWN's. ``splits`` (branch and bound) maps such nodes to per-input clamps
    ``(lower, upper)`` ``(n, *shape)`` intersected in as soon as the node is bounded: ``0``
    as a lower clamp restricts a neuron to its active side, as an upper one to its inactive
    side; a row whose clamps leave some neuron empty (``lower > upper``) bounds no input.

    Backward CROWN is skipped where forward mode already equals it (a node with at most one
    ReLU layer before it) and otherwise bounds, per input, only the neurons still unstable
    (each input its own, padded to the largest count of the batch); where their backward
    work (:func:`backward_work`) is above ``MAX_CROWN_WORK``, only as many as fit, those
    with the largest relaxation gap (:func:`crown_rows`,
    :func:`~robustscope.solvers.bounds.relaxation.relaxation_gap`), or where ``priority``
    maps the node to scores ``(n, *shape)``, those with the largest score first (ties by
    gap). IBP is rerun from the bounds found so far before each node."""
    n = len(dom.x)
    if n > 1 and not forward_fits(net, n) and forward_fits(net, 1):
        return _in_chunks(net, dom, ibp, splits, priority)
    ibp = interval_bounds(net, dom) if ibp is None else ibp
    bounds = _Clamped(splits)
    depth, carried = crown_plan(net)
    fwd = ForwardBounds(net, dom) if forward_fits(net, n) else None
    clean = None  # every node's value at the inputs, where needed
    with torch.no_grad():
        for r in net.relus:
            k = net.nodes[r].parents[0]
            if k in bounds:
                continue
            if bounds:  # intervals again, from the tighter bounds found so far
                ibp = interval_bounds(net, dom, bounds)
            if dom.p == math.inf and depth[k] == 0:
                bounds[k] = ibp[k]  # an affine function of the input over a box: IBP is exact
                continue
            lo, hi = (t.reshape(n, -1).clone() for t in ibp[k])
            if fwd is not None:
                f_lo, f_hi = fwd.bounds(k, bounds)
                lo, hi = torch.maximum(lo, f_lo), torch.minimum(hi, f_hi)
            elif depth[k] == 0:  # L1 / L2 without forward mode: the ball's dual norm
                if clean is None:
                    clean = net.forward(dom.x.reshape(n, *net.input_shape))
                b_lo, b_hi = ball_bounds(net, dom, k, clean[k].reshape(n, -1))
                lo, hi = torch.maximum(lo, b_lo), torch.minimum(hi, b_hi)
            shape = (n, *net.nodes[k].shape)
            unstable = (lo < 0) & (hi > 0)
            m = crown_rows(int(unstable.sum(dim=1).max()) if n else 0, carried[k])
            if m == 0 or (fwd is not None and depth[k] <= 1):
                bounds[k] = (lo.reshape(shape), hi.reshape(shape))
                continue
            # each input's unstable neurons, largest relaxation gap first (distinct indices;
            # the padding of inputs with fewer is stable neurons, whose bounds may only
            # tighten)
            gap = torch.where(unstable, relaxation_gap(lo, hi), -1.0)
            order = torch.argsort(gap, dim=1, descending=True, stable=True)
            if priority is not None and k in priority:  # by score, ties (and zeros) by gap
                score = torch.where(unstable, priority[k].reshape(n, -1), -1.0).gather(1, order)
                order = order.gather(1, torch.argsort(score, dim=1, descending=True,
                                                      stable=True))
            order = order[:, :m]
            size = net.nodes[k].size
            chunk = max(1, MAX_COEFFICIENTS // max(1, n * 2 * _widest(net, k)))
            for start in range(0, m, chunk):
                idx = order[:, start:start + chunk]
                c = idx.shape[1]
                spec = torch.zeros(n, 2 * c, size, dtype=dom.x.dtype, device=dom.x.device)
                spec.scatter_(2, idx[:, :, None], 1.0)
                spec[:, c:].scatter_(2, idx[:, :, None], -1.0)
                lb = backward_bound(net, dom, bounds, k, spec)
                lo.scatter_(1, idx, torch.maximum(lo.gather(1, idx), lb[:, :c]))
                hi.scatter_(1, idx, torch.minimum(hi.gather(1, idx), -lb[:, c:]))
            bounds[k] = (lo.reshape(shape), hi.reshape(shape))
    return dict(bounds)


def optimised_preactivation_bounds(net: Network, dom: Domain, steps: int = ALPHA_STEPS,
                                   deadline: float | None = None) -> Bounds:
    """:func:`preactivation_bounds` tightened by alpha-CROWN node by node: for every node
    that feeds a ReLU behind at least one ReLU layer, in order, the lower and upper bound
    of each of its still unstable neurons get their own lower slopes of the ReLUs before
    it, optimised by Adam (``steps`` steps, best bound kept; every step's bound is valid),
    its backward pass relaxing the earlier nodes' ReLUs by their tightened bounds. This is
    alpha-CROWN's intermediate bound optimisation (Xu et al., ICLR 2021): fewer unstable
    neurons for branch and bound to split, at ``steps`` backward passes per node. The
    neurons optimised are those CROWN's first pass left unstable; a node whose optimisation
    would carry more than ``MAX_CROWN_WORK`` coefficients (all inputs together) keeps
    CROWN's bounds from that pass. No step starts after ``deadline``
    (``time.perf_counter()`` seconds): the bounds held then are returned."""
    bounds = preactivation_bounds(net, dom)
    depth, carried = crown_plan(net)
    n = len(dom.x)
    for r in net.relus:
        k = net.nodes[r].parents[0]
        if depth[k] == 0 or steps <= 0:
            continue
        if deadline is not None and time.perf_counter() > deadline:
            break
        lo, hi = (t.reshape(n, -1) for t in bounds[k])
        unstable = (lo < 0) & (hi > 0)
        c = int(unstable.sum(dim=1).max()) if n else 0
        if c == 0 or n * backward_work(c, carried[k]) > MAX_CROWN_WORK:
            continue  # (a node CROWN itself could not bound whole keeps its bounds)
        idx = torch.argsort(unstable.to(torch.int8), dim=1, descending=True, stable=True)[:, :c]
        spec = torch.zeros(n, 2 * c, net.nodes[k].size, dtype=dom.x.dtype, device=dom.x.device)
        spec.scatter_(2, idx[:, :, None], 1.0)
        spec[:, c:].scatter_(2, idx[:, :, None], -1.0)
        before = {j: b for j, b in bounds.items() if j < k}
        best = _optimised_bound(net, dom, before, k, spec, steps, deadline=deadline)
        new_lo = torch.maximum(lo.gather(1, idx), best[:, :c])
        new_hi = torch.minimum(hi.gather(1, idx), -best[:, c:])
        lo, hi = lo.clone(), hi.clone()
        lo.scatter_(1, idx, new_lo)
        hi.scatter_(1, idx, new_hi)
        shape = (n, *net.nodes[k].shape)
        bounds[k] = (lo.reshape(shape), hi.reshape(shape))
    return bounds


class _Clamped(dict):
    """Bounds that intersect each node's ``splits`` clamps in as they are stored."""

    def __init__(self, splits: Bounds | None) -> None:
        super().__init__()
        self.splits = splits or {}

    def __setitem__(self, k: int, value: tuple[torch.Tensor, torch.Tensor]) -> None:
        if k in self.splits:
            lo, hi = value
            c_lo, c_hi = self.splits[k]
            value = (torch.maximum(lo, c_lo.reshape(lo.shape)),
                     torch.minimum(hi, c_hi.reshape(hi.shape)))
        super().__setitem__(k, value)


def _in_chunks(net: Network, dom: Domain, ibp: Bounds | None,
               splits: Bounds | None = None,
               priority: dict[int, torch.Tensor] | None = None) -> Bounds:
    """:func:`preactivation_bounds` a chunk of inputs at a time (forward mode's memory)."""
    per = 1
    while forward_fits(net, 2 * per):
        per *= 2
    parts = []
    for start in range(0, len(dom.x), per):
        rows = torch.arange(start, min(start + per, len(dom.x)), device=dom.x.device)
        sub = None if ibp is None else {k: (lo[rows], hi[rows]) for k, (lo, hi) in ibp.items()}
        cut = None if splits is None else {k: (lo[rows], hi[rows])
                                           for k, (lo, hi) in splits.items()}
        prio = None if priority is None else {k: v[rows] for k, v in priority.items()}
        parts.append(preactivation_bounds(net, dom.subset(rows), sub, cut, prio))
    return {k: (torch.cat([p[k][0] for p in parts]), torch.cat([p[k][1] for p in parts]))
            for k in parts[0]}


def crown_rows(unstable: int, carried: int) -> int:
    """Neurons per input that backward CROWN bounds in a node with at most ``unstable``
    unstable neurons per input and ``carried`` summed sizes behind it: all of them where
    their work (:func:`backward_work`) is within ``MAX_CROWN_WORK``, else as many as fit."""
    return min(unstable, int(MAX_CROWN_WORK // max(1, backward_work(1, carried))))


def backward_work(rows: int, carried: int) -> int:
    """Coefficients one input's backward pass carries: ``2 rows`` specification rows (lower
    and upper bound of each neuron) times ``carried``, the summed sizes of the nodes the
    pass goes through (:func:`crown_plan`)."""
    return 2 * rows * carried


def crown_plan(net: Network) -> tuple[list[int], list[int]]:
    """Per node: the most ReLUs on a path from the input to it (at 0, under Linf, IBP's
    bounds are exact), and the sizes a backward pass from it carries."""
    return _relu_depth(net), _carried_sizes(net)


def _carried_sizes(net: Network) -> list[int]:
    """Per node: the summed sizes of the node and of every node it depends on."""
    ancestors: list[set[int]] = []
    for k, nd in enumerate(net.nodes):
        ancestors.append({k}.union(*(ancestors[p] for p in nd.parents)))
    return [sum(net.nodes[j].size for j in anc) for anc in ancestors]


def _relu_depth(net: Network) -> list[int]:
    """Per node: the most ReLUs on a path from the input to it (the node itself excluded)."""
    out: list[int] = []
    for nd in net.nodes:
        out.append(max((out[p] + (net.nodes[p].kind == RELU) for p in nd.parents), default=0))
    return out


def _widest(net: Network, k: int) -> int:
    return max(nd.size for nd in net.nodes[:k + 1])


def backward_bound(net: Network, dom: Domain, bounds: Bounds, target: int,
                   spec: torch.Tensor, alphas: dict[int, torch.Tensor] | None = None,
                   extra: dict[int, torch.Tensor] | None = None,
                   losses: dict[int, torch.Tensor] | None = None,
                   relaxed: Relaxed | None = None) -> torch.Tensor:
    """CROWN: lower bounds ``(n, s)`` of ``spec . value(target)``, ``spec``
    ``(n, s, size of target)``, given pre-activation ``bounds`` of every ReLU before
    ``target``. ``alphas`` (optional) maps a ReLU node to lower slopes ``(n, s, *shape)``
    (clamped to [0, 1] here).

    ``extra`` (optional) maps nodes before ``target`` to coefficients ``(n, s, *shape)``
    of their values added to the specification: the bound is then one of
    ``spec . value(target) + sum_k extra[k] . value(k)`` (branch and bound's Lagrangian
    terms of split constraints). ``losses``, where given, is filled per node that feeds a
    ReLU with ``(n, s, *shape)``: how much each neuron's upper line lowers the bound
    (``>= 0``; zero for stable neurons), which branching reads. ``relaxed`` (optional):
    :func:`relaxations` of ``bounds``, for a caller that bounds many times over the same
    ``bounds``."""
    a_in, const = linear_bound(net, bounds, target, spec, alphas, extra, losses, relaxed)
    if a_in is None:  # the target does not depend on the input
        return const
    return const + dom.minimum(a_in)


def linear_bound(net: Network, bounds: Bounds, target: int, spec: torch.Tensor,
                 alphas: dict[int, torch.Tensor] | None = None,
                 extra: dict[int, torch.Tensor] | None = None,
                 losses: dict[int, torch.Tensor] | None = None,
                 relaxed: Relaxed | None = None
                 ) -> tuple[torch.Tensor | None, torch.Tensor]:
    """The linear function of the input that :func:`backward_bound` minimises:
    ``(a, c)`` with ``spec . value(target) + extra terms >= a . x' + c`` for every input
    ``x'`` whose pre-activations lie in ``bounds``; ``a`` ``(n, s, d)`` (``None`` where the
    target does not depend on the input), ``c`` ``(n, s)``. Where every ReLU is stable
    under ``bounds`` the relaxation is exact and so is this function."""
    n, s = spec.shape[:2]
    coef: dict[int, torch.Tensor] = {target: spec.reshape(n, s, *net.nodes[target].shape)}
    for k, a in (extra or {}).items():
        _accumulate(coef, k, a.reshape(n, s, *net.nodes[k].shape))
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
            if relaxed is not None and k in relaxed:
                up_slope, up_int, low_slope, unstable = relaxed[k]
            else:
                zl, u = bounds[nd.parents[0]]
                up_slope, up_int, low_slope, unstable = relu_relaxation(zl[:, None],
                                                                        u[:, None])
            if alphas is not None and k in alphas:
                low_slope = torch.where(unstable, alphas[k].clamp(0, 1), low_slope)
            pos, neg = a.clamp_min(0), a.clamp_max(0)
            const = const + (neg * up_int).flatten(2).sum(-1)
            if losses is not None:
                losses[nd.parents[0]] = -(neg * up_int)
            _accumulate(coef, nd.parents[0], pos * low_slope + neg * up_slope)
    return (None if a_in is None else a_in.reshape(n, s, -1)), const


def relaxations(net: Network, bounds: Bounds) -> Relaxed:
    """Per ReLU node, its relaxation under ``bounds`` as :func:`linear_bound` uses it:
    ``relu_relaxation`` of the fed node's bounds with a specification axis, ``(n, 1,
    *shape)`` each."""
    return {r: relu_relaxation(bounds[net.nodes[r].parents[0]][0][:, None],
                               bounds[net.nodes[r].parents[0]][1][:, None])
            for r in net.relus if net.nodes[r].parents[0] in bounds}


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
                     spec: torch.Tensor, steps: int,
                     losses: dict[int, torch.Tensor] | None = None,
                     deadline: float | None = None) -> torch.Tensor:
    """alpha-CROWN on the last backward pass: Adam on the lower slopes, best bound kept;
    ``losses`` (optional) filled by the pass with the last slopes; no step starts after
    ``deadline`` (``time.perf_counter()`` seconds, ``None``: all ``steps``)."""
    n, s = spec.shape[:2]
    alphas = {}
    for r in net.relus:
        if r > target:
            continue
        zl, u = bounds[net.nodes[r].parents[0]]
        _, _, low, _ = relu_relaxation(zl, u)
        alphas[r] = low[:, None].expand(n, s, *net.nodes[r].shape).clone().requires_grad_(True)
    with torch.no_grad():
        best = backward_bound(net, dom, bounds, target, spec, losses=losses)
    if not alphas or steps <= 0:
        return best
    opt = torch.optim.Adam(list(alphas.values()), lr=ALPHA_LR)
    for _ in range(steps):
        if deadline is not None and time.perf_counter() > deadline:
            break
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
        best = torch.maximum(best, backward_bound(net, dom, bounds, target, spec, alphas,
                                                  losses=losses))
    return best


def margin_spec(y: torch.Tensor, k: int, dtype=torch.float64) -> torch.Tensor:
    """``(n, k, k)``: row ``j`` is ``e_y - e_j`` (the margin of class ``y`` over ``j``);
    row ``y`` is zero."""
    n = len(y)
    eye = torch.eye(k, dtype=dtype, device=y.device)
    spec = eye[y][:, None, :] - eye[None, :, :]
    return spec.expand(n, k, k).clone()


def margin_lower_bounds(net: Network, dom: Domain, y: torch.Tensor, method: str = "crown",
                        steps: int = ALPHA_STEPS, priority: dict[int, torch.Tensor] | None = None,
                        losses: dict[int, torch.Tensor] | None = None,
                        deadline: float | None = None) -> torch.Tensor:
    """``(n, k)`` lower bounds of ``logit_y - logit_j`` (``inf`` at ``j = y``);
    ``priority``, ``losses`` and ``deadline`` as in :func:`lower_bounds` (rows of
    ``margin_spec``)."""
    k = net.n_classes
    lb = lower_bounds(net, dom, margin_spec(y, k), method, steps, priority, losses, deadline)
    return lb.scatter(1, y[:, None], math.inf)
