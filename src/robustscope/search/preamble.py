"""The preamble every entry point of the search shares, written once.

:func:`robustscope.radius`, :func:`robustscope.grid_robustness` and
:func:`robustscope.random_directions_radius` each wrap the model (:func:`wrap_inputs`), take
a default feature space (:func:`default_space`), check the inputs against it, map the labels
through the model's ``classes`` where it has them (:func:`class_indices`, one label
convention: class values where the model knows its classes, indices otherwise), resolve
``max_radius`` (:func:`resolve_max_radius`) and open the ledger the search charges, with
the wrapping probe on it (:func:`open_ledger`).
"""

from __future__ import annotations

import math

import numpy as np

from robustscope.core.checks import check_labels
from robustscope.core.errors import InputError
from robustscope.core.space import FeatureSpace
from robustscope.models.base import Classifier, QueryLedger
from robustscope.models.wrap import PROBE_ROWS, wrap_model
from robustscope.search.metering import charge_probe
from robustscope.search.plan import StageLedger
from robustscope.search.threads import fit_threads


def wrap_inputs(model: object, X, device, n_classes: int | None = None,
                example=None) -> Classifier:
    """``model`` wrapped for inputs shaped like ``X`` ``(n, *shape)`` on ``device`` (a
    :class:`Classifier` is returned as is); ``example`` (default ``X``) are the rows a raw
    model may be probed on."""
    if not isinstance(model, Classifier):
        # wrapping may call the model on a few rows: under the search's thread count (and
        # the model's own n_jobs / nthread, or those of a bound predict_proba's model)
        rows = X if example is None else example
        native = getattr(model, "__self__", model)
        fit_threads(min(len(rows), PROBE_ROWS) * int(np.prod(np.shape(rows)[1:])), native)
    return wrap_model(model, n_classes=n_classes, input_shape=tuple(X.shape[1:]),
                      device=device, example=X if example is None else example)


def default_space(X) -> FeatureSpace:
    """The feature space searched when none is given: the box [0, 1] for images (``X`` of
    more than two dimensions), per-column data ranges for tabular data."""
    return FeatureSpace.box(X.shape[1:]) if X.ndim > 2 else FeatureSpace.from_data(X)


def unbounded_space(shape: tuple[int, ...]) -> FeatureSpace:
    """No bounds and scale 1 on every feature (the random-direction estimator's default:
    the paper's isotropic radius ignores the data's ranges)."""
    d = int(np.prod(shape))
    return FeatureSpace.from_arrays(np.full(d, -np.inf), np.full(d, np.inf), np.ones(d),
                                    shape=tuple(shape))


def class_indices(model: Classifier, y, n: int) -> np.ndarray:
    """Labels ``y`` ``(n,)`` as class indices: mapped through the model's ``classes`` where
    it has them, else checked as indices (:func:`~robustscope.core.checks.check_labels`)."""
    return check_labels(y, n, model.n_classes, getattr(model, "classes", None))


def resolve_max_radius(max_radius: float | None, threat, space: FeatureSpace) -> float:
    """``max_radius``, by default the norm of a perturbation of one scale unit on every
    feature (1 for Linf, sqrt(d) for L2, d for L1); it must be finite and > 0."""
    if max_radius is None:
        max_radius = {math.inf: 1.0, 2.0: math.sqrt(space.n_features),
                      1.0: float(space.n_features)}[threat.p]
    if not (max_radius > 0 and math.isfinite(max_radius)):
        raise InputError(f"max_radius must be finite and > 0, got {max_radius}")
    return max_radius


def open_ledger(model: Classifier, n: int, budget: int | None = None,
                stages: StageLedger | None = None, probe: bool = True) -> QueryLedger:
    """A ledger of ``n`` inputs (``budget`` passes each; ``None``: no limit) with the
    wrapping probe's rows charged to its first inputs (``probe``; once per adapter, see
    :func:`~robustscope.search.metering.charge_probe`; under ``stages``, as the part
    ``wrapping probe``)."""
    ledger = QueryLedger(n, budget)
    if probe and stages is not None:
        with stages.stage("wrapping probe", ledger):
            charge_probe(model, ledger)  # wrapping may have called the model on the first rows
    elif probe:
        charge_probe(model, ledger)
    return ledger
