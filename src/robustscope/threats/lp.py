"""Lp threat models in the scaled feature space.

All functions act on scaled perturbations ``u = (x' - x) / scale`` of shape ``(n, d)`` with a
per-input strength ``eps`` of shape ``(n,)``. Look a threat up by name with
:func:`robustscope.threats.registry.get_threat` (the registry declares the names).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class LpThreat:
    """Perturbations with ``||u||_p <= eps``; ``p`` in {1, 2, inf}."""

    name: str
    p: float

    def norm(self, u: torch.Tensor) -> torch.Tensor:
        """``||u||_p`` per row, shape ``(n,)``."""
        return torch.linalg.vector_norm(u.reshape(u.shape[0], -1), ord=self.p, dim=1)

    def dual_norm(self, g: torch.Tensor) -> torch.Tensor:
        """``||g||_q`` with ``1/p + 1/q = 1``, per row."""
        q = {1.0: math.inf, 2.0: 2.0, math.inf: 1.0}[self.p]
        return torch.linalg.vector_norm(g.reshape(g.shape[0], -1), ord=q, dim=1)

    def project(self, u: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
        """Euclidean projection of each row onto the ball of radius ``eps`` (exact)."""
        eps = eps.reshape(-1, 1).to(u.dtype)
        if self.p == math.inf:
            return torch.maximum(torch.minimum(u, eps), -eps)
        if self.p == 2.0:
            n = self.norm(u).reshape(-1, 1)
            factor = torch.where(n > eps, eps / n.clamp_min(1e-30), torch.ones_like(n))
            return u * factor
        return project_l1_ball(u, eps.reshape(-1))

    def steepest_direction(self, g: torch.Tensor) -> torch.Tensor:
        """Unit-norm (in this threat's norm) direction of steepest ascent of ``<g, u>``.

        Linf: sign(g); L2: g/||g||; L1: the signs of the largest 1% of |g| (at least one
        coordinate), spread evenly (a sparse step, as in SLIDE / APGD-L1).
        """
        if self.p == math.inf:
            return torch.sign(g)
        if self.p == 2.0:
            return g / self.norm(g).reshape(-1, 1).clamp_min(1e-30)
        d = g.shape[1]
        k = max(1, int(round(0.01 * d)))
        top = g.abs().topk(k, dim=1).indices
        mask = torch.zeros_like(g).scatter_(1, top, 1.0)
        return torch.sign(g) * mask / k

    def random_in_ball(self, n: int, d: int, eps: torch.Tensor,
                       generator: torch.Generator, dtype, device) -> torch.Tensor:
        """Uniform samples in the ball of radius ``eps`` (per row), shape ``(n, d)``."""
        eps = eps.reshape(-1, 1).to(dtype)
        if self.p == math.inf:
            r = torch.rand(n, d, generator=generator, dtype=dtype, device=device)
            return (2 * r - 1) * eps
        if self.p == 2.0:
            z = torch.randn(n, d, generator=generator, dtype=dtype, device=device)
            z = z / self.norm(z).reshape(-1, 1).clamp_min(1e-30)
            rad = torch.rand(n, 1, generator=generator, dtype=dtype, device=device) ** (1.0 / d)
            return z * rad * eps
        # uniform in the L1 ball: Laplace directions, radius U^(1/d)
        e = -torch.log(torch.rand(n, d, generator=generator, dtype=dtype, device=device))
        sign = torch.sign(torch.rand(n, d, generator=generator, dtype=dtype, device=device) - 0.5)
        z = sign * e / e.sum(dim=1, keepdim=True)
        rad = torch.rand(n, 1, generator=generator, dtype=dtype, device=device) ** (1.0 / d)
        return z * rad * eps


def project_l1_ball(u: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
    """Exact Euclidean projection of each row of ``u`` onto the L1 ball of radius ``eps``
    (Duchi et al. 2008, by sorting)."""
    eps = eps.reshape(-1).to(u.dtype)
    a = u.abs()
    inside = a.sum(dim=1) <= eps
    if inside.all():
        return u
    srt, _ = a.sort(dim=1, descending=True)
    cums = srt.cumsum(dim=1)
    ks = torch.arange(1, u.shape[1] + 1, device=u.device, dtype=u.dtype)
    cond = srt - (cums - eps.reshape(-1, 1)) / ks > 0
    positions = torch.arange(u.shape[1], device=u.device)
    rho = (cond * positions).max(dim=1).values  # last index where cond holds
    theta = (cums.gather(1, rho.reshape(-1, 1)).reshape(-1) - eps) / (rho + 1).to(u.dtype)
    theta = theta.clamp_min(0.0)
    projected = torch.sign(u) * (a - theta.reshape(-1, 1)).clamp_min(0.0)
    return torch.where(inside.reshape(-1, 1), u, projected)


def project_l1_box(u: torch.Tensor, eps: torch.Tensor, lo: torch.Tensor,
                   hi: torch.Tensor) -> torch.Tensor:
    """Exact Euclidean projection of each row of ``u`` onto
    ``{v : ||v||_1 <= eps, lo <= v <= hi}``.

    ``u``, ``lo``, ``hi``: ``(n, d)`` scaled perturbations and their box, with
    ``lo <= 0 <= hi`` per coordinate (bounds may be infinite; ``lo = hi = 0`` pins a
    coordinate); ``eps``: ``(n,)`` non-negative radii. Returns ``(n, d)``.

    The solution is ``v_i = sign(u_i) * min(max(|u_i| - theta, 0), cap_i)`` with ``cap_i =
    hi_i`` where ``u_i >= 0`` else ``-lo_i`` (soft-threshold, then clip: the box is applied
    after the threshold, not before), and ``theta >= 0`` the smallest value with
    ``f(theta) = sum_i min(max(|u_i| - theta, 0), cap_i) <= eps``. ``f`` is piecewise linear
    and non-increasing with breakpoints ``max(|u_i| - cap_i, 0)`` (where coordinate ``i``
    leaves its cap) and ``|u_i|`` (where it reaches 0); they are sorted per row and ``f`` is
    evaluated at all of them by a reverse cumulative sum, so ``theta`` is found exactly,
    batched and without leaving the device.
    """
    dtype = u.dtype
    eps = eps.reshape(-1, 1).to(dtype)
    lo, hi = lo.to(dtype), hi.to(dtype)
    a = u.abs()
    cap = torch.where(u >= 0, hi, -lo)
    n, d = u.shape
    if d == 0:
        return u.clone()
    starts = (a - cap).clamp_min(0.0)  # -inf (an unbounded side) becomes 0
    t = torch.cat([starts, a], dim=1)
    change = torch.cat([torch.ones_like(a), -torch.ones_like(a)], dim=1)
    t, order = t.sort(dim=1, stable=True)
    active = change.gather(1, order).cumsum(dim=1)  # coordinates sloping on (t_k, t_k+1)
    seg = (t[:, 1:] - t[:, :-1]) * active[:, :-1]
    tail = seg.flip(1).cumsum(dim=1).flip(1)  # f(t_k) - f(t_last), and f(t_last) = 0
    f_at = torch.cat([tail, torch.zeros_like(t[:, :1])], dim=1)
    # f is constant on [0, t_0], so f(0) = f(t_0)
    k = (f_at > eps).sum(dim=1, keepdim=True).clamp(1, 2 * d) - 1
    t_k, f_k = t.gather(1, k), f_at.gather(1, k)
    slope = active.gather(1, k).clamp_min(1.0)
    theta = t_k + (f_k - eps) / slope
    theta = torch.where(f_at[:, :1] > eps, theta, torch.zeros_like(theta)).clamp_min(0.0)
    v = torch.minimum((a - theta).clamp_min(0.0), cap)
    return torch.sign(u) * v


LINF = LpThreat("linf", math.inf)
L2 = LpThreat("l2", 2.0)
L1 = LpThreat("l1", 1.0)
