"""The common corruptions of CIFAR-10-C (Hendrycks & Dietterich, ICLR 2019) at severities 1-5.

They are not adversarial: each corrupts an image once, at random (seeded), and a model is
scored by its accuracy on the corrupted images. MultiRobustBench's accuracy files hold them
under these names with severity keys ``"1"`` .. ``"5"``.

Each function takes one image ``(H, W, 3)`` float64 in [0, 1], a severity in 1..5 and a
``numpy.random.Generator``, and returns the corrupted image in [0, 1]. The parameters per
severity are those of the paper's ``make_cifar_c.py``; the operations are written here with
numpy, scipy and Pillow (the original uses scikit-image, OpenCV and ImageMagick/Wand):

- Gaussian filters are scikit-image's (``mode='nearest'``, truncated at 4 sigma) through
  ``scipy.ndimage``; OpenCV's default border (``BORDER_REFLECT_101``) is scipy's ``mirror``;
  OpenCV's grey is ``0.299 R + 0.587 G + 0.114 B``; HSV is scikit-image's.
- motion blur (ImageMagick's ``MotionBlurImage``) is the one-sided Gaussian along a line of
  ``2 radius + 1`` pixels that the ``imagecorruptions`` package uses in place of Wand.
- glass blur keeps the reference's pixel "swap", which with numpy views copies the
  neighbour's pixel onto the current one (the neighbour keeps its own): the CIFAR-10-C
  images were made that way.
- every result is truncated to 8 bits, as the CIFAR-10-C arrays were saved
  (``np.uint8(...)``), and returned divided by 255.

- spatter's water (severities 1-3) needs OpenCV's Canny edges, distance transform and
  histogram equalisation: they are rewritten after OpenCV's definitions (Canny: 3 x 3 Sobel,
  replicated borders, L1 magnitude, non-maximum suppression in 4 directions, 8-connected
  hysteresis), the distance exactly (OpenCV's 5 x 5 mask approximates it).

- frost blends a crop of one of the reference's photographs of frost, shipped as package
  data (``robustscope/refdata/frost/``, from the ``imagecorruptions`` 1.1.2 wheel,
  Apache-2.0; see its README). OpenCV's ``resize(fx=0.2)`` (bilinear) samples source pixel
  ``5 i + 2`` exactly, so it is that subsampling here; the photographs are decoded by
  Pillow (OpenCV's JPEG decoder may differ from it by a level in a few pixels).

:data:`CORRUPTIONS` lists every name and :func:`available` says which this module makes
(all 19).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from functools import cache
from importlib import resources

import numpy as np
from scipy import ndimage

from robustscope.core.errors import InputError

SEVERITIES: tuple[int, ...] = (1, 2, 3, 4, 5)


def _gauss(x: np.ndarray, sigma: float, mode: str = "nearest", truncate: float = 4.0,
           channels: bool = True) -> np.ndarray:
    """scikit-image's ``gaussian`` (per channel where ``channels``)."""
    if sigma == 0:
        return x.copy()
    s = (sigma, sigma, 0) if channels and x.ndim == 3 else sigma
    return ndimage.gaussian_filter(x, s, mode=mode, truncate=truncate)


def _grey(x: np.ndarray) -> np.ndarray:
    return 0.299 * x[..., 0] + 0.587 * x[..., 1] + 0.114 * x[..., 2]


