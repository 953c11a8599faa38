"""benchmarks/zoo/peers.py: the APGD bisection's plan fits its budget, its passes are the
rows the network computed, and a peer's counterexample counts only where the network, called
again, disagrees with the label inside the box. The APGD test needs torchattacks (a benchmark
peer, not a dependency of robustscope) and is skipped without it."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from zoo import peers as P  # noqa: E402


def tiny_case(d: int = 8, n: int = 6, seed: int = 0) -> SimpleNamespace:
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(d, 16), nn.ReLU(), nn.Linear(16, 3)).eval()
    for p in net.parameters():
        p.requires_grad_(False)
    X = np.random.default_rng(seed).uniform(0.2, 0.8, (n, d)).astype(np.float32)
    with torch.no_grad():
        y = net(torch.as_tensor(X)).argmax(1).numpy()
    return SimpleNamespace(module=net, torch_model=net, native=net, X=X, y=y, n_classes=3,
                           space=SimpleNamespace(n_features=d))


@pytest.mark.parametrize("budget", [60, 100, 300, 719, 1000, 2000, 5000])
def test_apgd_plan_fits_the_budget(budget):
    steps = P.apgd_steps(budget)
    assert steps >= 1
    assert P.apgd_probes(budget) * (2 * steps + 4) <= budget


def test_verified_radii_counts_only_real_counterexamples():
    case = tiny_case()
    X, y = case.X[:4].astype(np.float64), case.y[:4]
    # a point of another class: walk along a line until the label changes
    far = np.zeros(X.shape[1])
    with torch.no_grad():
        for t in np.linspace(0, 1, 201):
            z = (1 - t) * X[0] + t * far
            if case.module(torch.as_tensor(z[None], dtype=torch.float32)).argmax(1) != y[0]:
                break
    assert not np.allclose(z, X[0])
    xa = np.stack([z, X[1], X[2] + 2.0, np.full_like(X[3], np.nan)])
    r = P.verified_radii(case, X, y, xa, "l2")
    assert r[0] == pytest.approx(np.linalg.norm(z - X[0]))
    assert np.isinf(r[1:]).all()          # same label; outside the box; not a number


def test_apgd_bisection_respects_budget_and_counts_passes():
    pytest.importorskip("torchattacks")
    case = tiny_case()
    ctx = P.BC.Context(case, torch.device("cpu"))
    for threat in ("linf", "l2"):
        run, params = P.run_apgd(ctx, threat, case.X, case.y, 100)
        assert (run.queries <= 100).all() and (run.queries > 0).all()
        assert (run.queries % (2 * P.apgd_steps(100) + 4) == 0).all()
        found = np.isfinite(run.radius)
        assert found.any()
        r = P.verified_radii(case, case.X, case.y, run.x_adv, threat)
        np.testing.assert_allclose(r[found], run.radius[found], rtol=1e-6)
