"""Forward-mode linear bounds: every node enclosed between two linear functions of the input.

Where backward CROWN carries one specification row per bounded neuron back to the input
(its cost grows with the neurons bounded times the sizes it passes through), forward mode
carries, for every node, a lower and an upper linear function of the ``d`` input features
forward (its cost grows with ``d`` times the network's size, whatever the number of
neurons). On convolutional networks with small inputs that is the cheap way to bound every
neuron: LeNet-5 on MNIST (``d = 784``) has about 40,000 node values.

An affine node ``z = W v + b`` maps the parent's functions ``L <= v <= U`` to
``W+ L + W- U <= z <= W+ U + W- L``, computed as ``W M -/+ |W| R`` with ``M = (L + U) / 2``
and ``R = (U - L) / 2``. A ReLU with pre-activation bounds ``[l, u]`` keeps ``alpha L`` below
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
#: (about 0.7 s per pass on a 2-core CPU), the tiny 32x32 colour CNN 2.4e8 (about 10 s,
#: more than it saves there).
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

    Coefficients are held as ``(n, d, *shape)`` tensors (one slice per input feature, in
    original units), constants as ``(n, *shape)``."""

    def __init__(self, net: Network, dom: Domain) -> None:
        self.net, self.dom = net, dom
        self.n, self.d = len(dom.x), net.nodes[0].size
        self.funcs: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = {}
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
        lw, lb, uw, ub = self.funcs[k]
        n = self.n
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
            self.funcs[k] = (w, b, w, b)
        elif nd.kind == AFFINE:
            self.funcs[k] = _affine_funcs(nd, *self.funcs[nd.parents[0]], n, d)
        elif nd.kind == RELU:
            lw, lb, uw, ub = self.funcs[nd.parents[0]]
            zl, zu = relu_bounds[nd.parents[0]]
            up_slope, up_int, low_slope, _ = relu_relaxation(zl, zu)
            self.funcs[k] = (lw * low_slope[:, None], lb * low_slope,
                             uw * up_slope[:, None], ub * up_slope + up_int)
        else:
            parts = [self.funcs[p] for p in nd.parents]
            self.funcs[k] = tuple(sum(f[i] for f in parts) for i in range(4))
        for p in nd.parents:
            if self.last_use[p] <= k:
                self.funcs.pop(p, None)


def _affine_funcs(nd, lw, lb, uw, ub, n: int, d: int):
    """An affine node's enclosing functions from its parent's (see the module doc)."""
    in_shape = lw.shape[2:]

    def lin(v: torch.Tensor) -> torch.Tensor:  # W v, per row of v's leading dimensions
        return nd.fn(v.reshape(-1, *in_shape)) - nd.bias

    def abs_lin(v: torch.Tensor) -> torch.Tensor:  # |W| v for v of any sign
        v = v.reshape(-1, *in_shape)
        return nd.abs_fn(v.clamp_min(0)) - nd.abs_fn((-v).clamp_min(0))

    cw, rw = lin((lw + uw) / 2), abs_lin((uw - lw) / 2)
    cb, rb = nd.fn((lb + ub) / 2), abs_lin((ub - lb) / 2)
    shape = (n, d, *nd.shape)
    return ((cw - rw).reshape(shape), cb - rb, (cw + rw).reshape(shape), cb + rb)
