"""Snow, fog and Gabor (#45): strength semantics, parameter sets, closed forms, seeds."""

from __future__ import annotations

import pytest
import torch

from robustscope.core.errors import InputError
from robustscope.models.toy import stripes_dataset
from robustscope.threats.registry import get_image_threat
from robustscope.threats.unforeseen import (
    PIXEL_SCALE,
    FogThreat,
    GaborThreat,
    SnowThreat,
    diamond_square,
)

NAMES = ["snow", "fog", "gabor"]


@pytest.fixture(scope="module")
def images():
    x, _ = stripes_dataset(4, size=16, seed=3)
    return x.double()


def _params_at(th, x, eps, seed=0):
    g = torch.Generator().manual_seed(seed)
    return th.random_params(x, torch.full((len(x),), eps, dtype=x.dtype), g)


@pytest.mark.parametrize("name", NAMES)
def test_perturbation_grows_with_strength(name, images):
    th = get_image_threat(name)
    grid = th.default_grid
    p = _params_at(th, images, float(grid[-1]))
    sizes = []
    for eps in grid:
        q = p.clone()
        q[:, 0] = float(eps)  # the same field at every strength of the grid
        assert torch.allclose(th.strength(images, q), torch.full((len(images),), float(eps),
                                                                 dtype=q.dtype), rtol=1e-6)
        sizes.append(float((th.apply(images, q) - images).abs().mean()))
    assert all(b >= a - 1e-12 for a, b in zip(sizes, sizes[1:], strict=False))
    # snow's discolouring is the same at every grid strength; the flakes scale with it
    assert sizes[-1] > (1.5 if name == "snow" else 3) * sizes[0] > 0
    if name == "snow":
        first, last = p.clone(), p.clone()
        first[:, 0], last[:, 0] = float(grid[0]), float(grid[-1])
        torch.testing.assert_close(th.snow(last, 16, 16)[0], 20 * th.snow(first, 16, 16)[0])


@pytest.mark.parametrize("name", NAMES)
def test_parameters_stay_in_their_sets(name, images):
    th = get_image_threat(name)
    g = torch.Generator().manual_seed(5)
    eps = torch.as_tensor(th.default_grid[[0, 7, 13, 19]], dtype=images.dtype)
    wild = 10 * torch.randn((len(images), *th.param_shape(images)), generator=g,
                            dtype=images.dtype)
    q = th.project(images, wild, eps)
    s, field = q[:, 0], q[:, 1:]
    assert (s >= 0).all() and (s <= eps).all()
    assert (field >= th.field_low).all() and (field <= th.field_high).all()
    if name == "snow":
        inten = th.intensities(field, 16, 16)
        assert (inten.mean(dim=(2, 3)) <= th.budget * (1 + 1e-12)).all()
    if name == "gabor":
        off = th.support(16, 16) == 0
        assert (field[:, off] == 0).all() and off.any()
    # a step and its projection stay in the set too, and set the scale to eps
    grad = torch.randn(q.shape, generator=g, dtype=q.dtype)
    stepped = th.project(images, th.step(images, q, grad, eps, 2.5 * eps / 20), eps)
    assert torch.equal(stepped[:, 0], eps)
    assert th.within(images, stepped, eps).all()


def test_snow_strength_is_the_smallest_scale_holding_the_flakes(images):
    th = SnowThreat()
    n = len(images)
    k = th.field_size(16, 16)
    inten = torch.zeros((n, k), dtype=images.dtype)
    inten[:, 0] = 1.0  # one flake at full intensity: strength = s
    inten[1, 0] = 0.5  # at half intensity: amplitude s / 16
    inten[2, :] = 0.1  # dense and weak: mean 0.1 / budget 0.2 -> (1/2)^4 ... max 0.1
    inten[3, :16] = 0.2  # layout 0 at mean 0.2 = budget, max 0.2 -> (1)^4
    s = torch.tensor([0.08, 0.08, 0.08, 0.08], dtype=images.dtype)
    q = torch.cat([s[:, None], inten], dim=1)
    expected = torch.tensor([0.08, 0.08 / 16, 0.08 * 0.5 ** 4, 0.08], dtype=images.dtype)
    torch.testing.assert_close(th.strength(images, q), expected)
    # within at the strength, not below it (the gauge is tight)
    assert th.within(images, q, expected).all()
    assert not th.within(images, q, expected * 0.99).any()


