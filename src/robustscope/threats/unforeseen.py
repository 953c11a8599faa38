"""Snow, fog and Gabor: the procedural threats of "Testing Robustness Against Unforeseen
Adversaries" (Kang, Sun, Hendrycks, Steinhardt; Kaufmann et al.), as MultiRobustBench runs
them (its ``SnowAttack``, ``FogAttack`` and ``GaborAttack`` call the paper's code through
perceptual-advex's ``UARAttack`` on CIFAR-10, images handed over in 0..255 pixels).

Each threat renders a structured perturbation from optimised parameters and a scale; the
strength is the scale, in the units of the benchmark's grid:

- :class:`SnowThreat` (grid 0.005 .. 0.1, image units [0, 1]): 7 snowflake layouts on a
  4-pixel lattice, each with its own fixed flake kernel (a blurred anti-aliased line segment
  through the kernel's centre, 13 x 13), flake amplitudes ``a = s · I^4`` with per-flake
  intensities ``I in [0, 1]`` whose mean per layout is at most ``budget`` (0.2, the paper's
  rate of flakes). The image is discoloured towards grey-white
  (``(1 - d) x + d max(x, 1.5 lum(x) + 0.5)``, ``d = 0.25``) and the rendered snow
  ``conv(flake grid, kernels)`` is added, clipped to [0, 1]. The strength is the smallest
  scale whose set holds the amplitudes: ``max(max a, (mean a^(1/4) / budget)^4)`` over the
  layouts (= ``s`` when ``I`` is feasible, at most ``s`` always).
- :class:`FogThreat` (grid 2.5 .. 50, in 0..255 pixel units): a fractal fog map from the
  diamond-square algorithm whose offsets at each of its levels are optimised
  (``(2 v - 1) · wibble``, ``v in [0, 1]``, ``wibble`` halved per level), normalised to
  [0, 1] per image and cropped to the image, blended as
  ``(x + e · fog) · x_max / (x_max + e)`` with ``e = s / 255`` and ``x_max`` each channel's
  maximum. The strength is ``s``.
- :class:`GaborThreat` (grid 0.5 .. 10, in 0..255 pixel units): sparse coefficients
  (``c in [-1, 1]`` on a fixed random support of density 1/14) convolved with a fixed
  multi-orientation Gabor kernel (23 x 23), spectrally flattened and normalised to [0, 1]
  (the paper's ``normalize_var``), added as ``x + (s / 255) · noise``, clipped. The strength
  is ``s``; the change of every pixel is at most ``s / 255``.

Where this differs from the benchmark's code, on purpose:

- strength 0 is the identity, as for every threat here. The reference discolours the image
  for snow at any strength and divides by ``x_max + e`` (a contrast stretch when
  ``x_max < 1``) for fog. Here the snow discolouring fades in linearly with the largest flake
  amplitude up to ``ramp`` (0.005, the grid's first level), so that at every strength of the
  grid the images are the benchmark's; the fog blend multiplies by ``x_max``
  (the same as the reference where a channel reaches 1, as in most CIFAR-10 images).
- kernels, the Gabor support and the starting points are drawn once from ``seed`` (the
  reference draws new ones each call, from the global random state), so that one input gets
  the same threat in every batch and every run.
- the fog map is normalised per image (the reference normalises over the whole batch, so an
  image's fog depended on its neighbours in the batch) and uses the standard diamond step
  (neighbours one cell away; the reference's ``roll(·, 2)`` reaches two cells away).
- the Gabor coefficients live on the random support (the reference's mask is inverted:
  after its first step the coefficients are free everywhere but on the support).
- the reference's ``normalize_var`` takes ``irfft(rfft(v))``, which is ``v``; it is computed
  directly.

Parameters are one flat vector per input: the scale ``s`` first, then the threat's field
(snow intensities ``(7, ceil(H/4), ceil(W/4))``, fog offsets per level, Gabor coefficients
``(H, W)``). ``zero_params`` has ``s = 0`` (the identity) and a feasible field; every step
sets ``s = eps`` (the benchmark fixes the scale at ``eps``; the gradient with respect to the
field is zero while ``s = 0``) and moves the field by sign steps relative to its range.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from robustscope.core.errors import InputError
from robustscope.threats.image import ImageThreat
from robustscope.threats.tensors import per_input

#: Pixel units of the fog and Gabor grids (the benchmark hands the paper's code 0..255).
PIXEL_SCALE = 255.0


def _check_seed(seed: int) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"seed must be an integer >= 0, got {seed!r}")
    return int(seed)


class _ScaledField(ImageThreat):
    """Shared geometry: ``params = [s, field...]``, ``0 <= s <= eps``, the field in a box.

    Subclasses set ``field_low`` / ``field_high`` and implement :meth:`field_size`,
    :meth:`apply`, :meth:`default_field`; :meth:`project_field` adds constraints beyond the
    box."""

    field_low: float = 0.0
    field_high: float = 1.0
    random_start = True

    def __init__(self, seed: int = 0) -> None:
        self.seed = _check_seed(seed)
        self._cache: dict[tuple, torch.Tensor] = {}

    # -- layout ---------------------------------------------------------------------------
    def field_size(self, h: int, w: int) -> int:
        raise NotImplementedError

    def param_shape(self, x):
        return (1 + self.field_size(x.shape[2], x.shape[3]),)

    def split(self, params: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(s (n,), field (n, K))`` of parameters ``(n, 1 + K)``."""
        return params[:, 0], params[:, 1:]

    def cached(self, key: tuple, make, device, dtype) -> torch.Tensor:
        """A constant tensor built once on the CPU by ``make()`` and kept per device and
        dtype (so that no step creates a tensor on the host)."""
        full = (*key, str(device), dtype)
        if full not in self._cache:
            self._cache[full] = make().to(device=device, dtype=dtype)
        return self._cache[full]

    def default_field(self, h: int, w: int) -> torch.Tensor:
        """The field of :meth:`zero_params` ``(K,)`` (float64, CPU): a feasible start whose
        gradient is not zero once ``s > 0``."""
        raise NotImplementedError

    def project_field(self, field: torch.Tensor, h: int, w: int) -> torch.Tensor:
        """Constraints of the field beyond its box (none by default)."""
        return field

    # -- ImageThreat ------------------------------------------------------------------------
    def strength(self, x, params, x_adv=None):
        return params[:, 0].abs()

    def zero_params(self, x):
        h, w = x.shape[2], x.shape[3]
        field = self.cached(("start", h, w), lambda: self.default_field(h, w), x.device,
                            x.dtype)
        s = torch.zeros((x.shape[0], 1), dtype=x.dtype, device=x.device)
        return torch.cat([s, field.unsqueeze(0).expand(x.shape[0], -1)], dim=1)

    def random_params(self, x, eps, generator):
        n, h, w = x.shape[0], x.shape[2], x.shape[3]
        u = torch.rand((n, self.field_size(h, w)), generator=generator, dtype=x.dtype,
                       device=x.device)
        field = self.random_field(u)
        s = eps.to(device=x.device, dtype=x.dtype).reshape(-1, 1)
        return self.project(x, torch.cat([s, field], dim=1), eps)

    def random_field(self, u: torch.Tensor) -> torch.Tensor:
        """A random field from uniform draws ``u`` (n, K) in [0, 1): uniform in the box."""
        return self.field_low + (self.field_high - self.field_low) * u

    def project(self, x, params, eps):
        s, field = self.split(params)
        e = eps.to(device=params.device, dtype=params.dtype)
        s = torch.minimum(s.clamp_min(0.0), e)
        field = self.project_field(field.clamp(self.field_low, self.field_high),
                                   x.shape[2], x.shape[3])
        return torch.cat([s.unsqueeze(1), field], dim=1)

    def step(self, x, params, grad, eps, size):
        s, field = self.split(params)
        _, gf = self.split(grad)
        e = eps.to(device=params.device, dtype=params.dtype)
        # the field moves by the solver's relative step (size / eps) times its range
        rel = size.to(params.dtype) / e.clamp_min(torch.finfo(params.dtype).tiny)
        span = self.field_high - self.field_low
        s = e.expand_as(s).clone()  # the benchmark fixes the scale at eps
        field = field - per_input(rel * span, field) * torch.sign(gf)
        return torch.cat([s.unsqueeze(1), field], dim=1)


