"""The black-box tutorial's readings of a radius search, as plain functions.

* :func:`flip_rate` — share of inputs whose decision flips within each strength ``eps``
  (overall and per class); censored inputs are never counted as flipped.
* :func:`score_shift` — probability of the predicted class before and after the perturbation.
* :func:`ood_check` — are the counterexamples outliers for an IsolationForest fitted on the
  training data? (scikit-learn's ``predict`` returns **+1 for an inlier** and -1 for an
  outlier.) The clean inputs are scored too, as the baseline.
* :func:`proxy_a_distance` — how well a domain classifier tells counterexamples from real
  inputs on a held-out split: ``PAD = 2 (1 - 2 err)``, with a Wilson binomial interval and a
  bootstrap interval over the held-out rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from robustscope.core.ecdf import share_at_most
from robustscope.core.errors import InputError
from robustscope.core.result import CENSORED, MISCLASSIFIED, RadiusResult


def _as_2d(X, name: str) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim < 2 or X.shape[0] == 0:
        raise InputError(f"{name} must have shape (n, ...) with n >= 1, got {X.shape}")
    X = X.reshape(X.shape[0], -1)
    if not np.isfinite(X).all():
        row = int(np.argwhere(~np.isfinite(X))[0, 0])
        raise InputError(f"{name}: row {row} is not finite")
    return X


# -- flip rate ---------------------------------------------------------------------------------
def flip_rate(
    radius: np.ndarray | RadiusResult,
    eps: np.ndarray | float,
    labels: np.ndarray | None = None,
    status: np.ndarray | None = None,
    include_misclassified: bool = False,
) -> pd.DataFrame:
    """Cumulative share of inputs whose radius is ``<= eps``, overall and per class.

    Parameters
    ----------
    radius : per-input radii ``(n,)`` (``inf`` = censored) or a :class:`RadiusResult`.
    eps : strengths, in the radius's units (scaled norm).
    labels : class of each input ``(n,)``; adds one curve per class.
    status : per-input status (``RadiusResult.status``); censored inputs count as not flipped
        whatever their radius field holds.
    include_misclassified : count inputs that are already misclassified (radius 0) as
        flipped at every strength; by default they are left out (a flip changes a correct
        decision), so the denominator is the correctly classified inputs (``satisfied``
        ones among them, flipped at every strength: the statement holds already).

    Returns a DataFrame with columns ``group`` (``"all"`` or the class), ``eps``,
    ``flip_rate`` and ``n`` (inputs in the group's denominator).
    """
    if isinstance(radius, RadiusResult):
        result = radius
        radius = result.radius
        labels = result.label if labels is None else labels
        status = result.status if status is None else status
    radius = np.asarray(radius, dtype=np.float64).reshape(-1)
    if np.isnan(radius).any():
        raise InputError(f"radius: row {int(np.flatnonzero(np.isnan(radius))[0])} is NaN")
    if (radius < 0).any():
        raise InputError(f"radius: row {int(np.flatnonzero(radius < 0)[0])} is negative")
    eps = np.atleast_1d(np.asarray(eps, dtype=np.float64))
    n = len(radius)
    censored = ~np.isfinite(radius)
    keep = np.ones(n, dtype=bool)
    if status is not None:
        status = np.asarray(status).reshape(-1)
        if len(status) != n:
            raise InputError(f"status has {len(status)} entries for {n} radii")
        censored |= status == CENSORED
        if not include_misclassified:
            keep &= status != MISCLASSIFIED
    flipped_at = np.where(censored, np.inf, radius)
    groups: list[tuple[object, np.ndarray]] = [("all", keep)]
    if labels is not None:
        labels = np.asarray(labels).reshape(-1)
        if len(labels) != n:
            raise InputError(f"labels has {len(labels)} entries for {n} radii")
        groups += [(c, keep & (labels == c)) for c in np.unique(labels)]
    rows = []
    for name, mask in groups:
        m = int(mask.sum())
        share = share_at_most(flipped_at[mask], eps)
        rows.append(pd.DataFrame({"group": [name] * len(eps), "eps": eps, "flip_rate": share,
                                  "n": m}))
    return pd.concat(rows, ignore_index=True)


# -- score shift -------------------------------------------------------------------------------
def score_shift(proba: np.ndarray, proba_adv: np.ndarray,
                prediction: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Probability of the originally predicted class before and after the perturbation.

    ``proba``, ``proba_adv`` have shape ``(n, K)``; ``prediction`` ``(n,)`` defaults to the
    argmax of ``proba``. Returns ``(before (n,), after (n,))``.
    """
    proba = np.asarray(proba, dtype=np.float64)
    proba_adv = np.asarray(proba_adv, dtype=np.float64)
    if proba.ndim != 2 or proba.shape != proba_adv.shape:
        raise InputError(f"proba {proba.shape} and proba_adv {proba_adv.shape} must both be "
                         "(n, n_classes)")
    pred = proba.argmax(axis=1) if prediction is None else np.asarray(prediction).reshape(-1)
    rows = np.arange(len(proba))
    return proba[rows, pred], proba_adv[rows, pred]


# -- out-of-distribution check -----------------------------------------------------------------
@dataclass
class OODReport:
    """IsolationForest verdicts (fitted on training data) for clean inputs and counterexamples.

    ``*_inlier`` are boolean arrays (``predict == 1``); ``*_score`` are ``score_samples``
    values (higher = more normal); ``threshold`` is the score below which a point is an
    outlier (``offset_``).
    """

    clean_inlier: np.ndarray
    adv_inlier: np.ndarray
    clean_score: np.ndarray
    adv_score: np.ndarray
    threshold: float

    @property
    def clean_outliers(self) -> int:
        return int((~self.clean_inlier).sum())

    @property
    def adv_outliers(self) -> int:
        return int((~self.adv_inlier).sum())

    @property
    def clean_outlier_rate(self) -> float:
        return float((~self.clean_inlier).mean()) if len(self.clean_inlier) else float("nan")

    @property
    def adv_outlier_rate(self) -> float:
        return float((~self.adv_inlier).mean()) if len(self.adv_inlier) else float("nan")

    def summary(self) -> dict[str, float]:
        return {"clean_n": len(self.clean_inlier), "clean_outliers": self.clean_outliers,
                "clean_outlier_rate": self.clean_outlier_rate,
                "adv_n": len(self.adv_inlier), "adv_outliers": self.adv_outliers,
                "adv_outlier_rate": self.adv_outlier_rate}


def ood_check(X_train: np.ndarray, X_clean: np.ndarray, X_adv: np.ndarray, seed: int = 0,
              contamination: float | str = "auto", n_estimators: int = 200) -> OODReport:
    """Fit an IsolationForest on ``X_train`` and score ``X_clean`` (baseline) and ``X_adv``.

    Pass only the counterexamples that were found (e.g. ``result.x_adv[result.found &
    (result.status != "misclassified")]``); rows are flattened.
    """
    from sklearn.ensemble import IsolationForest

    X_train = _as_2d(X_train, "X_train")
    X_clean = _as_2d(X_clean, "X_clean")
    X_adv = _as_2d(X_adv, "X_adv")
    for name, X in (("X_clean", X_clean), ("X_adv", X_adv)):
        if X.shape[1] != X_train.shape[1]:
            raise InputError(f"{name} has {X.shape[1]} features; X_train has {X_train.shape[1]}")
    forest = IsolationForest(n_estimators=n_estimators, contamination=contamination,
                             random_state=seed).fit(X_train)
    # sklearn: predict == 1 means INLIER, -1 means outlier
    return OODReport(clean_inlier=forest.predict(X_clean) == 1,
                     adv_inlier=forest.predict(X_adv) == 1,
                     clean_score=forest.score_samples(X_clean),
                     adv_score=forest.score_samples(X_adv),
                     threshold=float(forest.offset_))


# -- Proxy-A distance --------------------------------------------------------------------------
@dataclass
class PADResult:
    """Proxy-A distance ``2 (1 - 2 err)`` of a domain classifier on a held-out split.

    ``interval`` is the Wilson binomial interval on ``err`` mapped to PAD; ``bootstrap`` the
    percentile bootstrap interval over held-out rows; ``n_test`` held-out rows.
    """

    pad: float
    error: float
    n_test: int
    interval: tuple[float, float]
    bootstrap: tuple[float, float]


def _wilson(k: int, n: int, alpha: float) -> tuple[float, float]:
    z = stats.norm.ppf(1 - alpha / 2)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def proxy_a_distance(X_real: np.ndarray, X_adv: np.ndarray, seed: int = 0,
                     test_size: float = 0.3, paired: bool = False, classifier=None,
                     n_boot: int = 1000, alpha: float = 0.05) -> PADResult:
    """PAD between real inputs and counterexamples, on a held-out split.

    The larger set is subsampled to the size of the smaller so that both domains weigh the
    same (otherwise a constant guess already scores below 0.5 error). With ``paired=True``
    (row ``i`` of ``X_adv`` was made from row ``i`` of ``X_real``) both rows of a pair fall
    on the same side of the split, so the classifier cannot learn a pair on one side and
    test on its twin. The default domain classifier is a small gradient-boosted tree
    ensemble (scikit-learn ``HistGradientBoostingClassifier``).

    ``PAD = 2 (1 - 2 err)`` with ``err`` the 0-1 error on the held-out rows: 0 when the
    domains cannot be told apart (err = 0.5), 2 when they separate perfectly; negative
    values are sampling noise around 0.
    """
    from sklearn.base import clone
    from sklearn.ensemble import HistGradientBoostingClassifier

    X_real, X_adv = _as_2d(X_real, "X_real"), _as_2d(X_adv, "X_adv")
    if X_real.shape[1] != X_adv.shape[1]:
        raise InputError(f"X_adv has {X_adv.shape[1]} features; X_real has {X_real.shape[1]}")
    if not 0 < test_size < 1:
        raise InputError(f"test_size must be in (0, 1), got {test_size}")
    if paired and len(X_real) != len(X_adv):
        raise InputError(f"paired=True needs as many rows in X_real ({len(X_real)}) as in "
                         f"X_adv ({len(X_adv)})")
    rng = np.random.default_rng(seed)
    m = min(len(X_real), len(X_adv))
    if m < 5:
        raise InputError(f"proxy_a_distance needs at least 5 rows per domain, got {m}")
    if paired:
        pairs = rng.permutation(len(X_real))[:m]
        n_test = max(1, int(round(test_size * m)))
        te_p, tr_p = pairs[:n_test], pairs[n_test:]
        real_tr, real_te, adv_tr, adv_te = X_real[tr_p], X_real[te_p], X_adv[tr_p], X_adv[te_p]
    else:
        real = X_real[rng.permutation(len(X_real))[:m]]
        adv = X_adv[rng.permutation(len(X_adv))[:m]]
        n_test = max(1, int(round(test_size * m)))
        real_te, real_tr, adv_te, adv_tr = real[:n_test], real[n_test:], adv[:n_test], adv[n_test:]
    X_tr = np.vstack([real_tr, adv_tr])
    y_tr = np.r_[np.zeros(len(real_tr)), np.ones(len(adv_tr))]
    X_te = np.vstack([real_te, adv_te])
    y_te = np.r_[np.zeros(len(real_te)), np.ones(len(adv_te))]
    model = (HistGradientBoostingClassifier(max_iter=50, max_depth=3, random_state=seed)
             if classifier is None else clone(classifier))
    model.fit(X_tr, y_tr)
    wrong = (model.predict(X_te) != y_te).astype(np.float64)
    err = float(wrong.mean())
    lo_err, hi_err = _wilson(int(wrong.sum()), len(wrong), alpha)
    boot = rng.integers(0, len(wrong), size=(n_boot, len(wrong)))
    boot_pad = 2 * (1 - 2 * wrong[boot].mean(axis=1))
    q = np.quantile(boot_pad, [alpha / 2, 1 - alpha / 2])
    return PADResult(pad=2 * (1 - 2 * err), error=err, n_test=len(wrong),
                     interval=(2 * (1 - 2 * hi_err), 2 * (1 - 2 * lo_err)),
                     bootstrap=(float(q[0]), float(q[1])))
