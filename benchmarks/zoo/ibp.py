"""Interval bound propagation (Gowal et al. 2018) for Sequential networks of Linear, Conv2d,
ReLU and Flatten layers, and the IBP training loss.

The last Linear layer is folded into the margin specification ("elision"): the lower bound of
``z_y - z_j`` is computed from ``W_y - W_j`` directly, which is tighter than subtracting the
logit intervals.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

SUPPORTED = (nn.Linear, nn.Conv2d, nn.ReLU, nn.Flatten)


def check_supported(net: nn.Sequential) -> None:
    bad = [type(m).__name__ for m in net if not isinstance(m, SUPPORTED)]
    if bad or not isinstance(net[-1], nn.Linear):
        raise TypeError(f"IBP needs Linear/Conv2d/ReLU/Flatten ending in Linear; got {bad}")


def _affine(m: nn.Module, mid: torch.Tensor, rad: torch.Tensor):
    if isinstance(m, nn.Linear):
        return m(mid), F.linear(rad, m.weight.abs())
    return m(mid), F.conv2d(rad, m.weight.abs(), None, m.stride, m.padding, m.dilation,
                            m.groups)


def interval(layers, lo: torch.Tensor, hi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Elementwise bounds of ``layers(x)`` over the box ``lo <= x <= hi``."""
    for m in layers:
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            mid, rad = _affine(m, (hi + lo) / 2, (hi - lo) / 2)
            lo, hi = mid - rad, mid + rad
        elif isinstance(m, nn.ReLU):
            lo, hi = lo.clamp(min=0), hi.clamp(min=0)
        elif isinstance(m, nn.Flatten):
            lo, hi = m(lo), m(hi)
        else:
            raise TypeError(f"no interval rule for {type(m).__name__}")
    return lo, hi


def margin_lower(net: nn.Sequential, x: torch.Tensor, y: torch.Tensor,
                 eps: float) -> torch.Tensor:
    """Lower bounds of ``z_y - z_j`` (shape (n, classes), 0 at j = y) over the Linf ball of
    radius ``eps`` around ``x`` intersected with the box [0, 1]."""
    lo, hi = interval(net[:-1], (x - eps).clamp(0, 1), (x + eps).clamp(0, 1))
    last: nn.Linear = net[-1]
    w = last.weight[y].unsqueeze(1) - last.weight.unsqueeze(0)     # (n, k, h)
    b = last.bias[y].unsqueeze(1) - last.bias.unsqueeze(0)         # (n, k)
    mid, rad = (hi + lo) / 2, (hi - lo) / 2
    return (torch.einsum("nkh,nh->nk", w, mid) - torch.einsum("nkh,nh->nk", w.abs(), rad)
            + b)


def ibp_loss(net: nn.Sequential, x: torch.Tensor, y: torch.Tensor, eps: float,
             kappa: float) -> torch.Tensor:
    """``kappa * CE(clean) + (1 - kappa) * CE(worst-case logits)``, the worst-case logits
    being ``-margin_lower`` (the target class at 0)."""
    clean = F.cross_entropy(net(x), y)
    if eps <= 0:
        return clean
    worst = F.cross_entropy(-margin_lower(net, x, y, eps), y)
    return kappa * clean + (1 - kappa) * worst


def train_ibp(net: nn.Sequential, X, y, epochs: int, eps: float, seed: int = 0,
              lr: float = 1e-3, batch: int = 64) -> nn.Module:
    """Adam on :func:`ibp_loss`: eps ramps linearly from 0 to ``eps`` over the first half of
    the steps and kappa from 1 to 0.5, then both stay (the usual IBP schedule, shortened)."""
    check_supported(net)
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    Xt, yt = torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(y)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    per_epoch = -(-len(Xt) // batch)
    total, ramp, step = epochs * per_epoch, max(1, epochs * per_epoch // 2), 0
    net.train()
    for _ in range(epochs):
        perm = torch.randperm(len(Xt), generator=g)
        for i in range(0, len(Xt), batch):
            idx = perm[i:i + batch]
            t = min(1.0, step / ramp)
            opt.zero_grad()
            ibp_loss(net, Xt[idx], yt[idx], eps * t, 1.0 - 0.5 * t).backward()
            opt.step()
            step += 1
    assert step == total
    return net.eval()


def certified_accuracy(net: nn.Sequential, X, y, eps: float) -> float:
    """Share of inputs whose IBP margins are all positive at ``eps`` (a lower bound on robust
    accuracy)."""
    with torch.no_grad():
        Xt, yt = torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(y)
        m = margin_lower(net, Xt, yt, eps)
        m[torch.arange(len(yt)), yt] = float("inf")
        return float((m.min(1).values > 0).float().mean())
