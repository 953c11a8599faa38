"""Forward-mode linear bounds: every node enclosed between two linear functions of the input.

Where backward CROWN carries one specification row per bounded neuron back to the input
(its cost grows with the neurons bounded times the sizes it passes through), forward mode
carries, for every node, a lower and an upper linear function of the ``d`` input features
forward (its cost grows with ``d`` times the network's size, whatever the number of
neurons). On convolutional networks with small inputs that is the cheap way to bound every
neuron: LeNet-5 on MNIST (``d = 784``) has about 40,000 node values.

An affine node ``z = W v + b`` maps the parent's functions ``L <= v <= U`` to
``W+ L + W- U <= z <= W+ U + W- L``, that is ``W M -/+ |W| R`` with ``M = (L + U) / 2``
and ``R = (U - L) / 2``; the functions are held in that form, so an affine node costs two
linear maps and nothing else. A ReLU with pre-activation bounds ``[l, u]`` keeps ``alpha L`` below
(``alpha`` in {0, 1}, the same default slope as CROWN's) and ``s (U - l)`` above,
``s = u / (u - l)``; a sum adds. The bounds of a node are the minimum of its lower function
and the maximum of its upper one over the domain (:meth:`Domain.minimum`).

After one ReLU layer the result equals backward CROWN's; deeper, it is looser (a ReLU's
relaxation is applied to its input's enclosing functions, not to the input itself), which is
why :func:`~robustscope.solvers.bounds.propagate.preactivation_bounds` intersects it with
backward CROWN where that is affordable.
"""

from __future__ import annotations

import torch

from robustscope.solvers.bounds.domain import Domain
from robustscope.solvers.bounds.graph import AFFINE, INPUT, RELU, Network
from robustscope.solvers.bounds.relaxation import relu_relaxation

#: Most coefficients (inputs x input features x summed node sizes) one forward pass may
#: carry; larger batches are bounded a chunk of inputs at a time, and a network above it for
#: a single input is not bounded in forward mode. LeNet-5 on MNIST carries 3.1e7 per input
#: (about 0.7 s per pass and input on a 2-core CPU, measured before the centre / half-width
#: form halved it), the tiny 32x32 colour CNN 2.4e8 (about 10 s, more than it saves there).
MAX_FORWARD_WORK = 2 ** 26


def forward_work(net: Network, n: int) -> int:
    """Coefficients ``n`` inputs' forward pass carries: ``n d`` times the summed node sizes."""
    return n * net.nodes[0].size * sum(nd.size for nd in net.nodes)


def forward_fits(net: Network, n: int) -> bool:
    """Whether ``n`` inputs' forward pass is within ``MAX_FORWARD_WORK``."""
    return forward_work(net, n) <= MAX_FORWARD_WORK


