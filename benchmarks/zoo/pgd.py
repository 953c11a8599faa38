"""A plain PGD baseline for the zoo's reference radii (Linf and L2): margin-loss PGD with
random restarts inside ``ball(eps) ∩ [0, 1]^d``, eps found per input by doubling and then
bisection. Every counterexample is re-checked on the network in float32 and on a float64
copy, and its norm is measured in float64 on the point itself (not the eps it was found at).
"""

from __future__ import annotations

import copy
import math

import numpy as np
import torch
from torch import nn


def norms(delta: torch.Tensor, threat: str) -> torch.Tensor:
    flat = delta.flatten(1)
    if threat == "linf":
        return flat.abs().amax(1)
    if threat == "l2":
        return flat.norm(dim=1)
    raise ValueError(f"PGD baseline: Linf / L2 only, not {threat}")


def _project(delta: torch.Tensor, x: torch.Tensor, eps: torch.Tensor, threat: str):
    shape = (-1,) + (1,) * (x.dim() - 1)
    if threat == "linf":
        delta = torch.maximum(torch.minimum(delta, eps.view(shape)), -eps.view(shape))
    else:
        n = norms(delta, "l2").clamp(min=1e-12)
        delta = delta * (eps / n).clamp(max=1.0).view(shape)
    return (x + delta).clamp(0, 1) - x


def _margin(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``z_y - max_{j != y} z_j`` (negative: misclassified)."""
    zy = z.gather(1, y[:, None])[:, 0]
    other = z.clone()
    other.scatter_(1, y[:, None], -math.inf)
    return zy - other.amax(1)


def pgd(net: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: torch.Tensor, threat: str,
        steps: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """One PGD run per row at its own ``eps`` (random start, step 2.5 eps / steps, sign step
    for Linf, normalised gradient step for L2). Returns the first misclassified iterate per
    row (or the last iterate) and whether one was found."""
    shape = (-1,) + (1,) * (x.dim() - 1)
    if threat == "linf":
        delta = (torch.rand(x.shape, generator=g) * 2 - 1) * eps.view(shape)
    else:
        d = torch.randn(x.shape, generator=g)
        u = torch.rand(len(x), generator=g)
        delta = d / norms(d, "l2").view(shape) * (eps * u).view(shape)
    delta = _project(delta, x, eps, threat)
    found = torch.zeros(len(x), dtype=torch.bool)
    best = x + delta
    step = (2.5 * eps / steps).view(shape)
    for _ in range(steps + 1):
        delta.requires_grad_(True)
        m = _margin(net(x + delta), y)
        with torch.no_grad():
            hit = (m < 0) & ~found
            best[hit] = (x + delta)[hit]
            found |= hit
        if found.all():
            break
        (grad,) = torch.autograd.grad(m.sum(), delta)
        with torch.no_grad():
            if threat == "linf":
                delta = delta - step * grad.sign()
            else:
                gn = norms(grad, "l2").clamp(min=1e-12).view(shape)
                delta = delta - step * grad / gn
            delta = _project(delta, x, eps, threat)
    return best.detach(), found


class Verifier:
    """Re-checks counterexamples on ``net`` in float32 and on a float64 copy."""

    def __init__(self, net: nn.Module) -> None:
        self.net32 = net
        self.net64 = copy.deepcopy(net).double().eval()

    def __call__(self, xa: np.ndarray, X: np.ndarray, y: np.ndarray,
                 threat: str) -> np.ndarray:
        """Norm in float64 of each ``xa - X`` where ``xa`` is in the box and misclassified
        by both, else inf."""
        xa64 = np.asarray(xa, dtype=np.float64)
        with torch.no_grad():
            p64 = self.net64(torch.as_tensor(xa64)).argmax(1).numpy()
            p32 = self.net32(torch.as_tensor(xa64, dtype=torch.float32)).argmax(1).numpy()
        inside = ((xa64 >= 0) & (xa64 <= 1)).reshape(len(xa64), -1).all(1)
        ok = (p64 != y) & (p32 != y) & inside
        d = torch.as_tensor(xa64 - np.asarray(X, dtype=np.float64))
        return np.where(ok, norms(d, threat).numpy(), np.inf)


def pgd_radius(net: nn.Module, X: np.ndarray, y: np.ndarray, threat: str, restarts: int = 5,
               steps: int = 20, bisections: int = 10, seed: int = 0):
    """Smallest verified PGD counterexample norm per input (inf: none found) and the passes
    per input (forward + backward rows). eps doubles from ``top / 256`` (top: 1 for Linf,
    sqrt(d) for L2) until a verified success, at most 9 times, then ``bisections`` steps of
    bisection; every probe runs ``restarts`` random restarts."""
    net = net.eval()
    g = torch.Generator().manual_seed(seed)
    verify = Verifier(net)
    n = len(X)
    d = int(np.prod(X.shape[1:]))
    top = 1.0 if threat == "linf" else math.sqrt(d)
    xt = torch.as_tensor(X, dtype=torch.float32).repeat(restarts, *([1] * (X.ndim - 1)))
    yt = torch.as_tensor(y).repeat(restarts)
    best = np.full(n, np.inf)
    passes = np.zeros(n)

    def probe(eps: np.ndarray, active: np.ndarray) -> np.ndarray:
        """Attack the active inputs at ``eps``; True where a verified success was found."""
        rows = np.tile(active, restarts)
        e = torch.as_tensor(np.tile(eps, restarts), dtype=torch.float32)[rows]
        xa, _ = pgd(net, xt[rows], yt[rows], e, threat, steps, g)
        r = verify(xa.numpy(), xt[rows].numpy(), yt[rows].numpy(), threat)
        per = np.full(n * restarts, np.inf)
        per[rows] = r
        per = per.reshape(restarts, n).min(0)
        per[~active] = np.inf
        passes[active] += restarts * (2 * steps + 1)     # upper bound (early stops not counted)
        np.minimum(best, per, out=best)
        return np.isfinite(per)

    lo, hi = np.zeros(n), np.full(n, np.inf)
    eps = np.full(n, top / 256)
    for _ in range(9):
        active = ~np.isfinite(hi) & (eps <= top * (1 + 1e-9))
        if not active.any():
            break
        ok = probe(eps, active)
        hi[ok] = eps[ok]
        lo[active & ~ok] = eps[active & ~ok]
        eps = np.where(active & ~ok, eps * 2, eps)
    found = np.isfinite(hi)
    for _ in range(bisections):
        if not found.any():
            break
        mid = (lo + np.where(found, hi, 0)) / 2
        ok = probe(mid, found)
        hi = np.where(ok, mid, hi)
        lo = np.where(found & ~ok, mid, lo)
    return best, passes
