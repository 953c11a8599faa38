"""ResNet-18 for 3 x 32 x 32 images: the network MultiRobustBench's CIFAR-10 models use.

torchvision's ResNet-18 (He et al., 2016: BasicBlocks of two 3 x 3 convolutions, [2, 2, 2, 2]
blocks with 64, 128, 256, 512 channels, strides 1, 2, 2, 2) adapted to 32 x 32 inputs as the
CIFAR models are: the 7 x 7 stride-2 stem and its max-pool become one 3 x 3 stride-1
convolution. 11,173,962 parameters for 10 classes. Written here (no torchvision) so that the
cost benchmark and the GPU check can build it on any machine; weights are random unless the
caller trains or loads them. Logits ``(n, num_classes)`` of images ``(n, 3, 32, 32)`` in
[0, 1] (no normalisation layer: add one in front if the weights expect it).
"""

from __future__ import annotations

import torch
from torch import nn


class BasicBlock(nn.Module):
    """Two 3 x 3 convolutions with batch norm, plus the (projected) input."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    """ResNet-18 for 32 x 32 inputs (see the module docstring)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 3) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 64, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers.append(nn.Sequential(BasicBlock(cin, cout, stride),
                                        BasicBlock(cout, cout, 1)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.linear = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        out = torch.flatten(nn.functional.adaptive_avg_pool2d(out, 1), 1)
        return self.linear(out)


def resnet18(num_classes: int = 10, seed: int = 0) -> ResNet18:
    """A ResNet-18 for 3 x 32 x 32 images with weights drawn from ``seed`` (torch's default
    initialisation), in eval mode (batch norm uses its running statistics)."""
    gen_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        net = ResNet18(num_classes)
    finally:
        torch.random.set_rng_state(gen_state)
    return net.eval()


__all__ = ["BasicBlock", "ResNet18", "resnet18"]