class ForwardBounds:
    """Forward functions of the nodes of ``net`` over ``dom``, computed in node order on
    demand: :meth:`bounds` of node ``k`` needs the pre-activation bounds of every ReLU
    before ``k`` (passed in ``relu_bounds``, keyed by the ReLU's parent). Functions no later
    node reads are dropped as soon as possible.

    A node's two functions are held as their centre ``M = (L + U) / 2`` and half-width
    ``R = (U - L) / 2``: an affine node then maps them by ``W`` and ``|W|`` with no
    elementwise work (most nodes of a convolutional network are affine: convolutions, the
    windows and negations of max-pooling). Coefficients are ``(n, d, *shape)`` tensors (one
    slice per input feature, in original units), constants ``(n, *shape)``; a half-width
    that is exactly zero (before the first ReLU) is ``None``."""

    def __init__(self, net: Network, dom: Domain) -> None:
        self.net, self.dom = net, dom
        self.n, self.d = len(dom.x), net.nodes[0].size
        self.funcs: dict[int, tuple] = {}
        self.next = 0
        last_use = list(range(len(net.nodes)))
        for k, nd in enumerate(net.nodes):
            for p in nd.parents:
                last_use[p] = max(last_use[p], k)
        self.last_use = last_use

    def bounds(self, k: int, relu_bounds: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """``(lower, upper)``, each ``(n, size of k)``, of node ``k``."""
        while self.next <= k:
            self._step(self.next, relu_bounds)
            self.next += 1
        cw, cb, rw, rb = self.funcs[k]
        n = self.n
        lw, uw = (cw, cw) if rw is None else (cw - rw, cw + rw)
        lb, ub = (cb, cb) if rb is None else (cb - rb, cb + rb)
        low = lb.reshape(n, -1) + self.dom.minimum(lw.reshape(n, self.d, -1).transpose(1, 2))
        up = ub.reshape(n, -1) - self.dom.minimum(-uw.reshape(n, self.d, -1).transpose(1, 2))
        return low, up

    def _step(self, k: int, relu_bounds: dict) -> None:
        nd = self.net.nodes[k]
        n, d = self.n, self.d
        x = self.dom.x
        if nd.kind == INPUT:
            eye = torch.eye(d, dtype=x.dtype, device=x.device).expand(n, d, d)
            w = eye.reshape(n, d, *nd.shape)
            b = torch.zeros(n, *nd.shape, dtype=x.dtype, device=x.device)
            self.funcs[k] = (w, b, None, None)
        elif nd.kind == AFFINE:
            self.funcs[k] = _affine_funcs(nd, *self.funcs[nd.parents[0]], n, d)
        elif nd.kind == RELU:
            self.funcs[k] = _relu_funcs(*self.funcs[nd.parents[0]],
                                        *relu_bounds[nd.parents[0]])
        else:
            parts = [self.funcs[p] for p in nd.parents]
            self.funcs[k] = tuple(_sum([f[i] for f in parts]) for i in range(4))
        for p in nd.parents:
            if self.last_use[p] <= k:
                self.funcs.pop(p, None)


def _sum(terms: list) -> torch.Tensor | None:
    """The sum of the terms that are not ``None`` (``None`` when all are)."""
    kept = [t for t in terms if t is not None]
    return sum(kept[1:], kept[0]) if kept else None


def _affine_funcs(nd, cw, cb, rw, rb, n: int, d: int):
    """An affine node's centre and half-width functions from its parent's: ``W M + b`` and
    ``|W| R`` (see the module doc)."""
    in_shape = cw.shape[2:]

    def lin(v: torch.Tensor) -> torch.Tensor:  # W v, per row of v's leading dimensions
        return nd.fn(v.reshape(-1, *in_shape)) - nd.bias

    def abs_lin(v: torch.Tensor | None) -> torch.Tensor | None:  # |W| v, v of any sign
        if v is None:
            return None
        v = v.reshape(-1, *in_shape)
        if nd.abs_linear:
            return nd.abs_fn(v)
        return nd.abs_fn(v.clamp_min(0)) - nd.abs_fn((-v).clamp_min(0))

    shape = (n, d, *nd.shape)
    rw2 = abs_lin(rw)
    return (lin(cw).reshape(shape), nd.fn(cb), None if rw2 is None else rw2.reshape(shape),
            abs_lin(rb))


def _relu_funcs(cw, cb, rw, rb, zl: torch.Tensor, zu: torch.Tensor):
    """A ReLU's functions from its input's, given the input's bounds ``[zl, zu]``
    ``(n, size)``: ``alpha L`` below and ``s (U - l)`` above (:func:`relu_relaxation`),
    back in centre / half-width form."""
    up_slope, up_int, low_slope, _ = relu_relaxation(zl, zu)
    n = len(cb)
    shape = cb.shape[1:]
    a, s = low_slope.reshape(n, *shape), up_slope.reshape(n, *shape)
    plus, minus = (s + a) / 2, (s - a) / 2
    half_int = up_int.reshape(n, *shape) / 2
    w_c, w_r = _mix(cw, rw, plus[:, None], minus[:, None])
    b_c, b_r = _mix(cb, rb, plus, minus)
    return w_c, b_c + half_int, w_r, b_r + half_int


def _mix(c: torch.Tensor, r: torch.Tensor | None, plus: torch.Tensor, minus: torch.Tensor):
    """``(c plus + r minus, c minus + r plus)``, with ``r = None`` read as zero."""
    if r is None:
        return c * plus, c * minus
    return c * plus + r * minus, c * minus + r * plus
