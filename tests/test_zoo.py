"""benchmarks/zoo: the registry (unique names, a disjoint split balanced across families,
training types and logit scales), recipe hashes, the IBP bounds, the PGD verifier, and the
ONNX export of tiny networks. No zoo network is trained here: one tiny recipe is built into a
temporary cache."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from zoo import architectures as A  # noqa: E402
from zoo import ibp  # noqa: E402
from zoo import networks as Z  # noqa: E402
from zoo.pgd import Verifier, pgd_radius  # noqa: E402

TINY = Z.Recipe("tiny-digits-mlp", "tune", "mlp-digits", "digits", "mlp",
                (("d_in", 64), ("depth", 1), ("width", 16)), "natural", epochs=3, lr=3e-3)


def test_names_unique_and_enough():
    all_names = Z.names()
    assert len(all_names) == len(set(all_names)) == len(Z.REGISTRY) >= 12
    assert all(Z.REGISTRY[n].name == n for n in all_names)


def test_split_disjoint_and_complete():
    tune, held = set(Z.names("tune")), set(Z.names("held_out"))
    assert tune and held and not tune & held
    assert tune | held == set(Z.names())
    with pytest.raises(ValueError):
        Z.names("test")


@pytest.mark.parametrize("attribute", ["family", "training", "scale"])
def test_split_balanced(attribute):
    """Every family, training type and logit scale has members in both halves."""
    values = {getattr(r, attribute) for r in Z.REGISTRY.values()}
    for v in values:
        splits = {r.split for r in Z.REGISTRY.values() if getattr(r, attribute) == v}
        assert splits == set(Z.SPLITS), f"{attribute}={v} only in {splits}"
    if attribute == "scale":
        assert {0.01, 100.0} <= values
    if attribute == "training":
        assert set(Z.TRAININGS) <= values
    if attribute == "family":
        assert set(Z.FAMILIES) <= values


def test_scaled_networks_stay_in_their_base_half():
    """A logit-scaled network has its base's decision function: it must not cross halves."""
    for r in Z.REGISTRY.values():
        if r.base:
            assert Z.REGISTRY[r.base].split == r.split
            assert r.scale != 1.0


def test_recipe_hash_tracks_the_recipe():
    r = Z.REGISTRY["mnist-mlp-256x2"]
    h = Z.recipe_hash(r)
    assert len(h) == 12 and Z.recipe_hash(r) == h
    for change in ({"epochs": r.epochs + 1}, {"lr": r.lr * 2}, {"seed": 1},
                   {"training": "pgd", "eps": 0.1},
                   {"arch_kw": (("d_in", 784), ("depth", 3), ("width", 256))}):
        assert Z.recipe_hash(dataclasses.replace(r, **change)) != h, change
    assert Z.recipe_hash(dataclasses.replace(r, split="held_out")) == h   # split is no recipe
    # a scaled network's hash follows its base's recipe
    s = Z.REGISTRY["mnist-mlp-256x6-x100"]
    reg = dict(Z.REGISTRY)
    reg[s.base] = dataclasses.replace(reg[s.base], epochs=99)
    assert Z.recipe_hash(s, reg) != Z.recipe_hash(s)
    assert Z.recipe_hash(dataclasses.replace(s, scale=0.01)) != Z.recipe_hash(s)


def test_every_recipe_makes_a_network():
    for name, r in Z.REGISTRY.items():
        net = Z.make(r)
        x = torch.zeros(2, *Z.input_shape(r))
        assert net.eval()(x).shape == (2, 10), name


@pytest.mark.parametrize("net, shape", [
    (A.mlp(64, 16, 2), (64,)),
    (A.Scaled(A.cnn((4, 8), 16, bn=True), 100.0), (1, 28, 28)),
    (A.resnet(2), (3, 32, 32)),
])
def test_onnx_export_matches_torch(tmp_path, net, shape):
    torch.manual_seed(0)
    net = net.eval()
    path = tmp_path / "net.onnx"
    Z.export_onnx(net, shape, path)
    X = np.random.default_rng(0).uniform(0, 1, (16, *shape)).astype(np.float32)
    diff, rel = Z.onnx_difference(net, path, X)
    assert rel < 1e-5
    if not isinstance(net, A.Scaled):
        assert diff < 1e-5


def test_tiny_build_is_cached(tmp_path, monkeypatch):
    """Build one tiny recipe into a temporary cache: it loads as a case with correctly
    classified inputs and a checked export, and a second load trains nothing."""
    monkeypatch.setattr(Z, "CACHE", tmp_path)
    monkeypatch.setitem(Z.REGISTRY, TINY.name, TINY)
    calls = []
    real = Z.train
    monkeypatch.setattr(Z, "train", lambda r: calls.append(r.name) or real(r))
    case = Z.load(TINY.name, n=8)
    assert calls == [TINY.name]
    assert case.accuracy > 0.5 and case.split == "tune" and case.n_classes == 10
    assert case.X.shape == (8, 64) and (case.predict(case.X) == case.y).all()
    assert case.onnx_max_abs_diff < 1e-5 and case.onnx_path.exists()
    again = Z.load(TINY.name, n=8)
    assert calls == [TINY.name]
    assert np.array_equal(again.X, case.X)
    for a, b in zip(again.module.parameters(), case.module.parameters(), strict=True):
        assert torch.equal(a, b)


def test_ibp_bounds_hold_on_samples():
    torch.manual_seed(0)
    net = A.cnn((3,), 8, side=8).eval()
    x = torch.rand(4, 1, 8, 8)
    y = torch.tensor([0, 1, 2, 3])
    eps = 0.05
    with torch.no_grad():
        lower = ibp.margin_lower(net, x, y, eps)
        for _ in range(20):
            xs = (x + (torch.rand_like(x) * 2 - 1) * eps).clamp(0, 1)
            z = net(xs)
            m = z.gather(1, y[:, None]) - z
            assert (m >= lower - 1e-5).all()
    assert (lower.gather(1, y[:, None]) == 0).all()


def test_pgd_verifier_and_radius():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(2, 2)).eval()
    with torch.no_grad():                                 # class 0 iff x0 > 0.5
        net[0].weight.copy_(torch.tensor([[1.0, 0.0], [-1.0, 0.0]]))
        net[0].bias.copy_(torch.tensor([-0.5, 0.5]))
    X = np.array([[0.7, 0.5], [0.9, 0.1]], dtype=np.float32)
    y = np.array([0, 0])
    verify = Verifier(net)
    assert np.isinf(verify(X, X, y, "linf")).all()         # not counterexamples
    r, passes = pgd_radius(net, X, y, "linf")
    assert np.allclose(r, [0.2, 0.4], rtol=1e-2) and (r >= [0.2, 0.4]).all()
    assert (passes > 0).all()
