"""Small synthetic colour images and a tiny CNN trained on them (tests, benchmarks, examples).

Four classes of 32 x 32 RGB images: stripe orientation (horizontal / vertical) times tint
(warm / cool), with random stripe period and phase, random base colour and pixel noise. A
tiny undefended CNN reaches high clean accuracy in a few hundred steps on one CPU core and is,
like any undefended network, easy to break with every image threat.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def stripes_dataset(n: int, size: int = 32, seed: int = 0, amplitude: float = 0.08,
                    tint_size: float = 0.05, noise: float = 0.05,
                    device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` images ``(n, 3, size, size)`` in [0, 1] and labels ``(n,)`` in {0, 1, 2, 3}."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 4, (n,), generator=g)
    horizontal = (y % 2 == 0).float().reshape(-1, 1, 1)
    warm = (y // 2 == 0).float()
    period = 3.0 + 4.0 * torch.rand(n, generator=g)
    phase = 2 * math.pi * torch.rand(n, generator=g)
    r = torch.arange(size, dtype=torch.float32)
    rows = r.reshape(1, -1, 1).expand(n, size, size)
    cols = r.reshape(1, 1, -1).expand(n, size, size)
    coord = horizontal * rows + (1 - horizontal) * cols
    wave = torch.sin(2 * math.pi * coord / period.reshape(-1, 1, 1) + phase.reshape(-1, 1, 1))
    # a gray base of random brightness with a little colour jitter, the class tint (red or
    # blue), and luminance stripes; all weak next to the pixel noise
    gray = 0.3 + 0.4 * torch.rand(n, 1, generator=g)
    base = gray + 0.03 * torch.randn(n, 3, generator=g)
    sign = (2 * warm - 1).reshape(-1, 1)
    tint = torch.tensor([[1.0, 0.0, -1.0]]) * sign * tint_size
    colour = (base + tint).reshape(n, 3, 1, 1)
    x = colour + amplitude * wave.unsqueeze(1)
    x = x + noise * torch.randn(x.shape, generator=g)
    return x.clamp(0.0, 1.0).to(device), y.to(device)


def tiny_cnn(n_classes: int = 4, seed: int = 0) -> nn.Module:
    """Two 3x3 conv layers (8, 16 channels) with max-pooling, then a linear layer."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 8 * 8, n_classes),
    )


def train_tiny_cnn(n_train: int = 512, steps: int = 300, seed: int = 0,
                   device: str | torch.device = "cpu") -> nn.Module:
    """Train :func:`tiny_cnn` on :func:`stripes_dataset` (Adam, batch 64); eval mode."""
    x, y = stripes_dataset(n_train, seed=seed + 1000, device=device)
    model = tiny_cnn(seed=seed).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        idx = torch.randint(0, n_train, (64,), generator=g).to(device)
        loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


class RandomTrunk(nn.Module):
    """A fixed random two-layer conv trunk returning two feature maps: a stand-in feature
    network for the LPIPS threat in tests and examples (not a perceptual metric)."""

    def __init__(self, seed: int = 3) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.b = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(0.3 * torch.randn(p.shape, generator=g))

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        f1 = torch.relu(self.a(x))
        return [f1, torch.relu(self.b(f1))]
