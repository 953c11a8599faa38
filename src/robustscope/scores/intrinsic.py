"""Difficulty-aware robustness scores (Giraudon et al., "Towards an intrinsic definition of
robustness for a classifier", ICASSP 2021).

From per-input radii ``r`` (in the threat's norm of the scaled perturbation), cross-entropy
losses ``loss`` (nats) and statuses (see :mod:`robustscope.core.result`), this module computes

- ``R_m``  mean-case robustness, the mean radius;
- ``R_w``  worst-case robustness, the smallest radius over all inputs (0 as soon as one input
  is misclassified), and ``R_w_correct``, the smallest over well-classified inputs only;
- ``R_nu`` the difficulty-aware score, the mean of ``r / g(loss)`` with
  ``g(t) = -log(exp(t) - 1)`` (equal to the margin for binary logistic regression, so that
  ``R_nu = accuracy / ||beta||`` there);
- the least-squares line of ``r`` against ``g(loss)`` (slope, intercept, R^2);
- percentile bootstrap intervals (seeded) for every score;
- subset independence: the same scores on the easy and hard halves (split by loss) and their
  relative variation ``|S_e - S_h| / (S_e + S_h)``.

Treatment of special inputs (documented choices):

- **censored** (no counterexample up to the largest strength tried, ``radius = inf``): never
  averaged as a radius. ``censored="exclude"`` (default) drops them from every score and reports
  how many were dropped (the scores then describe the inputs that were broken, and are biased
  low, since the dropped inputs are the most robust ones). ``censored="bound"`` replaces their
  radius by ``censor_at`` (the largest strength tried), which turns R_m, R_w and R_nu into
  *lower bounds* of the uncensored scores; ``result.lower_bounds`` is then True.
- **misclassified**: radius 0; they count in every denominator and contribute 0 to R_m and
  R_nu (the paper's definition); they are left out of the line fit and of ``R_w_correct``.
- **satisfied** (correctly classified, but a targeted statement already holds: the target is
  the label): radius 0 without a search, treated as misclassified inputs are in the scores
  (0 to R_m and R_nu, out of the line fit and ``R_w_correct``) but not counted in
  ``n_misclassified`` (they are correctly classified).
- **well-classified with g(loss) <= 0** (possible for K > 2 classes when ``p_y <= 1/2``) and
  well-classified inputs with ``g(loss) = inf`` (a loss that rounded to 0): ``r / g`` is
  meaningless there, so they are excluded from R_nu (numerator and denominator) and counted in
  ``n_nonpositive_g`` / ``n_infinite_g``. They stay in R_m and R_w, and inputs with
  ``g <= 0`` stay in the line fit (they are valid points of the (g, r) cloud).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from robustscope.core.errors import InputError
from robustscope.core.numerics import cross_entropy  # noqa: F401 - re-exported
from robustscope.core.result import CENSORED, MISCLASSIFIED, STATUSES, RadiusResult
from robustscope.core.statuses import AT_ZERO

#: Score names, in report order.
SCORE_NAMES = ("R_m", "R_w", "R_w_correct", "R_nu", "slope", "intercept", "r2")
CENSORED_TREATMENTS = ("exclude", "bound")


def g_of_loss(loss: np.ndarray | float) -> np.ndarray:
    """``g(t) = -log(exp(t) - 1)``, elementwise, computed stably (float64).

    ``-log(expm1(t))`` for ``t <= 1`` (no cancellation near 0) and
    ``-t - log1p(-exp(-t))`` for ``t > 1`` (no overflow for large losses).
    ``g(0) = +inf``; ``g(log 2) = 0``; negative losses are invalid (NaN).
    """
    t = np.asarray(loss, dtype=np.float64)
    out = np.full(t.shape, np.nan)
    small = t <= 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(small, -np.log(np.expm1(np.where(small, t, 1.0))), out)
        big = np.where(small, 2.0, t)
        out = np.where(small, out, -big - np.log1p(-np.exp(-big)))
    return np.where(t < 0, np.nan, out)


@dataclass
class IntrinsicScores:
    """Scores of one set of inputs, with bootstrap intervals.

    ``intervals[name] = (low, high)`` at level ``confidence`` (percentile bootstrap over inputs,
    ``n_bootstrap`` resamples, ``seed``). Radii are in the threat's norm of the scaled
    perturbation. ``r``, ``g``, ``status`` keep the per-input arrays used (for figures).
    """

    n: int
    n_censored: int
    n_misclassified: int
    n_nonpositive_g: int
    n_infinite_g: int
    n_used_R_nu: int
    n_line: int
    R_m: float
    R_w: float
    R_w_correct: float
    R_nu: float
    slope: float
    intercept: float
    r2: float
    intervals: dict[str, tuple[float, float]]
    confidence: float
    n_bootstrap: int
    seed: int
    censored: str
    lower_bounds: bool
    r: np.ndarray = field(repr=False)
    g: np.ndarray = field(repr=False)
    status: np.ndarray = field(repr=False)
    #: bootstrap draws of each score, ``(n_bootstrap,)`` (NaN where undefined)
    draws: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict:
        """Flat dict of plain Python numbers: each score, ``<score>_low`` / ``<score>_high``,
        the counts and the settings (no per-input arrays)."""
        out: dict = {"n": self.n, "n_censored": self.n_censored,
                     "n_misclassified": self.n_misclassified,
                     "n_nonpositive_g": self.n_nonpositive_g, "n_infinite_g": self.n_infinite_g,
                     "n_used_R_nu": self.n_used_R_nu, "n_line": self.n_line}
        for name in SCORE_NAMES:
            out[name] = float(getattr(self, name))
            low, high = self.intervals.get(name, (math.nan, math.nan))
            out[f"{name}_low"], out[f"{name}_high"] = float(low), float(high)
        out.update(confidence=self.confidence, n_bootstrap=self.n_bootstrap, seed=self.seed,
                   censored=self.censored, lower_bounds=self.lower_bounds)
        return out


@dataclass
class SubsetComparison:
    """Scores on the easy and hard subsets and their relative variations
    ``rel_var[name] = |S_e - S_h| / (S_e + S_h)`` (NaN when the sum is 0 or not finite)."""

    easy: IntrinsicScores
    hard: IntrinsicScores
    rel_var: dict[str, float]
    easy_mask: np.ndarray = field(repr=False)
    #: percentile bootstrap intervals of each relative variation (halves resampled apart)
    rel_var_intervals: dict[str, tuple[float, float]] = field(default_factory=dict)

    def to_dict(self) -> dict:
        out = {f"rel_var_{k}": float(v) for k, v in self.rel_var.items()}
        for k, (low, high) in self.rel_var_intervals.items():
            out[f"rel_var_{k}_low"], out[f"rel_var_{k}_high"] = float(low), float(high)
        out["easy"] = self.easy.to_dict()
        out["hard"] = self.hard.to_dict()
        return out


# -- validation ------------------------------------------------------------------------------
def _check_inputs(radius, loss, status) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    try:
        r = np.asarray(radius, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise InputError(f"radius: not numeric ({exc})") from exc
    try:
        ell = np.asarray(loss, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise InputError(f"loss: not numeric ({exc})") from exc
    s = np.asarray(status).astype(str).reshape(-1)
    if not (len(r) == len(ell) == len(s)):
        raise InputError(f"radius, loss and status must have one entry per input; got lengths "
                         f"{len(r)}, {len(ell)}, {len(s)}")
    if len(r) == 0:
        raise InputError("radius: no inputs")
    bad = ~np.isin(s, STATUSES)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(f"status: row {i} has unknown status '{s[i]}'; "
                         f"expected one of {', '.join(STATUSES)}")
    cens = s == CENSORED
    bad = ~cens & ~(np.isfinite(r) & (r >= 0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(f"radius: row {i} is {r[i]} with status '{s[i]}'; a radius must be "
                         "finite and >= 0 (only censored inputs have radius inf)")
    bad = cens & np.isfinite(r)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(f"radius: row {i} is censored but has a finite radius {r[i]}; "
                         "censored inputs must have radius inf")
    bad = np.isin(s, AT_ZERO) & (r != 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(f"radius: row {i} is {s[i]} but has radius {r[i]} (expected 0)")
    bad = ~(ell >= 0)  # catches NaN too
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(f"loss: row {i} is {ell[i]}; a cross-entropy loss is >= 0")
    return r, ell, s


# -- core: every score as a weighted statistic -----------------------------------------------
def _weighted_scores(w: np.ndarray, r: np.ndarray, g: np.ndarray, s: np.ndarray,
                     keep: np.ndarray) -> dict[str, np.ndarray]:
    """Scores for each row of weights ``w`` (B, n) (bootstrap counts; ones = the sample).

    ``r`` already holds the censored treatment; ``keep`` marks inputs that enter the scores.
    """
    wrong = np.isin(s, AT_ZERO)  # radius 0 before any search: misclassified or satisfied
    correct = keep & ~wrong
    nu_ok = keep & (wrong | ((g > 0) & np.isfinite(g)))
    line = correct & np.isfinite(g)
    rr = np.where(keep, r, 0.0)
    ratio = np.where(correct & nu_ok, rr / np.where(nu_ok & ~wrong, g, 1.0), 0.0)

    def mean(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
        den = (w * mask).sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(den > 0, (w * (values * mask)).sum(axis=1) / den, np.nan)

    def minimum(mask: np.ndarray) -> np.ndarray:
        vals = np.where((w > 0) & mask, rr, np.inf).min(axis=1)
        return np.where(np.isfinite(vals), vals, np.nan)

    out = {"R_m": mean(rr, keep), "R_nu": mean(ratio, nu_ok),
           "R_w": minimum(keep), "R_w_correct": minimum(correct)}
    # weighted least squares of r on g over the line set
    wl = w * line
    gl, rl = np.where(line, g, 0.0), np.where(line, rr, 0.0)
    sw = wl.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mg = (wl * gl).sum(axis=1) / sw
        mr = (wl * rl).sum(axis=1) / sw
        dg = gl[None, :] - mg[:, None]
        dr = rl[None, :] - mr[:, None]
        sgg = (wl * dg * dg).sum(axis=1)
        sgr = (wl * dg * dr).sum(axis=1)
        srr = (wl * dr * dr).sum(axis=1)
        slope = np.where(sgg > 0, sgr / sgg, np.nan)
        out["slope"] = slope
        out["intercept"] = mr - slope * mg
        # R^2 = 1 - SS_res / SS_tot = sgr^2 / (sgg * srr) for a least-squares line
        out["r2"] = np.where((sgg > 0) & (srr > 0), sgr * sgr / (sgg * srr),
                             np.where(sgg > 0, 1.0, np.nan))
    return out


def intrinsic_scores(
    radius: np.ndarray,
    loss: np.ndarray,
    status: np.ndarray,
    *,
    censored: str = "exclude",
    censor_at: float | None = None,
    n_bootstrap: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> IntrinsicScores:
    """R_m, R_w, R_nu, the (g(loss), r) line and bootstrap intervals for one set of inputs.

    Parameters
    ----------
    radius : (n,) float, radii in the threat's norm (scaled units); ``inf`` for censored inputs,
        0 for misclassified ones.
    loss : (n,) float, cross-entropy loss ``-log p_y`` of the clean input, in nats.
    status : (n,) str, one of ``exact``, ``attacked``, ``censored``, ``misclassified``,
        ``satisfied``.
    censored : ``"exclude"`` (default) or ``"bound"`` (censored radius := ``censor_at``; scores
        become lower bounds). See the module docstring.
    n_bootstrap : resamples of the inputs for the percentile intervals (0 = no intervals).
    confidence : level of the intervals, in (0, 1).
    seed : seed of the bootstrap resampling.
    """
    r, ell, s = _check_inputs(radius, loss, status)
    if censored not in CENSORED_TREATMENTS:
        raise InputError(f"censored: '{censored}' is not a treatment; choose one of "
                         f"{', '.join(CENSORED_TREATMENTS)}")
    if not 0 < confidence < 1:
        raise InputError(f"confidence: {confidence} must lie in (0, 1)")
    if n_bootstrap < 0:
        raise InputError(f"n_bootstrap: {n_bootstrap} must be >= 0")
    cens = s == CENSORED
    if censored == "bound":
        if censor_at is None or not (np.isfinite(censor_at) and censor_at > 0):
            raise InputError("censor_at: censored='bound' needs the largest strength tried "
                             f"(a finite number > 0), got {censor_at}")
        r = np.where(cens, float(censor_at), r)
        keep = np.ones(len(r), bool)
    else:
        keep = ~cens
    g = g_of_loss(ell)
    wrong = np.isin(s, AT_ZERO)
    correct = keep & ~wrong
    point = {k: float(v[0]) for k, v in
             _weighted_scores(np.ones((1, len(r))), r, g, s, keep).items()}
    intervals, draws = _bootstrap(r, g, s, keep, n_bootstrap, confidence, seed)
    return IntrinsicScores(
        n=len(r), n_censored=int(cens.sum()), n_misclassified=int((s == MISCLASSIFIED).sum()),
        n_nonpositive_g=int((correct & (g <= 0)).sum()),
        n_infinite_g=int((correct & np.isinf(g)).sum()),
        n_used_R_nu=int((keep & (wrong | ((g > 0) & np.isfinite(g)))).sum()),
        n_line=int((correct & np.isfinite(g)).sum()),
        **point, intervals=intervals, confidence=confidence, n_bootstrap=n_bootstrap, seed=seed,
        censored=censored, lower_bounds=bool(censored == "bound" and cens.any()),
        r=r, g=g, status=s, draws=draws,
    )


def _bootstrap(r, g, s, keep, n_bootstrap: int, confidence: float,
               seed: int) -> tuple[dict[str, tuple[float, float]], dict[str, np.ndarray]]:
    """Percentile intervals of every score, and the bootstrap draws themselves."""
    if n_bootstrap == 0:
        return {}, {}
    n = len(r)
    chunk = max(1, min(256, 1_000_000 // n))  # bounds the (chunk, n) work arrays
    rng = np.random.default_rng(seed)
    draws: dict[str, list[np.ndarray]] = {}
    for start in range(0, n_bootstrap, chunk):
        b = min(chunk, n_bootstrap - start)
        idx = rng.integers(0, n, size=(b, n))
        flat = (idx + n * np.arange(b)[:, None]).ravel()
        w = np.bincount(flat, minlength=b * n).reshape(b, n).astype(np.float64)
        for k, v in _weighted_scores(w, r, g, s, keep).items():
            draws.setdefault(k, []).append(v)
    joined = {k: np.concatenate(parts) for k, parts in draws.items()}
    return {k: _percentile_interval(v, confidence) for k, v in joined.items()}, joined


def _percentile_interval(v: np.ndarray, confidence: float) -> tuple[float, float]:
    alpha = (1 - confidence) / 2
    v = v[np.isfinite(v)]
    if not len(v):
        return (math.nan, math.nan)
    return (float(np.quantile(v, alpha)), float(np.quantile(v, 1 - alpha)))


def scores_from_result(result: RadiusResult, **kwargs) -> IntrinsicScores:
    """:func:`intrinsic_scores` of a :class:`RadiusResult`; with ``censored="bound"`` the
    censoring level defaults to the result's ``max_radius``."""
    if kwargs.get("censored") == "bound" and kwargs.get("censor_at") is None:
        kwargs["censor_at"] = result.max_radius
    return intrinsic_scores(result.radius, result.loss, result.status, **kwargs)