# -- snow ------------------------------------------------------------------------------------
def _flake_kernel(rng: np.random.Generator, size: int, flip: bool) -> np.ndarray:
    """One flake: an anti-aliased line segment through the centre of a ``size x size``
    kernel, of width 1, 3 or 5 (probabilities 0.6, 0.3, 0.1), values in [0, 1], blurred by a
    normalised 3 x 3 Gaussian of standard deviation in [0.41, 0.6]."""
    mid = size // 2
    r1, c1 = rng.integers(mid + 2, size), rng.integers(mid + 2, size)
    width = rng.choice([1, 3, 5], p=[0.6, 0.3, 0.1])
    p0 = np.array([2 * mid - r1, 2 * mid - c1], dtype=float)
    p1 = np.array([r1, c1], dtype=float)
    rr, cc = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
    pts = np.stack([rr, cc], axis=-1).astype(float)
    d = p1 - p0
    t = np.clip(((pts - p0) @ d) / (d @ d), 0.0, 1.0)
    dist = np.linalg.norm(pts - (p0 + t[..., None] * d), axis=-1)
    k = np.clip(1.0 + width / 4.0 - dist, 0.0, 1.0)
    if flip:
        k = k[:, ::-1]
    sigma = rng.uniform(0.41, 0.6)
    g = np.exp(-0.5 * (np.arange(-1, 2) / sigma) ** 2)
    g2 = np.outer(g, g)
    g2 /= g2.sum()
    padded = np.pad(k, 1)
    out = np.zeros_like(k)
    for i in range(3):
        for j in range(3):
            out += g2[i, j] * padded[i:i + size, j:j + size]
    return out


