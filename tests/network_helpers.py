"""Small random ReLU networks shared by the bound propagation and branch and bound tests."""

from __future__ import annotations

import torch
from torch import nn


def random_mlp(seed: int, d: int, widths: tuple[int, ...], k: int) -> nn.Module:
    """``Sequential(Linear, ReLU, ..., Linear)``: ``d`` inputs, hidden ``widths``, ``k``
    classes, weights from torch's default initialisation under ``seed`` (float32, eval)."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for w_in, w_out in zip((d, *widths), widths, strict=False):
        layers += [nn.Linear(w_in, w_out), nn.ReLU()]
    layers.append(nn.Linear((d, *widths)[-1], k))
    return nn.Sequential(*layers).eval()


def exact_cases(threat, seeds):
    """``(net, x, y, exact radius)`` per seed: a float64 random ReLU network on 4 inputs
    (widths cycling through (8,), (6, 6), (10,)), 3 points drawn from one generator, their
    classes, and the closed radii of the exact network MILP over the box [0, 1] (only the
    points where it closed)."""
    import numpy as np

    from robustscope import FeatureSpace
    from robustscope.solvers.exact.relu.milp import exact_relu_radius, relu_layers

    rng = np.random.default_rng(3)
    space = FeatureSpace.box(4)
    for seed in seeds:
        net = random_mlp(seed, 4, ((8,), (6, 6), (10,))[seed % 3], 3).double()
        x = torch.as_tensor(rng.uniform(0.2, 0.8, (3, 4)))
        with torch.no_grad():
            y = net(x).argmax(1)
        exact = exact_relu_radius(relu_layers(net), x.numpy(), y.numpy(), np.full(3, np.inf),
                                  space, threat, time_limit=20)
        ok = exact.closed & exact.found
        if ok.any():
            yield seed, net, x[ok], y[ok], exact.radius[ok]
