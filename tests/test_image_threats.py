"""Image threats: bounds, identity at strength 0, gradients, closed forms, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from robustscope.core.errors import InputError
from robustscope.models.toy import RandomTrunk, stripes_dataset
from robustscope.threats.color import luv_to_rgb, normalize_luv, rgb_to_luv
from robustscope.threats.grids import eps_key
from robustscope.threats.jpeg import (
    CHROMA_TABLE,
    LUMA_TABLE,
    JPEGL1Threat,
    JPEGLinfThreat,
    blocks_dct,
    blocks_idct,
    dct_matrix,
)
from robustscope.threats.registry import THREATS, default_grid, get_image_threat, threat_names

ALL = ["linf", "l2", "l1", "elastic", "stadv", "affine", "perspective", "recolor", "hue",
       "saturation", "brightness", "contrast", "jpeg-linf", "jpeg-l1", "lpips", "snow", "fog",
       "gabor"]


Trunk = RandomTrunk


def make(name: str):
    return get_image_threat(name, features=Trunk()) if name == "lpips" else \
        get_image_threat(name)


@pytest.fixture(scope="module")
def images():
    x, _ = stripes_dataset(6, seed=11)
    return x


def test_registry_lists_every_threat():
    assert set(threat_names()) == set(ALL)
    # benchmark attack names and the brief's "...Attack" spellings are aliases
    assert get_image_threat("ElasticAttack").name == "elastic"
    assert get_image_threat("HueAttack").attack_name == "Hue"
    assert get_image_threat("PerspectiveWarpAttack").attack_name == "PerspectiveWarp"


@pytest.mark.parametrize("name", ALL)
def test_default_grid_is_the_benchmark_grid(name):
    grids = {"linf": 0.005, "l2": 0.125, "l1": 1.5, "elastic": 0.05, "stadv": 0.005,
             "affine": 0.005, "perspective": 0.0001, "recolor": 0.005, "hue": 0.025,
             "saturation": 0.025, "brightness": 0.015, "contrast": 0.025, "jpeg-linf": 0.01,
             "jpeg-l1": 1.0, "lpips": 0.025, "snow": 0.005, "fog": 2.5, "gabor": 0.5}
    g = make(name).default_grid
    assert len(g) == 20
    np.testing.assert_allclose(g, grids[name] * np.arange(1, 21), rtol=1e-9)


@pytest.mark.parametrize("name", ALL)
def test_identity_at_strength_zero(name, images):
    th = make(name)
    out = th.apply(images, th.zero_params(images))
    assert out.shape == images.shape
    assert (out - images).abs().max() < 2e-5
    assert float(th.strength(images, th.zero_params(images)).max()) == pytest.approx(0, abs=1e-6)


@pytest.mark.parametrize("name", ALL)
def test_projection_keeps_the_bound(name, images):
    th = make(name)
    g = torch.Generator().manual_seed(0)
    eps = torch.as_tensor(th.default_grid[[0, 4, 9, 14, 19, 19]], dtype=images.dtype)
    p = th.random_params(images, eps, g)
    assert th.within(images, p, eps).all()
    # a large step away from the set, then the projection
    big = p + 50 * eps.reshape(-1, *([1] * (p.ndim - 1))) * torch.randn(p.shape, generator=g)
    q = th.project(images, big, eps)
    assert th.within(images, q, eps).all()
    s = th.strength(images, q)
    assert (s <= eps * (1 + 1e-4) + 1e-6).all()
    out = th.apply(images, q)
    assert out.min() >= 0 and out.max() <= 1
    # the projection leaves feasible points alone
    torch.testing.assert_close(th.project(images, q, eps), q, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("name", ALL)
def test_gradients_flow_to_input_and_parameters(name, images):
    th = make(name)
    g = torch.Generator().manual_seed(1)
    eps = torch.as_tensor(th.default_grid[[9] * len(images)], dtype=images.dtype)
    x = (0.1 + 0.8 * images).requires_grad_(True)  # away from the clip boundary
    p = th.random_params(x.detach(), eps, g).requires_grad_(True)
    w = torch.randn(x.shape, generator=g)
    (gx, gp) = torch.autograd.grad((th.apply(x, p) * w).sum(), (x, p))
    for grad in (gx, gp):
        assert torch.isfinite(grad).all()
        assert grad.abs().sum() > 0


@pytest.mark.parametrize("name", ALL)
def test_works_on_the_device_of_the_input(name, images):
    """Nothing is created on a hard-coded device: float64 inputs stay float64, and a CUDA
    run (where available) stays on CUDA."""
    th = make(name) if name != "lpips" else get_image_threat("lpips", features=Trunk().double())
    x = images.double()
    eps = torch.full((len(x),), float(th.default_grid[5]), dtype=x.dtype)
    p = th.random_params(x, eps, torch.Generator().manual_seed(0))
    assert p.dtype == torch.float64 and th.apply(x, p).dtype == torch.float64
    if torch.cuda.is_available():  # pragma: no cover - CPU-only machine
        th = make(name) if name != "lpips" else get_image_threat("lpips", features=Trunk().cuda())
        xc = images.cuda()
        pc = th.random_params(xc, eps.float().cuda(), torch.Generator("cuda").manual_seed(0))
        assert th.apply(xc, pc).device.type == "cuda"


# -- closed forms ---------------------------------------------------------------------------
def test_luv_known_values_and_round_trip():
    rgb = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    luv = rgb_to_luv(rgb.double().reshape(4, 3, 1, 1)).reshape(4, 3)
    np.testing.assert_allclose(luv[0].numpy(), [100.0, 0.0, 0.0], atol=0.02)
    np.testing.assert_allclose(luv[1].numpy(), [53.24, 175.01, 37.76], atol=0.1)
    np.testing.assert_allclose(luv[2].numpy(), [32.30, -9.40, -130.34], atol=0.1)
    np.testing.assert_allclose(luv[3].numpy(), [0.0, 0.0, 0.0], atol=1e-9)
    x = torch.rand(4, 3, 8, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    torch.testing.assert_close(luv_to_rgb(rgb_to_luv(x)), x, atol=1e-6, rtol=0)
    z = normalize_luv(rgb_to_luv(x))
    assert z.min() >= 0 and z.max() <= 1


def test_jpeg_dct_is_orthonormal_and_dc_offset_is_flat():
    d = dct_matrix()
    torch.testing.assert_close(d @ d.T, torch.eye(8, dtype=d.dtype))
    table = torch.tensor(LUMA_TABLE, dtype=torch.float64)
    pix = torch.rand(2, 1, 16, 16, generator=torch.Generator().manual_seed(0),
                     dtype=torch.float64)
    torch.testing.assert_close(blocks_idct(blocks_dct(pix, table, d), table, d), pix)
    th = JPEGLinfThreat()
    x = torch.full((1, 3, 16, 16), 0.5, dtype=torch.float64)
    p = th.zero_params(x)
    p[0, 0] = 0.1  # DC of the first luma block, in quantisation steps
    delta = th.apply(x, p) - x
    # DC basis is 1/8 on the block; the luma DC step is 16 (of 255): same change in R, G, B
    expect = 0.1 * 16 / 8 / 255
    torch.testing.assert_close(delta[0, :, :8, :8], torch.full((3, 8, 8), expect,
                                                               dtype=torch.float64))
    assert delta[0, :, 8:, :].abs().max() == 0 and delta[0, :, :, 8:].abs().max() == 0
    assert float(th.strength(x, p)) == pytest.approx(0.2)  # Linf bound is eps / 2
    q = JPEGL1Threat().zero_params(x)
    q[0, 256] = 1.0  # DC of the first Cb block: covers 16x16 pixels after upsampling
    dq = JPEGL1Threat().apply(x, q) - x
    cb = CHROMA_TABLE[0][0] / 8 / 255
    torch.testing.assert_close(dq[0, 2], torch.full((16, 16), 1.772 * cb, dtype=torch.float64))
    torch.testing.assert_close(dq[0, 0], torch.zeros(16, 16, dtype=torch.float64))


def test_elastic_constant_flow_shifts_by_one_pixel(images):
    th = get_image_threat("elastic")
    p = th.zero_params(images)
    p[:, 0] = 1.0  # one pixel to the right, everywhere (smoothing keeps a constant)
    out = th.apply(images, p)
    torch.testing.assert_close(out[..., :-1], images[..., 1:], atol=1e-5, rtol=0)


def test_stadv_penalty_zero_for_constant_flow(images):
    th = get_image_threat("stadv")
    p = th.zero_params(images) + 0.03
    assert th.penalty(p).max() < 1e-3
    q = th.random_params(images, torch.full((len(images),), 0.05), torch.Generator())
    assert (th.penalty(q) > th.penalty(p)).all()


def test_color_transforms_closed_forms(images):
    x = 0.2 + 0.6 * images  # no clipping
    theta = torch.full((len(x), 1), 0.1)
    bright = get_image_threat("brightness").apply(x, theta)
    torch.testing.assert_close(bright, x + 0.1)
    # hue: a full turn is the identity; any rotation keeps the luma
    hue = get_image_threat("hue")
    torch.testing.assert_close(hue.apply(x, torch.full((len(x), 1), 2 * math.pi)), x,
                               atol=1e-5, rtol=0)
    luma = torch.tensor([0.299, 0.587, 0.114]).reshape(1, 3, 1, 1)
    small = hue.apply(x, torch.full((len(x), 1), 0.3))
    torch.testing.assert_close((small * luma).sum(1), (x * luma).sum(1), atol=1e-5, rtol=0)
    # saturation -1 gives the gray image; contrast -1 gives the mean gray everywhere
    gray = get_image_threat("saturation").apply(x, torch.full((len(x), 1), -1.0))
    torch.testing.assert_close(gray[:, 0], gray[:, 2], atol=1e-6, rtol=0)
    flat = get_image_threat("contrast").apply(x, torch.full((len(x), 1), -1.0))
    assert flat.flatten(1).std(dim=1).max() < 1e-5


def test_lpips_distance_and_projection(images):
    th = get_image_threat("lpips", features=Trunk())
    assert th.distance(images, images).abs().max() < 1e-6
    g = torch.Generator().manual_seed(0)
    noise = 0.3 * torch.randn(images.shape, generator=g)
    d = th.distance(images, (images + noise).clamp(0, 1))
    assert (d > 0).all()
    eps = d / 4
    p = th.project(images, noise, eps)
    assert (th.strength(images, p) <= eps).all()
    assert (th.strength(images, p) > eps / 2).all()  # the bisection gets close to the bound


# -- errors ---------------------------------------------------------------------------------
def test_lpips_without_network_is_an_input_error():
    with pytest.raises(InputError, match="feature network"):
        get_image_threat("lpips")
    with pytest.raises(InputError, match="features"):
        get_image_threat("lpips", features=42)


def test_bad_images_are_input_errors(images):
    th = get_image_threat("linf")
    with pytest.raises(InputError, match="shape"):
        th.check_input(images[0])
    with pytest.raises(InputError, match=r"\[0, 1\]"):
        th.check_input(images * 2)
    with pytest.raises(InputError, match="floating"):
        th.check_input((images * 255).to(torch.uint8))
    with pytest.raises(InputError, match="colour channels"):
        get_image_threat("recolor").check_input(images[:, :1])
    with pytest.raises(InputError, match="colour channels"):
        get_image_threat("snow").check_input(images[:, :1])
    with pytest.raises(InputError, match="not known"):
        get_image_threat("jpeg")


def test_built_threats_carry_their_registry_entry():
    for entry in THREATS:
        th = make(entry.name)
        assert (th.name, th.attack_name) == (entry.name, entry.attack_name)
        np.testing.assert_array_equal(th.default_grid, default_grid(entry.name))
        assert [eps_key(e) for e in th.default_grid] == \
            [str(float(round(entry.grid_step * k, 5))) for k in range(1, 21)]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), scale=st.floats(0.01, 10.0),
       name=st.sampled_from(["linf", "l2", "l1", "jpeg-l1", "jpeg-linf", "stadv", "recolor"]))
def test_projection_is_feasible_and_idempotent(seed, scale, name):
    th = get_image_threat(name)
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(2, 3, 16, 16, generator=g, dtype=torch.float64)
    eps = torch.as_tensor(th.default_grid[[3, 17]], dtype=x.dtype)
    p = scale * torch.randn((2, *th.param_shape(x)), generator=g, dtype=x.dtype)
    q = th.project(x, p, eps)
    assert th.within(x, q, eps).all()
    torch.testing.assert_close(th.project(x, q, eps), q, atol=1e-9, rtol=1e-7)