class SnowThreat(_ScaledField):
    """Snow (grid 0.005 .. 0.1, image units): flakes of fixed kernels with optimised
    intensities; see the module docstring. RGB only (the discolouring uses luminance)."""

    channels = 3
    layouts = 7

    def __init__(self, budget: float = 0.2, discolor: float = 0.25, ramp: float = 0.005,
                 kernel_size: int = 13, seed: int = 0) -> None:
        super().__init__(seed)
        if not 0 < budget <= 1:
            raise InputError(f"budget must lie in (0, 1], got {budget}")
        if not 0 <= discolor <= 1:
            raise InputError(f"discolor must lie in [0, 1], got {discolor}")
        if not ramp > 0:
            raise InputError(f"ramp must be > 0, got {ramp}")
        if kernel_size < 5 or kernel_size % 2 == 0:
            raise InputError(f"kernel_size must be an odd integer >= 5, got {kernel_size}")
        self.budget = float(budget)
        self.discolor = float(discolor)
        self.ramp = float(ramp)
        self.kernel_size = int(kernel_size)
        rng = np.random.default_rng(self.seed)
        flip = bool(rng.uniform() < 0.5)
        self.kernels = torch.as_tensor(np.stack(
            [_flake_kernel(rng, self.kernel_size, flip) for _ in range(self.layouts)]))

    @staticmethod
    def grid_shape(h: int, w: int) -> tuple[int, int]:
        """Flakes per layout: one every 4 pixels, ``(ceil(H/4), ceil(W/4))``."""
        return (h + 3) // 4, (w + 3) // 4

    def field_size(self, h, w):
        gh, gw = self.grid_shape(h, w)
        return self.layouts * gh * gw

    def default_field(self, h, w):
        return torch.full((self.field_size(h, w),), self.budget, dtype=torch.float64)

    def random_field(self, u):
        # the paper's start: intensities exp(-u / budget), then scaled into the budget
        return torch.exp(-u / self.budget)

    def intensities(self, field: torch.Tensor, h: int, w: int) -> torch.Tensor:
        gh, gw = self.grid_shape(h, w)
        return field.reshape(field.shape[0], self.layouts, gh, gw)

    def project_field(self, field, h, w):
        inten = self.intensities(field, h, w)
        mean = inten.mean(dim=(2, 3), keepdim=True)
        scale = torch.where(mean > self.budget, self.budget / mean.clamp_min(1e-30),
                            torch.ones_like(mean))
        return (inten * scale).flatten(1)

    def flakes(self, amplitude: torch.Tensor, h: int, w: int) -> torch.Tensor:
        """The flake grid ``(n, 7, H, W)``: layout ``i < 4`` at rows ``0::4``, columns
        ``i::4``; layout ``4 + i`` at rows ``i+1::4``, columns ``0::4``."""
        n = amplitude.shape[0]
        grid = amplitude.new_zeros((n, self.layouts, h, w))
        for i in range(4):
            rows, cols = len(range(0, h, 4)), len(range(i, w, 4))
            grid[:, i, 0::4, i::4] = amplitude[:, i, :rows, :cols]
        for i in range(3):
            rows, cols = len(range(i + 1, h, 4)), len(range(0, w, 4))
            grid[:, 4 + i, i + 1::4, 0::4] = amplitude[:, 4 + i, :rows, :cols]
        return grid

    def snow(self, params: torch.Tensor, h: int, w: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The rendered snow ``(n, 1, H, W)`` and each input's largest flake amplitude."""
        s, field = self.split(params)
        amplitude = per_input(s.abs(), field) * field ** 4
        k = self.cached(("kernels",), lambda: self.kernels, params.device, params.dtype)
        grid = self.flakes(self.intensities(amplitude, h, w), h, w)
        snow = F.conv2d(grid, k.unsqueeze(0), padding=self.kernel_size // 2)
        return snow, amplitude.amax(dim=1)

    def apply(self, x, params):
        h, w = x.shape[2], x.shape[3]
        snow, top = self.snow(params, h, w)
        d = self.discolor * (top / self.ramp).clamp(max=1.0)
        lum = 0.2126 * x[:, 0:1] + 0.7152 * x[:, 1:2] + 0.0722 * x[:, 2:3]
        grey = torch.maximum(x, 1.5 * lum + 0.5)
        out = x + per_input(d, x) * (grey - x) + snow
        return out.clamp(0.0, 1.0)

    def strength(self, x, params, x_adv=None):
        s, field = self.split(params)
        inten = self.intensities(field.abs(), x.shape[2], x.shape[3])
        top = inten.amax(dim=(1, 2, 3))
        mean = inten.mean(dim=(2, 3)).amax(dim=1) / self.budget
        return s.abs() * torch.maximum(top, mean) ** 4


# -- fog -------------------------------------------------------------------------------------
def fog_map_size(h: int, w: int) -> int:
    """Side of the diamond-square map: twice the next power of two of the image's side
    (64 for 32 x 32, as the paper's code)."""
    return 2 ** (math.ceil(math.log2(max(h, w, 2))) + 1)


def diamond_square(v: torch.Tensor, size: int, wibble: float = 100.0,
                   decay: float = 2.0) -> torch.Tensor:
    """Fractal maps ``(n, size, size)`` by the diamond-square algorithm, wrapping around.

    ``v`` (n, size² - 1) holds, level by level (cells ``2^i x 2^i``, i = 0 ..
    log2(size) - 1), three offset fields in [0, 1]: the squares' centres, then the two
    diamond sets; each new point is the mean of its four neighbours plus
    ``(2 v - 1) · wibble``, and ``wibble`` is divided by ``decay`` per level. Differentiable
    in ``v``."""
    n = v.shape[0]
    grid = v.new_zeros((n, size, size))
    step, at, level, amp = size, 0, 0, wibble
    while step >= 2:
        cells = 4 ** level
        parts = [v[:, at + j * cells: at + (j + 1) * cells].reshape(n, 2 ** level, 2 ** level)
                 for j in range(3)]
        at += 3 * cells
        half = step // 2
        corners = grid[:, 0::step, 0::step]
        total = corners + torch.roll(corners, -1, 1)
        total = total + torch.roll(total, -1, 2)
        grid[:, half::step, half::step] = total / 4 + (2 * parts[0] - 1) * amp
        centres = grid[:, half::step, half::step]
        corners = grid[:, 0::step, 0::step]
        # points between corners along a row: centres above and below, corners left and right
        row_pts = centres + torch.roll(centres, 1, 1) + corners + torch.roll(corners, -1, 2)
        grid[:, 0::step, half::step] = row_pts / 4 + (2 * parts[1] - 1) * amp
        # points between corners along a column: centres left and right, corners above, below
        col_pts = centres + torch.roll(centres, 1, 2) + corners + torch.roll(corners, -1, 1)
        grid[:, half::step, 0::step] = col_pts / 4 + (2 * parts[2] - 1) * amp
        step, level, amp = half, level + 1, amp / decay
    return grid


class FogThreat(_ScaledField):
    """Fog (grid 2.5 .. 50, 0..255 pixel units): a diamond-square fog map with optimised
    offsets per level; see the module docstring."""

    def __init__(self, wibble_decay: float = 2.0, seed: int = 0) -> None:
        super().__init__(seed)
        if not wibble_decay > 0:
            raise InputError(f"wibble_decay must be > 0, got {wibble_decay}")
        self.wibble_decay = float(wibble_decay)

    def field_size(self, h, w):
        return fog_map_size(h, w) ** 2 - 1

    def default_field(self, h, w):
        g = torch.Generator().manual_seed(self.seed)
        return torch.rand(self.field_size(h, w), generator=g, dtype=torch.float64)

    def fog(self, params: torch.Tensor, h: int, w: int) -> torch.Tensor:
        """The fog ``(n, 1, H, W)`` in [0, 1] (each map normalised over itself, cropped to
        the image's centre)."""
        size = fog_map_size(h, w)
        _, field = self.split(params)
        maps = diamond_square(field, size, decay=self.wibble_decay)
        flat = maps.flatten(1)
        low = flat.amin(dim=1).reshape(-1, 1, 1)
        span = (flat.amax(dim=1).reshape(-1, 1, 1) - low).clamp_min(1e-12)
        maps = (maps - low) / span
        top, left = (size - h) // 2, (size - w) // 2
        return maps[:, top:top + h, left:left + w].unsqueeze(1)

    def apply(self, x, params):
        e = per_input(params[:, 0].abs() / PIXEL_SCALE, x)
        fog = self.fog(params, x.shape[2], x.shape[3])
        x_max = x.amax(dim=(2, 3), keepdim=True)
        out = (x + e * fog) * x_max / (x_max + e).clamp_min(1e-12)
        return out.clamp(0.0, 1.0)


# -- Gabor -----------------------------------------------------------------------------------
def gabor_kernel(size: int, sigma: float, wavelength: float, theta: float,
                 sides: int) -> torch.Tensor:
    """Sum of ``sides`` Gabor kernels ``(size, size)`` at orientations
    ``theta + pi k / sides`` on the square [-0.5, 0.5]² (the paper's
    ``get_gabor_with_sides``): ``exp(-r² / (2 (sigma + 1e-3)²)) cos(2 pi wavelength x')``."""
    t = torch.linspace(-0.5, 0.5, size, dtype=torch.float64)
    yy, xx = torch.meshgrid(t, t, indexing="ij")
    out = torch.zeros(size, size, dtype=torch.float64)
    for k in range(sides):
        angle = theta + math.pi * k / sides
        rx = xx * math.cos(angle) + yy * math.sin(angle)
        ry = -xx * math.sin(angle) + yy * math.cos(angle)
        env = torch.exp(-0.5 * (rx ** 2 + ry ** 2) / (sigma + 1e-3) ** 2)
        out = out + env * torch.cos(2 * math.pi * wavelength * rx)
    return out


def normalize_var(v: torch.Tensor, floor: float = 1e-3) -> torch.Tensor:
    """The paper's spectral normalisation of Gabor noise ``(n, 1, H, W)``, then scaled to
    [0, 1] per input: ``mean + (v - mean) (1 + floor) / (floor + |v - mean| / max|v - mean|)``
    (mean and gain detached, as in the paper), minus its minimum, over its range (both
    detached)."""
    n = v.shape[0]
    mean = v.flatten(1).mean(dim=1).reshape(n, 1, 1, 1).detach()
    dev = (v - mean).abs()
    rel = dev / dev.flatten(1).amax(dim=1).reshape(n, 1, 1, 1).clamp_min(1e-30)
    gain = ((1 + floor) / (floor + rel)).detach()
    img = mean + (v - mean) * gain
    flat = img.flatten(1).detach()
    low = flat.amin(dim=1).reshape(n, 1, 1, 1)
    span = (flat.amax(dim=1).reshape(n, 1, 1, 1) - low).clamp_min(1e-12)
    return (img - low) / span


class GaborThreat(_ScaledField):
    """Gabor noise (grid 0.5 .. 10, 0..255 pixel units): sparse coefficients convolved with
    a fixed Gabor kernel; see the module docstring."""

    field_low = -1.0
    field_high = 1.0

    def __init__(self, kernel_size: int = 23, density: float = 1 / 14, seed: int = 0) -> None:
        super().__init__(seed)
        if kernel_size < 3 or kernel_size % 2 == 0:
            raise InputError(f"kernel_size must be an odd integer >= 3, got {kernel_size}")
        if not 0 < density <= 1:
            raise InputError(f"density must lie in (0, 1], got {density}")
        self.kernel_size = int(kernel_size)
        self.density = float(density)
        rng = np.random.default_rng(self.seed)
        sides = int(rng.integers(1, 11))
        sigma = 0.1 + 0.3 * rng.uniform()
        wavelength = 3 + (self.kernel_size / 4 - 3) * rng.uniform()
        theta = math.pi * rng.uniform()
        self.kernel = gabor_kernel(self.kernel_size, sigma, wavelength, theta, sides)

    def field_size(self, h, w):
        return h * w

    def support(self, h: int, w: int) -> torch.Tensor:
        """The coefficients' fixed support ``(H * W,)``: 1 on a share ``density`` of the
        positions drawn from the seed (at least one), 0 elsewhere."""
        g = torch.Generator().manual_seed(self.seed + 1)
        u = torch.rand(h * w, generator=g, dtype=torch.float64)
        mask = (u < self.density).to(torch.float64)
        mask[int(torch.argmin(u))] = 1.0
        return mask

    def default_field(self, h, w):
        g = torch.Generator().manual_seed(self.seed)
        u = torch.rand(h * w, generator=g, dtype=torch.float64)
        return (2 * u - 1) * self.support(h, w)

    def project_field(self, field, h, w):
        mask = self.cached(("support", h, w), lambda: self.support(h, w), field.device,
                           field.dtype)
        return field * mask

    def noise(self, params: torch.Tensor, h: int, w: int) -> torch.Tensor:
        """The normalised Gabor noise ``(n, 1, H, W)`` in [0, 1]."""
        _, field = self.split(params)
        mask = self.cached(("support", h, w), lambda: self.support(h, w), params.device,
                           params.dtype)
        k = self.cached(("kernel",), lambda: self.kernel, params.device, params.dtype)
        coeff = (field * mask).reshape(-1, 1, h, w)
        conv = F.conv2d(coeff, k.reshape(1, 1, self.kernel_size, self.kernel_size),
                        padding=self.kernel_size // 2)
        return normalize_var(conv)

    def apply(self, x, params):
        e = per_input(params[:, 0].abs() / PIXEL_SCALE, x)
        return (x + e * self.noise(params, x.shape[2], x.shape[3])).clamp(0.0, 1.0)


__all__ = ["PIXEL_SCALE", "FogThreat", "GaborThreat", "SnowThreat", "diamond_square",
           "fog_map_size", "gabor_kernel", "normalize_var"]
