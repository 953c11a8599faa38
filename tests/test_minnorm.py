"""The Linf / L2 minimum-norm solver (``solvers.minnorm``): its schedule of the strength."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from robustscope import FeatureSpace
from robustscope.core.statement import Statement
from robustscope.models import wrap_model
from robustscope.solvers.attacks.gradient import minnorm as mn
from robustscope.solvers.exact.linear.closed_form import exact_linear_radius
from robustscope.threats.lp import L2, LINF

pytestmark = pytest.mark.usefixtures("one_thread")


def _problem(d: int = 20, k: int = 5, n: int = 40, seed: int = 0):
    torch.manual_seed(seed)
    net = nn.Linear(d, k).double().eval()
    with torch.no_grad():
        net.weight.normal_()
        net.bias.normal_(std=0.3)
    x = torch.as_tensor(np.random.default_rng(seed).uniform(0.2, 0.8, size=(n, d)))
    with torch.no_grad():
        y = net(x).argmax(1)
    clf = wrap_model(net, n_classes=k, input_shape=(d,))
    return net, clf, x, y, FeatureSpace.box(d)


def _run(clf, x, y, space, threat, steps, **kw):
    out = mn.minnorm(clf, x, y, space, threat, None, Statement(),
                     torch.Generator().manual_seed(0), steps=steps, **kw)
    assert out.found.all()
    return out


@pytest.mark.parametrize("steps", [12, 19, 100])
def test_short_runs_start_with_a_larger_change_of_the_strength(steps):
    _, clf, x, y, space = _problem()
    expected = max(mn.GAMMA_START, mn.GAMMA_RANGE / steps)
    assert (expected > mn.GAMMA_START) == (steps < mn.GAMMA_RANGE / mn.GAMMA_START)
    default = _run(clf, x, y, space, LINF, steps)
    explicit = _run(clf, x, y, space, LINF, steps, gamma_start=expected)
    assert torch.equal(default.x_adv, explicit.x_adv)


@pytest.mark.parametrize("threat", [LINF, L2], ids=["linf", "l2"])
def test_a_short_run_comes_closer_to_the_exact_radius_than_with_the_long_runs_start(threat):
    """12 steps: at 0.05 per step the strength cannot come down from a first counterexample
    that overshoots (the first-order jump is stretched by 1.2); the raised start can."""
    net, clf, x, y, space = _problem()
    exact = exact_linear_radius(net.weight.detach().numpy(), net.bias.detach().numpy(),
                                x.numpy(), y.numpy(), space, threat).radius
    gaps = {}
    for name, gamma in (("raised", None), ("long-run", mn.GAMMA_START)):
        out = _run(clf, x, y, space, threat, 12, gamma_start=gamma)
        r = threat.norm(out.x_adv - x).numpy()
        assert np.all(r >= exact * (1 - 1e-9))
        gaps[name] = np.median(r / exact - 1)
    assert gaps["raised"] < 0.5 * gaps["long-run"]
