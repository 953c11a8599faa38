"""Trade-off of robustness (Giraudon et al., ICASSP 2021, section 3.3).

``(eps, alpha)`` is a trade-off at ``x`` when ``P_Z(f(x + eps Z) != f(x)) <= alpha``; the
isotropic trade-off takes ``Z`` uniform in the unit ball (here: of the L2, Linf or L1 norm, in
the *scaled* space ``u = (x' - x) / scale``). This module estimates

- the flip probability ``P(f(x + eps Z) != f(x))`` by Monte Carlo, with exact (Clopper-Pearson)
  or Wilson confidence bounds;
- ``eps(alpha)`` per input, by bisection on ``eps``, together with a conservative ``eps_low``
  (bisection on the *upper* confidence bound of the flip probability) and a liberal ``eps_high``
  (bisection on the *lower* bound);
- for linear models, the Hoeffding trade-off ``eps = r / sqrt(2 ln(1/alpha))`` (binary, Z uniform
  in the Linf ball, ``r`` the L2 radius), and its multiclass union-bound version.

``f(x)`` is the model's own clean decision, not the label. When a feature space is given, noisy
inputs are projected onto it (bounds, types), so the probability is that of the projected noise.
The confidence bounds are pointwise (for each eps tried); the bisection does not correct for
testing several eps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from scipy import stats

from robustscope.core.checks import make_generator
from robustscope.core.errors import InputError
from robustscope.core.space import FeatureSpace
from robustscope.models.base import Classifier, QueryLedger
from robustscope.search.metering import charged
from robustscope.threats import LpThreat, get_threat

METHODS = ("clopper-pearson", "wilson")
MAX_ELEMENTS = 2**22


def binomial_interval(k: np.ndarray, n: int, confidence: float = 0.95,
                      method: str = "clopper-pearson") -> tuple[np.ndarray, np.ndarray]:
    """Two-sided confidence interval of a binomial proportion, ``k`` successes of ``n``.

    ``clopper-pearson``: exact (Beta quantiles), never below nominal coverage.
    ``wilson``: the score interval, shorter, close to nominal coverage.
    """
    k = np.asarray(k, dtype=np.float64)
    if method not in METHODS:
        raise InputError(f"method: '{method}' is not known; choose one of {', '.join(METHODS)}")
    if not 0 < confidence < 1:
        raise InputError(f"confidence: {confidence} must lie in (0, 1)")
    a = 1 - confidence
    if method == "clopper-pearson":
        low = np.where(k > 0, stats.beta.ppf(a / 2, np.maximum(k, 1), n - k + 1), 0.0)
        high = np.where(k < n, stats.beta.ppf(1 - a / 2, k + 1, np.maximum(n - k, 1)), 1.0)
        return low, high
    z = stats.norm.ppf(1 - a / 2)
    p = k / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return np.clip(centre - half, 0, 1), np.clip(centre + half, 0, 1)


def _plain_dict(obj: object) -> dict:
    """A dataclass's fields, arrays as lists (JSON-ready)."""
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in vars(obj).items()}


@dataclass
class FlipEstimate:
    """Monte-Carlo flip probabilities, arrays of shape ``(n,)``."""

    eps: np.ndarray
    p: np.ndarray
    low: np.ndarray
    high: np.ndarray
    flips: np.ndarray
    n_samples: int
    confidence: float
    method: str
    threat: str

    def to_dict(self) -> dict:
        return _plain_dict(self)


@dataclass
class TradeoffEps:
    """``eps(alpha)`` per input, shape ``(n,)``: the bisection on the estimated flip
    probability (``eps``), on its upper bound (``eps_low``, conservative) and on its lower bound
    (``eps_high``). ``reached_max`` marks inputs whose criterion still held at ``max_eps``
    (their values are then ``max_eps``, a lower bound)."""

    alpha: float
    eps: np.ndarray
    eps_low: np.ndarray
    eps_high: np.ndarray
    reached_max: np.ndarray
    n_samples: int
    confidence: float
    method: str
    threat: str

    def to_dict(self) -> dict:
        return _plain_dict(self)


def _prepare(model: Classifier, X, space: FeatureSpace | None):
    x = model.as_tensor(X)
    if x.ndim < 2:
        raise InputError(f"X: expected shape (n, *input_shape), got {tuple(x.shape)}")
    if space is not None:
        space.check_data(x.detach().cpu().numpy(), what="X")
    return x


