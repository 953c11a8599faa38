"""The CIFAR-10-C corruptions (#45 req 2): ranges, seeds, closed forms, accuracies, files."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import typer
from typer.testing import CliRunner

from robustscope.cli.image_grid import register
from robustscope.cli.leaderboard import register as register_leaderboard
from robustscope.core.errors import InputError
from robustscope.models.toy import stripes_dataset, train_tiny_cnn
from robustscope.scores.multiattack import resolve_attacks
from robustscope.search.corruptions import corruption_accuracies
from robustscope.threats.corruptions import (
    CORRUPTIONS,
    available,
    canny,
    corrupt,
    equalize_hist,
    hsv_to_rgb,
    rgb_to_hsv,
)

PRODUCED = [(c, s) for c in CORRUPTIONS for s in range(1, 6) if available(c, s)]


@pytest.fixture(scope="module")
def images():
    x, y = stripes_dataset(3, size=16, seed=2)
    return np.round(x.numpy() * 255) / 255, y.numpy()


def test_produced_set():
    assert len(CORRUPTIONS) == 19
    missing = [(c, s) for c in CORRUPTIONS for s in range(1, 6) if not available(c, s)]
    assert missing == [("frost", s) for s in range(1, 6)]
    with pytest.raises(InputError, match="frost"):
        corrupt(np.zeros((1, 3, 8, 8)), "frost", 1)
    with pytest.raises(InputError, match="not known"):
        corrupt(np.zeros((1, 3, 8, 8)), "rain", 1)
    with pytest.raises(InputError, match="severity"):
        corrupt(np.zeros((1, 3, 8, 8)), "fog", 6)
    with pytest.raises(InputError, match="RGB"):
        corrupt(np.zeros((1, 1, 8, 8)), "fog", 1)


@pytest.mark.parametrize(("name", "severity"), PRODUCED)
def test_range_bits_seed_and_batch_independence(name, severity, images):
    x, _ = images
    out = corrupt(x, name, severity, seed=4)
    assert out.shape == x.shape and out.dtype == np.float32
    assert out.min() >= 0 and out.max() <= 1
    np.testing.assert_allclose(out * 255, np.round(out * 255), atol=1e-4)  # 8-bit levels
    np.testing.assert_array_equal(out, corrupt(x, name, severity, seed=4))
    alone = corrupt(x[1:2], name, severity, seed=4, index=[1])
    np.testing.assert_array_equal(alone[0], out[1])


def test_canny_and_histogram_equalisation_closed_forms():
    step = np.zeros((12, 12), dtype=np.uint8)
    step[:, 6:] = 200
    edges = canny(step, 50, 150)
    # a vertical step: the Sobel peak lies on the two columns beside it; suppression keeps
    # the first (strictly greater than its left, >= its right neighbour)
    assert set(np.flatnonzero(edges.any(axis=0))) == {5}
    assert (edges[:, 5] == 255).all() and edges.sum() == 255 * 12
    assert canny(np.full((8, 8), 90, dtype=np.uint8), 50, 150).max() == 0
    # weak edges survive only when connected to a strong one
    faint = np.zeros((12, 12), dtype=np.uint8)
    faint[:, 6:] = 20  # Sobel 80 > 50 but < 150: no strong pixel, no edge
    assert canny(faint, 50, 150).max() == 0
    two = np.array([[10, 10], [40, 40]], dtype=np.uint8)
    np.testing.assert_array_equal(equalize_hist(two), [[0, 0], [255, 255]])


def test_closed_forms(images):
    x, _ = images
    hwc = x.transpose(0, 2, 3, 1).astype(np.float64)
    np.testing.assert_allclose(hsv_to_rgb(rgb_to_hsv(hwc)), hwc, atol=1e-12)
    # contrast: (x - mean) * c + mean per channel, then 8 bits
    means = x.mean(axis=(2, 3), keepdims=True)
    expect = np.uint8(np.clip((x - means) * 0.15 + means, 0, 1) * 255) / 255
    np.testing.assert_allclose(corrupt(x, "contrast", 5), expect, atol=1e-6)
    # blurs, pixelation and JPEG leave a flat image flat
    flat = np.full((1, 3, 16, 16), 100 / 255)
    for name in ("gaussian_blur", "defocus_blur", "motion_blur", "zoom_blur", "pixelate",
                 "jpeg_compression", "glass_blur"):
        np.testing.assert_allclose(corrupt(flat, name, 3), flat, atol=1.5 / 255, err_msg=name)
    # noise of the stated scale: Gaussian sigma 0.10 at severity 5, impulse 7% of values
    mid = np.full((1, 3, 32, 32), 0.5)
    assert np.std(corrupt(mid, "gaussian_noise", 5) - 0.5) == pytest.approx(0.10, rel=0.1)
    flipped = np.mean(np.abs(corrupt(mid, "impulse_noise", 5) - 0.5) > 0.4)
    assert flipped == pytest.approx(0.07, abs=0.03)


@pytest.mark.parametrize("name", ["gaussian_noise", "shot_noise", "impulse_noise",
                                  "speckle_noise", "gaussian_blur", "defocus_blur",
                                  "zoom_blur", "contrast", "brightness", "pixelate"])
def test_damage_grows_with_severity(name, images):
    x, _ = images
    damage = [np.abs(corrupt(x, name, s) - x).mean() for s in range(1, 6)]
    assert all(b >= a - 2e-3 for a, b in zip(damage, damage[1:], strict=False)), damage
    assert damage[-1] > damage[0]


def test_accuracies_are_the_models_on_the_corrupted_images():
    torch.set_num_threads(1)
    model = train_tiny_cnn(steps=100)
    x, y = stripes_dataset(12, seed=8)
    res = corruption_accuracies(model, x, y, ["gaussian_noise", "spatter"], severities=[2, 5],
                                seed=1, batch_size=5)
    for name in ("gaussian_noise", "spatter"):
        for s in (2, 5):
            with torch.no_grad():
                pred = model(torch.as_tensor(corrupt(x.numpy(), name, s, seed=1))).argmax(1)
            assert res.accuracy(name, s) == pytest.approx((pred == y).float().mean().item())
    # one forward pass per input for the clean images and each (corruption, severity)
    assert (res.passes >= 5).all() and (res.passes <= 6).all()
    doc = res.to_benchmark()
    assert set(doc) == {"NoAttack", "gaussian_noise", "spatter"}
    assert set(doc["spatter"]) == {"2", "5"}
    with pytest.raises(InputError, match="frost"):
        corruption_accuracies(model, x, y, ["frost"])


def test_unforeseen_group_of_the_leaderboard():
    unforeseen = resolve_attacks(["unforeseen"])
    assert "SnowAttack" in unforeseen and "gaussian_noise" in unforeseen
    assert "AutoLinfAttack" not in unforeseen and len(unforeseen) == 9 + 19
    assert resolve_attacks("corruptions") == tuple(CORRUPTIONS)


def _app():
    app = typer.Typer()
    register(app)
    register_leaderboard(app)
    return app


def test_image_grid_corruptions_feed_the_leaderboard(tmp_path):
    torch.set_num_threads(1)
    net = train_tiny_cnn(steps=100)
    torch.jit.script(net).save(str(tmp_path / "net.pt"))
    x, y = stripes_dataset(4, seed=5)
    np.savez(tmp_path / "data.npz", X=x.numpy(), y=y.numpy())
    out = tmp_path / "acc.json"
    res = CliRunner().invoke(_app(), [
        "image-grid", "--model", str(tmp_path / "net.pt"), "--data",
        str(tmp_path / "data.npz"), "--out", str(out), "--threats", "corruptions,snow"])
    assert res.exit_code == 0, res.output
    acc = json.loads(out.read_text())
    assert "frost" not in acc and set(acc["spatter"]) == {"1", "2", "3", "4", "5"}
    assert set(acc["gaussian_noise"]) == {"1", "2", "3", "4", "5"}
    assert "SnowAttack" in acc and "snow" in acc  # the threat and the corruption apart
    assert "frost is not produced" in res.output
    res = CliRunner().invoke(_app(), ["leaderboard", "--accuracies", str(out), "--attacks",
                                      "corruptions", "--allow-missing", "--json"])
    assert res.exit_code == 0, res.output
    row = json.loads(res.stdout)[0]
    assert row["CR_ind_avg"] > 0
