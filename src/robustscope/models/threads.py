"""How a model's own library is told a thread count: the mechanism, never the policy.

A model adapter offers a :data:`Setter` (:meth:`Classifier.thread_setter
<robustscope.models.base.Classifier.thread_setter>`): ``setter(n)`` gives the library ``n``
threads, ``setter(None)`` restores the setting it had when the setter was made. Which count,
and when, is decided by the search's thread policy (:mod:`robustscope.search.threads`); an
adapter never switches threads itself.

Setters exist for an XGBoost booster's ``nthread`` (also under an ``XGBClassifier``), a
LightGBM or scikit-learn estimator's ``n_jobs`` (:func:`native_thread_setter`), and for
libraries that take the count per call (a LightGBM booster's ``predict(num_threads=...)``,
the ONNX Runtime session to run), through a :class:`ThreadCount` the adapter's calls read.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence

#: ``setter(n)``: give a model ``n`` threads; ``setter(None)``: restore its own setting.
Setter = Callable[[int | None], None]


class ThreadCount:
    """The thread count a library takes per call (``value``; ``None``: the library's own
    default), set only through :meth:`set` (the adapter's setter). Outside a search's
    thread scope it stays ``None``."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: int | None = None

    def set(self, n: int | None) -> None:
        self.value = None if n is None else int(n)


def native_thread_setter(obj: object) -> Setter | None:
    """A :data:`Setter` for ``obj``'s own thread count: an XGBoost booster's ``nthread`` (also
    under an ``XGBClassifier``), a LightGBM or scikit-learn estimator's ``n_jobs``; ``None``
    for anything else. The setting ``obj`` has now is what ``setter(None)`` restores."""
    if obj is None:
        return None
    xgb = sys.modules.get("xgboost")
    if xgb is not None and isinstance(obj, xgb.XGBModel | xgb.Booster):
        try:
            booster = obj if isinstance(obj, xgb.Booster) else obj.get_booster()
        except Exception:  # not fitted
            return None
        return _xgboost_setter(booster)
    get_params = getattr(obj, "get_params", None)
    set_params = getattr(obj, "set_params", None)
    if callable(get_params) and callable(set_params):
        try:
            params = get_params(deep=False)
        except Exception:
            return None
        if "n_jobs" in params:
            return _n_jobs_setter(obj, params["n_jobs"])
    return None


def combined(setters: Sequence[Setter | None]) -> Setter | None:
    """One :data:`Setter` calling each of ``setters`` (``None`` entries skipped; ``None``
    when none is left)."""
    kept = [s for s in setters if s is not None]
    if not kept:
        return None
    if len(kept) == 1:
        return kept[0]

    def setter(n: int | None) -> None:
        for s in kept:
            s(n)

    return setter


def _xgboost_setter(booster) -> Setter:
    config = json.loads(booster.save_config())
    own = config["learner"]["generic_param"].get("nthread", "0")

    def setter(n: int | None) -> None:
        booster.set_param("nthread", own if n is None else int(n))

    return setter


def _n_jobs_setter(estimator, own) -> Setter:
    def setter(n: int | None) -> None:
        estimator.set_params(n_jobs=own if n is None else int(n))

    return setter