def test_snow_at_a_grid_strength_is_the_benchmark_formula(images):
    th = SnowThreat()
    p = _params_at(th, images, 0.05, seed=2)
    snow, top = th.snow(p, 16, 16)
    assert (top >= th.ramp).all()  # full discolouring, as the benchmark at any strength
    x = images
    lum = 0.2126 * x[:, 0:1] + 0.7152 * x[:, 1:2] + 0.0722 * x[:, 2:3]
    ref = 0.75 * x + 0.25 * torch.maximum(x, 1.5 * lum + 0.5) + snow
    torch.testing.assert_close(th.apply(x, p), ref.clamp(0, 1))
    # every flake is one of the 7 fixed kernels, scaled: the snow is >= 0 and not flat
    assert (snow >= 0).all() and snow.std() > 0


def test_fog_with_flat_offsets_is_the_blend_closed_form(images):
    th = FogThreat()
    k = th.field_size(16, 16)
    s = 30.0
    q = torch.cat([torch.full((len(images), 1), s, dtype=images.dtype),
                   torch.full((len(images), k), 0.5, dtype=images.dtype)], dim=1)
    # offsets (2 v - 1) * wibble are all 0: the map is flat, the fog 0 after normalisation
    e = s / PIXEL_SCALE
    x_max = images.amax(dim=(2, 3), keepdim=True)
    torch.testing.assert_close(th.apply(images, q), images * x_max / (x_max + e))
    # with any offsets the result never exceeds each channel's maximum
    p = _params_at(th, images, 50.0)
    assert (th.apply(images, p) <= x_max + 1e-12).all()
    assert (th.fog(p, 16, 16).amax(dim=(1, 2, 3)) <= 1).all()


def test_diamond_square_closed_form():
    # size 2: one level, three offsets: the centre, then the two diamond points
    v = torch.tensor([[1.0, 0.5, 0.25]], dtype=torch.float64)
    m = diamond_square(v, 2, wibble=100.0)
    torch.testing.assert_close(m, torch.tensor([[[0.0, 50.0], [50.0, 100.0]]],
                                               dtype=torch.float64) +
                               torch.tensor([[[0.0, 0.0], [-50.0, 0.0]]], dtype=torch.float64))
    # gradients reach every offset of every level
    v = torch.rand(2, 63, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(diamond_square(v, 8).sum(), v)
    assert (g != 0).all()


def test_gabor_moves_each_pixel_by_at_most_its_strength(images):
    th = GaborThreat()
    p = _params_at(th, images, 10.0, seed=4)
    delta = th.apply(images, p) - images
    assert (delta >= -1e-12).all() and (delta <= 10.0 / PIXEL_SCALE + 1e-12).all()
    noise = th.noise(p, 16, 16)
    assert noise.min() >= 0 and noise.max() <= 1 + 1e-12


@pytest.mark.parametrize("cls", [SnowThreat, FogThreat, GaborThreat])
def test_seeded_and_independent_of_the_batch(cls, images):
    a, b, c = cls(seed=1), cls(seed=1), cls(seed=2)
    x = images.float()
    p = _params_at(a, x, 0.05 if cls is SnowThreat else 5.0, seed=9)
    torch.testing.assert_close(a.apply(x, p), b.apply(x, p))
    torch.testing.assert_close(a.zero_params(x), b.zero_params(x))
    # another seed: other kernels / support (snow, Gabor), another start (fog, Gabor)
    if cls is FogThreat:
        assert not torch.allclose(a.zero_params(x), c.zero_params(x))
    else:
        assert not torch.allclose(a.apply(x, p), c.apply(x, p))
    # an image gets the same perturbation alone as in a batch
    alone = torch.cat([a.apply(x[i:i + 1], p[i:i + 1]) for i in range(len(x))])
    torch.testing.assert_close(alone, a.apply(x, p), atol=1e-6, rtol=1e-5)


def test_bad_options_are_input_errors():
    with pytest.raises(InputError, match="budget"):
        SnowThreat(budget=0)
    with pytest.raises(InputError, match="seed"):
        FogThreat(seed=-1)
    with pytest.raises(InputError, match="kernel_size"):
        GaborThreat(kernel_size=4)
    with pytest.raises(InputError, match="density"):
        GaborThreat(density=2.0)
