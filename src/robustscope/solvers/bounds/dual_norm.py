"""Bounds of a node that is an affine function of the input, by the threat's dual norm.

A node ``z = A x' + c`` with no ReLU before it (a first convolution, with any standardising
layers in front) is bounded exactly over the domain by minimising each row of ``A`` over
it. Forward mode does that when it fits in memory; on a larger network (the tiny 32x32
colour CNN carries 2.4e8 forward coefficients per input) the fallback used to be IBP,
which bounds an L1 or L2 ball by the Linf ball around it: in 3,072 dimensions an L1 ball
of radius 7 becomes the whole box, and no strength could be certified.

Here each row is bounded over the ball and the box separately and the larger of the two
lower bounds is kept: the domain lies in both, so each is valid. Over the ball of radius
``eps`` in scaled units ``u = (x' - x) / scale``, ``min (A scale) . u = -eps ||A_i scale||_q``,
``q`` the dual exponent of ``p`` (L1: the largest entry, L2: the Euclidean norm). The row
norms do not depend on the input or on ``eps``: they are computed once per network, node,
``p`` and scale (one backward pass per chunk of rows, as CROWN's) and kept on the network.
"""

from __future__ import annotations

import math

import torch

from robustscope.solvers.bounds.domain import Domain
from robustscope.solvers.bounds.graph import Network

#: Most values (rows x the widest node up to the bounded one) held at once while the row
#: norms are computed.
MAX_ROW_COEFFICIENTS = 2 ** 24
#: Most values the row norms of one node may take in all (256 chunks): the tiny colour CNN's
#: first convolution takes 6.7e7, a CIFAR ResNet's about 4.3e9 (about 256 passes of a batch
#: of 256 images); a node above it keeps IBP's bound.
MAX_ROW_WORK = 2 ** 32


def affordable(net: Network, k: int) -> bool:
    """Whether node ``k``'s row norms are within :data:`MAX_ROW_WORK`."""
    return net.nodes[k].size * max(nd.size for nd in net.nodes[:k + 1]) <= MAX_ROW_WORK


def row_norms(net: Network, k: int, scale: torch.Tensor, p: float) -> torch.Tensor:
    """``(size of k,)``: per neuron of node ``k`` (an affine function of the input), the
    dual norm of its row of ``A`` times ``scale`` ``(d,)``. Cached on ``net``."""
    key = (k, float(p), scale.detach().cpu().numpy().tobytes())
    cache = net.__dict__.setdefault("_row_norms", {})
    if key not in cache:
        cache[key] = _row_norms(net, k, scale.to(device=net.device, dtype=net.dtype), p)
    return cache[key]


def _row_norms(net: Network, k: int, scale: torch.Tensor, p: float) -> torch.Tensor:
    size, d = net.nodes[k].size, net.nodes[0].size
    q = 1.0 / (1.0 - 1.0 / p) if math.isfinite(p) and p > 1 else math.inf
    widest = max(nd.size for nd in net.nodes[:k + 1])
    chunk = max(1, MAX_ROW_COEFFICIENTS // widest)
    out = torch.empty(size, dtype=net.dtype, device=net.device)
    for start in range(0, size, chunk):
        rows = torch.arange(start, min(start + chunk, size), device=net.device)
        pick = torch.zeros(len(rows), size, dtype=net.dtype, device=net.device)
        pick[torch.arange(len(rows), device=net.device), rows] = 1.0
        # one sample per row: the gradient of (row's one-hot) . z(x') is that row of A
        x = torch.zeros(len(rows), *net.input_shape, dtype=net.dtype, device=net.device,
                        requires_grad=True)
        with torch.enable_grad():
            z = net.forward(x, upto=k)[k].reshape(len(rows), size)
            (a,) = torch.autograd.grad(z, x, grad_outputs=pick, allow_unused=True)
        g = torch.zeros(len(rows), d, dtype=net.dtype, device=net.device) if a is None \
            else a.reshape(len(rows), d) * scale
        out[rows] = torch.linalg.vector_norm(g, ord=q, dim=-1)
    return out


def ball_bounds(net: Network, dom: Domain, k: int, value: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(lower, upper)``, each ``(n, size of k)``: node ``k`` (an affine function of the
    input) over each input's ball alone, from its clean ``value`` ``(n, size of k)``;
    unbounded where the row norms are not :func:`affordable`."""
    if not affordable(net, k):
        return value - math.inf, value + math.inf
    norms = row_norms(net, k, dom.scale, dom.p)
    reach = dom.eps[:, None] * norms[None, :]
    return value - reach, value + reach
