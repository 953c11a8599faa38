"""Feature names a model was fitted with, and calling such a model with named data.

A model fitted on a pandas DataFrame remembers its column names: scikit-learn and XGBoost's
scikit-learn API (``feature_names_in_``), an XGBoost ``Booster`` (``feature_names``),
LightGBM (``feature_name_``, a ``Booster``'s ``feature_name()``). Some of them refuse, or warn
about, bare arrays. robustscope works on float64 arrays internally; the adapters hand such a
model a DataFrame with its own column names, in its own order.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

#: LightGBM's names for the columns of a model fitted on a bare array: no names.
_LIGHTGBM_DEFAULT = re.compile(r"Column_\d+")


def feature_names(model: object) -> list[str] | None:
    """The column names ``model`` was fitted with, in its order, or ``None`` when it has none
    (fitted on a bare array). A wrapped :class:`Classifier` gives the names of the model it
    wraps (its ``feature_names`` attribute)."""
    names = getattr(model, "feature_names", None)  # a Classifier, an xgboost.Booster
    if callable(names):
        names = None
    if names is None:
        names = getattr(model, "feature_names_in_", None)  # scikit-learn, XGBClassifier
    if names is None:
        names = _lightgbm_names(model)
    if names is None:
        return None
    names = [str(n) for n in np.asarray(names, dtype=object).tolist()]
    return names or None


def _lightgbm_names(model: object) -> list[str] | None:
    if not type(model).__module__.startswith("lightgbm"):
        return None
    try:
        names = (model.feature_name() if type(model).__name__ == "Booster"
                 else model.feature_name_)
    except Exception:  # not fitted
        return None
    if all(_LIGHTGBM_DEFAULT.fullmatch(str(n)) for n in names):
        return None
    return list(names)


def named_input(fn: Callable, names: list[str] | None) -> Callable:
    """``fn`` called with a DataFrame whose columns are ``names`` (rows of a float64 array
    ``(n, d)``), or ``fn`` itself when ``names`` is ``None``."""
    if names is None:
        return fn
    import pandas as pd

    def call(x: np.ndarray):
        return fn(pd.DataFrame(np.asarray(x).reshape(len(x), -1), columns=names))

    return call
