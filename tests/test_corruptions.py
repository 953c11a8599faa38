"""The CIFAR-10-C corruptions (#45 req 2): ranges, seeds, closed forms, accuracies, files."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

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
    FROST_FILES,
    available,
    canny,
    corrupt,
    equalize_hist,
    frost,
    frost_image,
    hsv_to_rgb,
    rgb_to_hsv,
)

PRODUCED = [(c, s) for c in CORRUPTIONS for s in range(1, 6)]


@pytest.fixture(scope="module")
def images():
    x, y = stripes_dataset(3, size=16, seed=2)
    return np.round(x.numpy() * 255) / 255, y.numpy()


def test_produced_set():
    assert len(CORRUPTIONS) == 19
    assert all(available(c, s) for c, s in PRODUCED)
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
    with pytest.raises(InputError, match="not known"):
        corruption_accuracies(model, x, y, ["rain"])


def test_unforeseen_group_of_the_leaderboard():
    unforeseen = resolve_attacks(["unforeseen"])
    assert "SnowAttack" in unforeseen and "gaussian_noise" in unforeseen
    assert "AutoLinfAttack" not in unforeseen and len(unforeseen) == 9 + 19
    # resolving again keeps the corruptions that share a threat's short name (fog, snow, ...)
    assert resolve_attacks(unforeseen) == unforeseen and "fog" in unforeseen
    assert resolve_attacks(["fog"]) == ("FogAttack",)
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
    for name in CORRUPTIONS:
        assert set(acc[name]) == {"1", "2", "3", "4", "5"}, name
    assert "SnowAttack" in acc and "snow" in acc  # the threat and the corruption apart
    assert "not produced" not in res.output
    # every corruption's points are there: no --allow-missing needed
    res = CliRunner().invoke(_app(), ["leaderboard", "--accuracies", str(out), "--attacks",
                                      "corruptions", "--json"])
    assert res.exit_code == 0, res.output
    row = json.loads(res.stdout)[0]
    assert row["CR_ind_avg"] > 0


# -- frost ----------------------------------------------------------------------------------
WEIGHTS = [(1, 0.2), (1, 0.3), (0.9, 0.4), (0.85, 0.4), (0.75, 0.45)]  # make_cifar_c.py


def test_frost_photographs_are_package_data():
    folder = resources.files("robustscope").joinpath("refdata", "frost")
    for name in (*FROST_FILES, "README.md", "LICENSE"):
        assert folder.joinpath(name).is_file(), name
    assert "Apache License" in folder.joinpath("LICENSE").read_text()
    assert "imagecorruptions 1.1.2" in folder.joinpath("README.md").read_text()
    # an installed package carries them: pyproject's package-data matches every file
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    root = Path(__file__).resolve().parents[1]
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["robustscope"]
    src = root / "src" / "robustscope"
    shipped = {p for g in globs for p in src.glob(g)}
    for name in (*FROST_FILES, "README.md", "LICENSE"):
        assert src / "refdata" / "frost" / name in shipped, name


def test_frost_image_is_opencvs_fifth():
    from PIL import Image

    # cv2.resize(fx=0.2) bilinear: round(size / 5) pixels, pixel i at source 5 i + 2
    sizes = [(120, 180), (63, 112), (63, 112), (70, 105), (99, 132), (65, 97)]
    for k, name in enumerate(FROST_FILES):
        small = frost_image(k)
        assert small.shape == (*sizes[k], 3), name
        with resources.files("robustscope").joinpath("refdata", "frost", name).open("rb") as f:
            full = np.asarray(Image.open(f).convert("RGB"), dtype=np.float64)
        np.testing.assert_array_equal(small, full[2::5, 2::5][:sizes[k][0], :sizes[k][1]])
        assert not small.flags.writeable
    with pytest.raises(InputError, match="frost image index"):
        frost_image(6)


def _crop_of(layer: np.ndarray) -> set[int]:
    """Indices of the shrunk photographs holding ``layer`` ``(h, w, 3)`` as a window."""
    h, w = layer.shape[:2]
    found = set()
    for k in range(len(FROST_FILES)):
        photo = frost_image(k)
        corners = np.argwhere((photo[:-h + 1 or None, :-w + 1 or None] == layer[0, 0]).all(-1))
        if any(np.array_equal(photo[r:r + h, c:c + w], layer) for r, c in corners):
            found.add(k)
    return found


def test_frost_is_the_blend_of_a_crop_of_the_first_five_photographs():
    black = np.zeros((32, 32, 3))
    grey = np.full((32, 32, 3), 0.5)
    drawn = set()
    for seed in range(40):
        layer = np.round(frost(black, 5, np.random.default_rng(seed)) / 0.45 * 255)
        where = _crop_of(layer)
        assert where and where <= {0, 1, 2, 3, 4}, (seed, where)  # frost6 is never drawn
        drawn |= where
        # the same draws at every severity: c0 x + c1 F
        for s, (c0, c1) in enumerate(WEIGHTS, start=1):
            out = frost(grey, s, np.random.default_rng(seed))
            np.testing.assert_allclose(out, c0 * grey + c1 * layer / 255, atol=1e-12)
    assert len(drawn) >= 4


def test_frost_grows_with_severity_and_stays_in_range(images):
    x, _ = images
    hwc = x.transpose(0, 2, 3, 1)
    black = np.zeros((1, 3, 16, 16))
    # on a black image only the frost remains: its weight c1 grows 0.2 .. 0.45
    for i in range(len(hwc)):
        added = [frost(np.zeros((16, 16, 3)), s, np.random.default_rng(i)).mean()
                 for s in range(1, 6)]
        assert all(b >= a for a, b in zip(added, added[1:], strict=False)), added
        assert added[-1] > added[0] * 2
    for s in range(1, 6):
        out = corrupt(x, "frost", s, seed=3)
        assert 0 <= out.min() and out.max() <= 1 and (out != x).any()
        assert corrupt(black, "frost", s).max() > 0
    # severity 1 keeps the image (c0 = 1) and only adds frost: white stays white (clipped)
    white = np.ones((1, 3, 16, 16))
    assert corrupt(white, "frost", 1).min() == 1.0


@pytest.mark.parametrize("shape", [(5, 7), (63, 40), (120, 200), (300, 260)])
def test_frost_on_any_image_size(shape):
    x = np.random.default_rng(0).random((2, 3, *shape))
    out = corrupt(x, "frost", 3, seed=1)
    assert out.shape == x.shape and 0 <= out.min() and out.max() <= 1
    alone = corrupt(x[1:], "frost", 3, seed=1, index=[1])
    np.testing.assert_array_equal(alone[0], out[1])