def rgb_to_hsv(x: np.ndarray) -> np.ndarray:
    """scikit-image's RGB -> HSV of ``(..., 3)`` in [0, 1] (hue in [0, 1))."""
    v = x.max(axis=-1)
    delta = v - x.min(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        s = np.where(v > 0, delta / np.where(v > 0, v, 1), 0.0)
        d = np.where(delta > 0, delta, 1)
        h = np.zeros_like(v)
        r, g, b = x[..., 0], x[..., 1], x[..., 2]
        h = np.where(r == v, (g - b) / d, h)
        h = np.where(g == v, 2.0 + (b - r) / d, h)
        h = np.where(b == v, 4.0 + (r - g) / d, h)
    h = np.where(delta > 0, (h / 6.0) % 1.0, 0.0)
    return np.stack([h, s, v], axis=-1)


def hsv_to_rgb(hsv: np.ndarray) -> np.ndarray:
    """HSV -> RGB, the inverse of :func:`rgb_to_hsv`."""
    h, s, v = hsv[..., 0], hsv[..., 1], hsv[..., 2]
    i = np.floor(h * 6.0)
    f = h * 6.0 - i
    i = i.astype(int) % 6
    p, q, t = v * (1 - s), v * (1 - f * s), v * (1 - (1 - f) * s)
    table = [(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)]
    out = np.zeros(hsv.shape)
    for k, (r, g, b) in enumerate(table):
        sel = i == k
        out[sel] = np.stack([r[sel], g[sel], b[sel]], axis=-1)
    return out


def _clipped_zoom(img: np.ndarray, factor: float) -> np.ndarray:
    """Zoom into the centre by ``factor`` (bilinear), cropped back to the image's size."""
    h, w = img.shape[:2]
    ch, cw = int(np.ceil(h / factor)), int(np.ceil(w / factor))
    top, left = (h - ch) // 2, (w - cw) // 2
    zoom = (factor, factor) + (1,) * (img.ndim - 2)
    out = ndimage.zoom(img[top:top + ch, left:left + cw], zoom, order=1)
    th, tw = (out.shape[0] - h) // 2, (out.shape[1] - w) // 2
    return out[th:th + h, tw:tw + w]


def _motion_blur(x: np.ndarray, radius: int, sigma: float, angle: float) -> np.ndarray:
    """One-sided Gaussian blur along a line at ``angle`` degrees, edges replicated."""
    width = 2 * radius + 1
    k = np.exp(-(np.arange(width) ** 2) / (2 * sigma ** 2))
    k /= k.sum()
    py, px = width * np.sin(np.deg2rad(angle)), width * np.cos(np.deg2rad(angle))
    hyp = np.hypot(py, px)
    h, w = x.shape[:2]
    rows, cols = np.arange(h), np.arange(w)
    out = np.zeros_like(x, dtype=np.float64)
    for i in range(width):
        dy = -int(np.ceil(i * py / hyp - 0.5))
        dx = -int(np.ceil(i * px / hyp - 0.5))
        if abs(dy) >= h or abs(dx) >= w:
            break
        shifted = x[np.clip(rows - dy, 0, h - 1)][:, np.clip(cols - dx, 0, w - 1)]
        out += k[i] * shifted
    return out


def _plasma(size: int, decay: float, rng: np.random.Generator) -> np.ndarray:
    """The reference's diamond-square height map ``(size, size)`` in [0, 1] (offsets
    ``wibble · U(-wibble, wibble)``, ``wibble`` from 100 divided by ``decay`` per level)."""
    m = np.zeros((size, size))
    step, wibble = size, 100.0

    def mean(a: np.ndarray) -> np.ndarray:
        return a / 4 + wibble * rng.uniform(-wibble, wibble, a.shape)

    while step >= 2:
        half = step // 2
        corners = m[0::step, 0::step]
        total = corners + np.roll(corners, -1, axis=0)
        total = total + np.roll(total, -1, axis=1)
        m[half::step, half::step] = mean(total)
        centres, corners = m[half::step, half::step], m[0::step, 0::step]
        m[0::step, half::step] = mean(centres + np.roll(centres, 1, axis=0)
                                      + corners + np.roll(corners, -1, axis=1))
        m[half::step, 0::step] = mean(centres + np.roll(centres, 1, axis=1)
                                      + corners + np.roll(corners, -1, axis=0))
        step, wibble = half, wibble / decay
    m -= m.min()
    return m / m.max()


def _pil(x: np.ndarray):
    from PIL import Image

    return Image.fromarray(np.uint8(np.clip(x, 0, 1) * 255 + 0.5))


# -- the corruptions ------------------------------------------------------------------------
def gaussian_noise(x, severity, rng):
    c = [0.04, 0.06, .08, .09, .10][severity - 1]
    return x + rng.normal(size=x.shape, scale=c)


def shot_noise(x, severity, rng):
    c = [500, 250, 100, 75, 50][severity - 1]
    return rng.poisson(x * c) / c


def impulse_noise(x, severity, rng):
    c = [.01, .02, .03, .05, .07][severity - 1]
    out = x.copy()
    flipped = rng.random(x.shape) < c
    salted = rng.random(x.shape) < 0.5
    out[flipped & salted] = 1.0
    out[flipped & ~salted] = 0.0
    return out


def speckle_noise(x, severity, rng):
    c = [.06, .1, .12, .16, .2][severity - 1]
    return x + x * rng.normal(size=x.shape, scale=c)


def gaussian_blur(x, severity, rng):
    c = [.4, .6, 0.7, .8, 1][severity - 1]
    return _gauss(x, c)


def glass_blur(x, severity, rng):
    sigma, delta, iterations = [(0.05, 1, 1), (0.25, 1, 1), (0.4, 1, 1), (0.25, 1, 2),
                                (0.4, 1, 2)][severity - 1]
    img = np.uint8(np.clip(_gauss(x, sigma), 0, 1) * 255)
    h, w = img.shape[:2]
    for _ in range(iterations):
        for r in range(h - delta, delta, -1):
            for c in range(w - delta, delta, -1):
                dx, dy = rng.integers(-delta, delta, size=2)
                img[r, c] = img[r + dy, c + dx]  # the reference's "swap" (see above)
    return _gauss(img / 255.0, sigma)


def _disk(radius: float, alias_blur: float) -> np.ndarray:
    span = np.arange(-8, 9) if radius <= 8 else np.arange(-int(radius), int(radius) + 1)
    size = 3 if radius <= 8 else 5
    xx, yy = np.meshgrid(span, span)
    disk = ((xx ** 2 + yy ** 2) <= radius ** 2).astype(np.float64)
    disk /= disk.sum()
    g = np.exp(-((np.arange(size) - (size - 1) / 2) ** 2) / (2 * alias_blur ** 2))
    g /= g.sum()
    return ndimage.correlate(disk, np.outer(g, g), mode="mirror")


def defocus_blur(x, severity, rng):
    radius, alias = [(0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1, 0.2), (1.5, 0.1)][severity - 1]
    k = _disk(radius, alias)
    return np.stack([ndimage.correlate(x[..., d], k, mode="mirror") for d in range(3)],
                    axis=-1)


def motion_blur(x, severity, rng):
    radius, sigma = [(6, 1), (6, 1.5), (6, 2), (8, 2), (9, 2.5)][severity - 1]
    return _motion_blur(x, radius, sigma, rng.uniform(-45, 45))


def zoom_blur(x, severity, rng):
    factors = [np.arange(1, 1.06, 0.01), np.arange(1, 1.11, 0.01), np.arange(1, 1.16, 0.01),
               np.arange(1, 1.21, 0.01), np.arange(1, 1.26, 0.01)][severity - 1]
    out = np.zeros_like(x)
    for f in factors:
        out += _clipped_zoom(x, f)
    return (x + out) / (len(factors) + 1)


def snow(x, severity, rng):
    c = [(0.1, 0.2, 1, 0.6, 8, 3, 0.95), (0.1, 0.2, 1, 0.5, 10, 4, 0.9),
         (0.15, 0.3, 1.75, 0.55, 10, 4, 0.9), (0.25, 0.3, 2.25, 0.6, 12, 6, 0.85),
         (0.3, 0.3, 1.25, 0.65, 14, 12, 0.8)][severity - 1]
    h, w = x.shape[:2]
    layer = rng.normal(size=(h, w), loc=c[0], scale=c[1])
    layer = _clipped_zoom(layer[..., None], c[2])[..., 0]
    layer[layer < c[3]] = 0
    layer = np.uint8(np.clip(layer, 0, 1) * 255).astype(np.float64)
    layer = np.uint8(np.clip(_motion_blur(layer, c[4], c[5], rng.uniform(-135, -45)), 0, 255))
    layer = (layer / 255.0)[..., None]
    x = c[6] * x + (1 - c[6]) * np.maximum(x, _grey(x)[..., None] * 1.5 + 0.5)
    return x + layer + np.rot90(layer, k=2)


#: the reference's photographs of frost (package data ``robustscope/refdata/frost/``)
FROST_FILES: tuple[str, ...] = ("frost1.png", "frost2.png", "frost3.png", "frost4.jpg",
                                "frost5.jpg", "frost6.jpg")
#: CIFAR-10-C draws one of the first five (``np.random.randint(5)``): frost6 never appears
_FROST_DRAWN = 5
#: CIFAR-10-C shrinks each photograph to a fifth (``cv2.resize(fx=0.2, fy=0.2)``)
_FROST_SCALE = 0.2


@cache
def frost_image(index: int) -> np.ndarray:
    """Photograph ``index`` (0-based into :data:`FROST_FILES`) as CIFAR-10-C uses it: RGB
    ``(h, w, 3)`` float64 in [0, 255], shrunk to a fifth as OpenCV's bilinear
    ``resize(fx=0.2, fy=0.2)`` does (``h = round(H / 5)``; pixel ``i`` is source pixel
    ``5 i + 2``, the bilinear weights there being exactly 0 and 1). Read-only (cached)."""
    from PIL import Image

    if not 0 <= index < len(FROST_FILES):
        raise InputError(f"frost image index must be in 0..{len(FROST_FILES) - 1}, "
                         f"got {index!r}")
    ref = resources.files("robustscope").joinpath("refdata", "frost", FROST_FILES[index])
    try:
        with ref.open("rb") as fh, Image.open(fh) as im:
            full = np.asarray(im.convert("RGB"), dtype=np.float64)
    except FileNotFoundError as err:
        raise InputError(f"frost photograph {FROST_FILES[index]} is missing from the "
                         f"installed package (robustscope/refdata/frost/); reinstall "
                         f"robustscope") from err
    h, w = full.shape[:2]
    rows = np.minimum(5 * np.arange(int(round(h * _FROST_SCALE))) + 2, h - 1)
    cols = np.minimum(5 * np.arange(int(round(w * _FROST_SCALE))) + 2, w - 1)
    out = full[rows][:, cols]
    out.setflags(write=False)
    return out


def _frost_layer(h: int, w: int, rng: np.random.Generator) -> np.ndarray:
    """A random ``(h, w, 3)`` crop in [0, 255] of a random photograph of frost (CIFAR-10-C:
    one of the first five, then a top-left corner uniform over ``0 .. size - crop - 1`` in
    each axis, ``np.random.randint``'s exclusive upper bound). An image as tall or as wide
    as the shrunk photograph (63 x 112 pixels for the smallest, 70 x 105 for the narrowest)
    gets it enlarged (bilinear) to 1.1 times the smallest size that covers it, as the
    ``imagecorruptions`` package does, so that any image size works."""
    from PIL import Image

    layer = frost_image(int(rng.integers(_FROST_DRAWN)))
    fh, fw = layer.shape[:2]
    if fh <= h or fw <= w:
        factor = 1.1 * max(h / fh, w / fw)
        size = (int(np.ceil(fw * factor)), int(np.ceil(fh * factor)))
        big = Image.fromarray(np.uint8(layer)).resize(size, Image.BILINEAR)
        layer = np.asarray(big, dtype=np.float64)
        fh, fw = layer.shape[:2]
    top, left = int(rng.integers(0, fh - h)), int(rng.integers(0, fw - w))
    return layer[top:top + h, left:left + w]


def frost(x, severity, rng):
    c0, c1 = [(1, 0.2), (1, 0.3), (0.9, 0.4), (0.85, 0.4), (0.75, 0.45)][severity - 1]
    h, w = x.shape[:2]
    # the reference works on 0..255: clip(c0 * 255 x + c1 * frost, 0, 255) / 255
    return c0 * x + c1 * _frost_layer(h, w, rng) / 255.0


def fog(x, severity, rng):
    amount, decay = [(.2, 3), (.5, 3), (0.75, 2.5), (1, 2), (1.5, 1.75)][severity - 1]
    h, w = x.shape[:2]
    size = 2 ** int(np.ceil(np.log2(max(h, w, 2))))
    top = x.max()
    x = x + amount * _plasma(size, decay, rng)[:h, :w][..., None]
    return x * top / (top + amount)


def brightness(x, severity, rng):
    c = [.05, .1, .15, .2, .3][severity - 1]
    hsv = rgb_to_hsv(x)
    hsv[..., 2] = np.clip(hsv[..., 2] + c, 0, 1)
    return hsv_to_rgb(hsv)


def contrast(x, severity, rng):
    c = [.75, .5, .4, .3, 0.15][severity - 1]
    means = x.mean(axis=(0, 1), keepdims=True)
    return (x - means) * c + means


def saturate(x, severity, rng):
    scale, shift = [(0.3, 0), (0.1, 0), (1.5, 0), (2, 0.1), (2.5, 0.2)][severity - 1]
    hsv = rgb_to_hsv(x)
    hsv[..., 1] = np.clip(hsv[..., 1] * scale + shift, 0, 1)
    return hsv_to_rgb(hsv)


def jpeg_compression(x, severity, rng):
    from PIL import Image

    quality = [80, 65, 58, 50, 40][severity - 1]
    buf = io.BytesIO()
    _pil(x).save(buf, "JPEG", quality=quality)
    return np.asarray(Image.open(buf), dtype=np.float64) / 255.0


def pixelate(x, severity, rng):
    from PIL import Image

    c = [0.95, 0.9, 0.85, 0.75, 0.65][severity - 1]
    h, w = x.shape[:2]
    img = _pil(x).resize((int(w * c), int(h * c)), Image.BOX).resize((w, h), Image.BOX)
    return np.asarray(img, dtype=np.float64) / 255.0


def elastic_transform(x, severity, rng):
    size = 32
    alpha, sigma, shift = [(size * 0, size * 0, size * 0.08),
                           (size * 0.05, size * 0.2, size * 0.07),
                           (size * 0.08, size * 0.06, size * 0.06),
                           (size * 0.1, size * 0.04, size * 0.05),
                           (size * 0.1, size * 0.03, size * 0.03)][severity - 1]
    h, w = x.shape[:2]
    # random affine: three points (x, y) around the centre moved by up to `shift` pixels
    centre, half = np.array([w, h], dtype=np.float64) // 2, min(h, w) // 3
    pts1 = np.array([centre + half, [centre[0] + half, centre[1] - half], centre - half])
    pts2 = pts1 + rng.uniform(-shift, shift, size=pts1.shape)
    src = np.hstack([pts1, np.ones((3, 1))])
    affine = np.linalg.solve(src, pts2).T  # (2, 3): dst = A @ [x, y, 1]
    inv = np.linalg.inv(np.vstack([affine, [0, 0, 1]]))[:2]  # dst -> src
    # scipy works in (row, col) = (y, x)
    matrix = np.array([[inv[1, 1], inv[1, 0]], [inv[0, 1], inv[0, 0]]])
    offset = np.array([inv[1, 2], inv[0, 2]])
    warped = np.stack([ndimage.affine_transform(x[..., d], matrix, offset, order=1,
                                                mode="mirror") for d in range(3)], axis=-1)
    dx = _gauss(rng.uniform(-1, 1, size=(h, w)), sigma, mode="reflect", truncate=3,
                channels=False) * alpha
    dy = _gauss(rng.uniform(-1, 1, size=(h, w)), sigma, mode="reflect", truncate=3,
                channels=False) * alpha
    yy, xx = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    coords = [yy + dy, xx + dx]
    return np.stack([ndimage.map_coordinates(warped[..., d], coords, order=1, mode="reflect")
                     for d in range(3)], axis=-1)


def canny(img: np.ndarray, low: float, high: float) -> np.ndarray:
    """OpenCV's ``Canny(img, low, high)`` (3 x 3 Sobel with replicated borders, L1 gradient
    magnitude, non-maximum suppression along the nearest of 4 directions, hysteresis with
    8-connected neighbours) of a uint8 image ``(H, W)``: 255 on edges, else 0."""
    f = img.astype(np.float64)
    dx = ndimage.sobel(f, axis=1, mode="nearest")
    dy = ndimage.sobel(f, axis=0, mode="nearest")
    mag = np.abs(dx) + np.abs(dy)
    p = np.pad(mag, 1)
    c = p[1:-1, 1:-1]
    ax, ay = np.abs(dx), np.abs(dy)
    tg22, tg67 = np.tan(np.deg2rad(22.5)), np.tan(np.deg2rad(67.5))
    horizontal = ay < ax * tg22
    vertical = ay > ax * tg67
    left, right = p[1:-1, :-2], p[1:-1, 2:]
    up, down = p[:-2, 1:-1], p[2:, 1:-1]
    same = (dx * dy) >= 0  # gradient along the main diagonal
    diag_a = np.where(same, p[:-2, :-2], p[:-2, 2:])
    diag_b = np.where(same, p[2:, 2:], p[2:, :-2])
    peak = np.where(horizontal, (c > left) & (c >= right),
                    np.where(vertical, (c > up) & (c >= down), (c > diag_a) & (c > diag_b)))
    candidate = peak & (mag > low)
    strong = candidate & (mag > high)
    labels, _ = ndimage.label(candidate, structure=np.ones((3, 3)))
    keep = np.unique(labels[strong])
    return np.where(np.isin(labels, keep[keep > 0]), 255, 0).astype(np.uint8)


def equalize_hist(img: np.ndarray) -> np.ndarray:
    """OpenCV's ``equalizeHist`` of a uint8 image."""
    hist = np.bincount(img.ravel(), minlength=256)
    cdf = np.cumsum(hist)
    first = cdf[np.flatnonzero(hist)[0]]
    total = img.size
    if total == first:
        return img.copy()
    lut = np.clip(np.round((cdf - first) * 255.0 / (total - first)), 0, 255)
    return lut.astype(np.uint8)[img]


def spatter(x, severity, rng):
    c = [(0.62, 0.1, 0.7, 0.7, 0.5, 0), (0.65, 0.1, 0.8, 0.7, 0.5, 0),
         (0.65, 0.3, 1, 0.69, 0.5, 0), (0.65, 0.1, 0.7, 0.69, 0.6, 1),
         (0.65, 0.1, 0.5, 0.68, 0.6, 1)][severity - 1]
    liquid = rng.normal(size=x.shape[:2], loc=c[0], scale=c[1])
    liquid = _gauss(liquid, c[2], channels=False)
    liquid[liquid < c[3]] = 0
    if c[5] == 0:  # water: pale turquoise drops with lit edges
        layer = (liquid * 255).astype(np.int64).astype(np.uint8)  # < 255 in practice
        dist = 255 - canny(layer, 50, 150)
        # distance to the nearest edge (exact; OpenCV's 5 x 5 mask approximates it), <= 20
        dist = np.minimum(ndimage.distance_transform_edt(dist), 20) if (dist == 0).any() \
            else np.full(dist.shape, 20.0)
        dist = ndimage.uniform_filter(dist, 3, mode="mirror").astype(np.uint8)
        dist = equalize_hist(dist)
        ker = np.array([[-2, -1, 0], [-1, 1, 1], [0, 1, 2]], dtype=np.float64)
        dist = np.clip(np.round(ndimage.correlate(dist.astype(np.float64), ker,
                                                  mode="mirror")), 0, 255)
        dist = np.round(ndimage.uniform_filter(dist.astype(np.uint8).astype(np.float64), 3,
                                               mode="mirror"))  # a uint8 blur rounds
        m = layer.astype(np.float64) * dist
        top = m.max()
        m = (m / top if top > 0 else m) * c[4]
        color = np.array([175, 238, 238], dtype=np.float64) / 255.0
        return x + m[..., None] * color
    m = _gauss(np.where(liquid > c[3], 1.0, 0.0), c[4], channels=False)
    m[m < 0.8] = 0
    mud = np.array([63, 42, 20], dtype=np.float64) / 255.0
    return x * (1 - m[..., None]) + mud * m[..., None]


#: name -> function, in the order of the benchmark's accuracy file (CIFAR-10-C's names).
CORRUPTIONS: dict[str, Callable | None] = {
    "gaussian_noise": gaussian_noise, "shot_noise": shot_noise,
    "impulse_noise": impulse_noise, "defocus_blur": defocus_blur, "glass_blur": glass_blur,
    "motion_blur": motion_blur, "zoom_blur": zoom_blur, "snow": snow, "frost": frost,
    "fog": fog, "brightness": brightness, "contrast": contrast,
    "elastic_transform": elastic_transform, "pixelate": pixelate,
    "jpeg_compression": jpeg_compression, "speckle_noise": speckle_noise,
    "gaussian_blur": gaussian_blur, "spatter": spatter, "saturate": saturate,
}


def available(name: str, severity: int) -> bool:
    """This module produces corruption ``name`` at ``severity`` (all 19 at 1..5)."""
    return CORRUPTIONS.get(name) is not None


def check_corruption(name: str) -> str:
    """``name`` if it is one of the 19 corruptions (spelling as in CIFAR-10-C), else an
    :class:`InputError` listing them."""
    key = name.strip().lower().replace("-", "_").replace(" ", "_") if isinstance(name, str) \
        else name
    if key not in CORRUPTIONS:
        raise InputError(f"corruption {name!r} is not known; choose one of "
                         f"{', '.join(CORRUPTIONS)}")
    return key


def corrupt(images: np.ndarray, name: str, severity: int, seed: int = 0,
            index: np.ndarray | None = None) -> np.ndarray:
    """Corrupt images ``(n, 3, H, W)`` in [0, 1] (numpy or torch on the CPU) with ``name``
    at ``severity``; returns ``(n, 3, H, W)`` float32 in [0, 1], each value a multiple of
    1/255 (8-bit, as CIFAR-10-C was stored).

    Image ``i`` draws its randomness from ``(seed, corruption, severity, index[i])``
    (``index`` defaults to ``0 .. n-1``), so an image is corrupted the same way in any batch.
    """
    name = check_corruption(name)
    if severity not in SEVERITIES:
        raise InputError(f"severity must be one of 1..5, got {severity!r}")
    if not available(name, severity):
        raise InputError(f"corruption '{name}' is not implemented at severity {severity}")
    x = np.asarray(images, dtype=np.float64)
    if x.ndim != 4 or x.shape[1] != 3:
        raise InputError(f"images must have shape (n, 3, H, W) (RGB); got {x.shape}")
    index = np.arange(len(x)) if index is None else np.asarray(index)
    which = list(CORRUPTIONS).index(name)
    fn = CORRUPTIONS[name]
    out = np.empty(x.shape, dtype=np.float32)
    for i, img in enumerate(x.transpose(0, 2, 3, 1)):
        rng = np.random.default_rng([int(seed), which, int(severity), int(index[i])])
        res = np.asarray(fn(np.array(img), severity, rng), dtype=np.float64)
        res = np.uint8(np.clip(res, 0, 1) * 255) / 255.0
        out[i] = res.transpose(2, 0, 1)
    return out


__all__ = ["CORRUPTIONS", "FROST_FILES", "SEVERITIES", "available", "canny",
           "check_corruption", "corrupt", "equalize_hist", "frost_image", "hsv_to_rgb",
           "rgb_to_hsv"]
