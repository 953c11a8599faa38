"""The zoo's network shapes: ReLU MLPs, plain and BatchNorm CNNs, a small residual network,
and the final logit-scaling wrapper."""

from __future__ import annotations

import torch
from torch import nn


def mlp(d_in: int, width: int, depth: int, n_classes: int = 10) -> nn.Sequential:
    """``depth`` hidden ReLU layers of ``width`` units on flat inputs."""
    layers: list[nn.Module] = []
    for i in range(depth):
        layers += [nn.Linear(d_in if i == 0 else width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, n_classes))


def cnn(channels: tuple[int, ...], hidden: int, bn: bool = False, in_ch: int = 1,
        side: int = 28, n_classes: int = 10) -> nn.Sequential:
    """4x4 stride-2 convolutions (each halving the side), optional BatchNorm after each,
    ReLU, then one hidden dense layer."""
    layers: list[nn.Module] = []
    c_in = in_ch
    for c in channels:
        layers.append(nn.Conv2d(c_in, c, 4, stride=2, padding=1))
        if bn:
            layers.append(nn.BatchNorm2d(c))
        layers.append(nn.ReLU())
        c_in, side = c, side // 2
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(c_in * side * side, hidden),
                         nn.ReLU(), nn.Linear(hidden, n_classes))


class Block(nn.Module):
    """A ResNet basic block (two 3x3 conv + BatchNorm, identity or 1x1 projection shortcut)."""

    def __init__(self, c_in: int, c_out: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.relu = nn.ReLU()
        self.short = nn.Identity() if stride == 1 and c_in == c_out else nn.Sequential(
            nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        return self.relu(out + self.short(x))


def resnet(width: int, n_classes: int = 10) -> nn.Sequential:
    """Stem conv (stride 2, 3x32x32 -> width x16x16), a block at ``width``, a stride-2 block
    at ``2 * width`` (8x8), global average pooling, a linear head."""
    return nn.Sequential(
        nn.Conv2d(3, width, 3, 2, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
        Block(width, width), Block(width, 2 * width, stride=2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * width, n_classes))


class Scaled(nn.Module):
    """``net``'s logits times ``scale``: the same decision function, other gradients."""

    def __init__(self, net: nn.Module, scale: float) -> None:
        super().__init__()
        self.net = net
        self.scale = float(scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x) * self.scale


def build(arch: str, **kw) -> nn.Module:
    return {"mlp": mlp, "cnn": cnn, "resnet": resnet}[arch](**kw)


def n_params(net: nn.Module) -> int:
    return sum(p.numel() for p in net.parameters())