# -- subset independence ---------------------------------------------------------------------
def split_by_loss(loss: np.ndarray) -> np.ndarray:
    """Boolean mask (n,) of the easy half: the ``n // 2`` inputs of smallest loss (ties broken
    by input order, a stable sort); the rest is the hard half."""
    loss = np.asarray(loss, dtype=np.float64).reshape(-1)
    order = np.argsort(loss, kind="stable")
    easy = np.zeros(len(loss), bool)
    easy[order[: len(loss) // 2]] = True
    return easy


def relative_variation(a: float, b: float) -> float:
    """``|a - b| / (a + b)``; NaN when ``a + b`` is 0 or either value is not finite."""
    if not (np.isfinite(a) and np.isfinite(b)) or a + b == 0:
        return math.nan
    return abs(a - b) / (a + b)


def subset_independence(
    radius: np.ndarray,
    loss: np.ndarray,
    status: np.ndarray,
    easy: np.ndarray | None = None,
    **kwargs,
) -> SubsetComparison:
    """Scores on the easy and hard subsets and their relative variations.

    ``easy`` is a boolean mask (n,) of the easy subset; by default the half of smallest loss
    (:func:`split_by_loss`). Keyword arguments go to :func:`intrinsic_scores`. Relative
    variations are given for R_m, R_w_correct, R_nu and the slope.
    """
    r, ell, s = _check_inputs(radius, loss, status)
    if easy is None:
        easy = split_by_loss(ell)
    easy = np.asarray(easy)
    if easy.dtype != bool or easy.shape != r.shape:
        raise InputError(f"easy: expected a boolean mask of shape {r.shape}, got dtype "
                         f"{easy.dtype} and shape {easy.shape}")
    if easy.all() or not easy.any():
        raise InputError("easy: both subsets must be non-empty")
    se = intrinsic_scores(r[easy], ell[easy], s[easy], **kwargs)
    # the hard half is resampled with another stream, independent of the easy half's
    sh = intrinsic_scores(r[~easy], ell[~easy], s[~easy],
                          **{**kwargs, "seed": kwargs.get("seed", 0) + 1})
    names = ("R_m", "R_w_correct", "R_nu", "slope")
    rel = {k: relative_variation(getattr(se, k), getattr(sh, k)) for k in names}
    intervals = {}
    if se.draws and sh.draws:
        for k in names:
            a, b = se.draws[k], sh.draws[k]
            with np.errstate(invalid="ignore", divide="ignore"):
                v = np.where((a + b) != 0, np.abs(a - b) / (a + b), np.nan)
            intervals[k] = _percentile_interval(v, se.confidence)
    return SubsetComparison(se, sh, rel, easy, intervals)


def subset_independence_from_result(result: RadiusResult, easy: np.ndarray | None = None,
                                    **kwargs) -> SubsetComparison:
    """:func:`subset_independence` of a :class:`RadiusResult`."""
    if kwargs.get("censored") == "bound" and kwargs.get("censor_at") is None:
        kwargs["censor_at"] = result.max_radius
    return subset_independence(result.radius, result.loss, result.status, easy, **kwargs)