def _flip_counts(model: Classifier, x: torch.Tensor, pred: torch.Tensor, eps: torch.Tensor,
                 threat: LpThreat, space: FeatureSpace | None, n_samples: int,
                 generator: torch.Generator, max_elements: int, ledger: QueryLedger | None,
                 owners: np.ndarray) -> np.ndarray:
    """Number of ``n_samples`` noisy copies ``x + eps Z`` (Z uniform in the unit ball) whose
    decision differs from ``pred``; ``(n,)`` int."""
    n = x.shape[0]
    d = int(np.prod(x.shape[1:]))
    counts = np.zeros(n, dtype=np.int64)
    c_max = max(1, max_elements // max(1, n * d))
    done = 0
    scale = None if space is None else torch.as_tensor(space.scale, dtype=x.dtype,
                                                       device=x.device)
    while done < n_samples:
        c = min(c_max, n_samples - done)
        e = eps.repeat_interleave(c).to(x.dtype)
        u = threat.random_in_ball(n * c, d, e, generator, x.dtype, x.device)
        base = x.repeat_interleave(c, dim=0)
        if scale is not None:
            u = u * scale
        cand = base + u.reshape(base.shape)
        if space is not None:
            cand = space.project(cand, base)
        p = charged(model, ledger, owners).predict(cand)
        counts += (p != pred.repeat_interleave(c)).reshape(n, c).sum(dim=1).cpu().numpy()
        done += c
    return counts


def flip_probability(
    model: Classifier,
    X: np.ndarray | torch.Tensor,
    eps: float | np.ndarray,
    threat: str | LpThreat = "l2",
    space: FeatureSpace | None = None,
    *,
    n_samples: int = 1000,
    confidence: float = 0.95,
    method: str = "clopper-pearson",
    seed: int = 0,
    ledger: QueryLedger | None = None,
    max_elements: int = MAX_ELEMENTS,
) -> FlipEstimate:
    """Monte-Carlo estimate of ``P(f(x + eps Z) != f(x))`` per input.

    ``X`` (n, *shape) in original units; ``eps`` scalar or (n,), in scaled units; Z uniform in
    the unit ball of ``threat``. Confidence bounds at level ``confidence`` by ``method``.
    """
    threat = get_threat(threat)
    if n_samples < 1:
        raise InputError(f"n_samples: {n_samples} must be >= 1")
    binomial_interval(np.zeros(1), 1, confidence, method)  # validates method and confidence
    x = _prepare(model, X, space)
    n = x.shape[0]
    e = np.broadcast_to(np.asarray(eps, dtype=np.float64), (n,)).copy()
    if not (np.isfinite(e).all() and (e >= 0).all()):
        raise InputError("eps: must be finite and >= 0")
    gen = make_generator(seed, x.device)
    owners = np.arange(n)
    pred = charged(model, ledger, owners).predict(x)
    flips = _flip_counts(model, x, pred, torch.as_tensor(e, device=x.device), threat, space,
                         n_samples, gen, max_elements, ledger, owners)
    low, high = binomial_interval(flips, n_samples, confidence, method)
    return FlipEstimate(e, flips / n_samples, low, high, flips, n_samples, confidence, method,
                        threat.name)


def eps_for_alpha(
    model: Classifier,
    X: np.ndarray | torch.Tensor,
    alpha: float,
    threat: str | LpThreat = "l2",
    space: FeatureSpace | None = None,
    *,
    n_samples: int = 1000,
    confidence: float = 0.95,
    method: str = "clopper-pearson",
    init_eps: float = 1.0,
    max_eps: float = 1e6,
    n_steps: int = 30,
    rtol: float = 0.01,
    seed: int = 0,
    ledger: QueryLedger | None = None,
    max_elements: int = MAX_ELEMENTS,
) -> TradeoffEps:
    """Largest ``eps`` with flip probability ``<= alpha``, per input, by doubling from
    ``init_eps`` and then bisecting (``n_steps`` evaluations at most, stopping once every
    bracket is within ``rtol``).

    Three brackets run side by side, on the point estimate and on both confidence bounds, so
    ``eps_low <= eps <= eps_high`` up to Monte-Carlo noise. The flip probability is not always
    monotone in eps; the bisection then returns one crossing of the level alpha.
    """
    threat = get_threat(threat)
    if not 0 < alpha < 1:
        raise InputError(f"alpha: {alpha} must lie in (0, 1)")
    if not (init_eps > 0 and max_eps >= init_eps):
        raise InputError(f"init_eps, max_eps: need 0 < init_eps <= max_eps, got "
                         f"{init_eps}, {max_eps}")
    binomial_interval(np.zeros(1), 1, confidence, method)
    x = _prepare(model, X, space)
    n = x.shape[0]
    gen = make_generator(seed, x.device)
    owners = np.arange(n)
    pred = charged(model, ledger, owners).predict(x)
    lo = np.zeros((3, n))
    hi = np.full((3, n), np.inf)
    eps = np.full((3, n), float(init_eps))
    x3 = x.repeat(3, *([1] * (x.ndim - 1)))
    pred3 = pred.repeat(3)
    owners3 = np.tile(owners, 3)
    for _ in range(n_steps):
        flips = _flip_counts(model, x3, pred3, torch.as_tensor(eps.ravel(), device=x.device),
                             threat, space, n_samples, gen, max_elements, ledger, owners3)
        flips = flips.reshape(3, n)
        low, high = binomial_interval(flips, n_samples, confidence, method)
        # row 0: point estimate; row 1: upper bound (conservative); row 2: lower bound
        holds = np.stack([flips[0] / n_samples <= alpha, high[1] <= alpha, low[2] <= alpha])
        lo = np.where(holds, eps, lo)
        hi = np.where(holds, hi, eps)
        grow = np.isinf(hi)
        eps = np.where(grow, np.minimum(2 * eps, max_eps), (lo + hi) / 2)
        settled = np.where(grow, lo >= max_eps, hi - lo <= rtol * hi)
        if settled.all():
            break
    reached = np.isinf(hi[0]) & (lo[0] >= max_eps)
    return TradeoffEps(alpha, lo[0], lo[1], lo[2], reached, n_samples, confidence, method,
                       threat.name)


# -- linear models: Hoeffding ----------------------------------------------------------------
def hoeffding_eps(radius_l2: np.ndarray | float, alpha: float) -> np.ndarray:
    """``eps = r / sqrt(2 ln(1/alpha))``: for a *binary* linear model and Z uniform in the Linf
    unit ball, ``P(flip at eps) <= exp(-r^2 / (2 eps^2)) = alpha`` (Hoeffding), ``r`` the L2
    radius in scaled units. A guaranteed trade-off, so ``eps_opt(alpha) >= eps``."""
    if not 0 < alpha < 1:
        raise InputError(f"alpha: {alpha} must lie in (0, 1)")
    return np.asarray(radius_l2, dtype=np.float64) / math.sqrt(2 * math.log(1 / alpha))


def linear_hoeffding_eps(model: Classifier, X: np.ndarray | torch.Tensor, alpha: float,
                         space: FeatureSpace | None = None) -> np.ndarray:
    """Hoeffding trade-off of an affine model, any number of classes, Z uniform in the Linf
    ball (scaled units), ``(n,)``.

    With ``r_j = m_j / ||s * (w_c - w_j)||_2`` (``c`` the predicted class, ``m_j`` its logit
    margin over class j, ``s`` the feature scales) the union bound gives
    ``P(flip) <= sum_j exp(-r_j^2 / (2 eps^2))``; the returned eps solves ``= alpha`` (bisection,
    the sum increases with eps). For two classes this is :func:`hoeffding_eps`. Bounds of the
    space are ignored (projection only reduces the noise of a box-clipped input in one
    direction per coordinate; the bound is stated for the unprojected noise).
    """
    if not 0 < alpha < 1:
        raise InputError(f"alpha: {alpha} must lie in (0, 1)")
    W, b = model.linear_parameters()
    x = np.asarray(model.as_tensor(X).detach().cpu().numpy(), dtype=np.float64)
    flat = x.reshape(x.shape[0], -1)
    scale = np.ones(flat.shape[1]) if space is None else space.scale
    z = flat @ W.T + b
    c = z.argmax(axis=1)
    margins = z[np.arange(len(c)), c][:, None] - z  # (n, K)
    diff = (W[c][:, None, :] - W[None, :, :]) * scale  # (n, K, d)
    norms = np.linalg.norm(diff, axis=2)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(norms > 0, margins / norms, np.inf)
    r[np.arange(len(c)), c] = np.inf
    if len(W) == 2:
        return hoeffding_eps(r.min(axis=1), alpha)
    lo = np.zeros(len(c))
    hi = np.maximum(r.min(axis=1), 1e-300) * 1e3

    def total(e: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", over="ignore"):
            return np.exp(-(r ** 2) / (2 * e[:, None] ** 2)).sum(axis=1)

    for _ in range(200):
        mid = (lo + hi) / 2
        ok = total(mid) <= alpha
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    return lo
