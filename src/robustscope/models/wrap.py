"""One entry point that turns whatever the user passes into a :class:`Classifier`."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from robustscope.core.checks import check_device
from robustscope.core.errors import ModelError
from robustscope.models.base import Classifier
from robustscope.models.blackbox import ProbaClassifier
from robustscope.models.linear import LinearClassifier
from robustscope.models.names import feature_names, named_input
from robustscope.models.torch_model import TorchClassifier
from robustscope.models.trees import is_tree_ensemble, wrap_tree_model

#: Example inputs the model is called on when it does not say how many classes it has.
PROBE_ROWS = 2

_SKLEARN_LINEAR = {
    "LogisticRegression",
    "LogisticRegressionCV",
    "LinearSVC",
    "SGDClassifier",
    "RidgeClassifier",
    "RidgeClassifierCV",
    "Perceptron",
    "PassiveAggressiveClassifier",
}


def _is_sklearn_linear(obj: object) -> bool:
    try:
        from sklearn.linear_model._base import LinearClassifierMixin
    except ImportError:  # pragma: no cover - sklearn is a dependency
        return False
    fitted = hasattr(obj, "coef_") and hasattr(obj, "intercept_") and hasattr(obj, "classes_")
    linear_type = isinstance(obj, LinearClassifierMixin) or type(obj).__name__ in _SKLEARN_LINEAR
    return fitted and linear_type


def _affine_pipeline(model: object, device) -> LinearClassifier | None:
    """A scikit-learn Pipeline of affine scalers ending in a linear classifier is itself
    linear: fold the scalers into the coefficients (x -> (x - shift) / div)."""
    steps = getattr(model, "steps", None)
    if not steps or not _is_sklearn_linear(steps[-1][1]):
        return None
    final = LinearClassifier.from_sklearn(steps[-1][1], device=device)
    w, b = final.weights, final.bias
    for _, step in reversed(steps[:-1]):
        kind = type(step).__name__
        if kind == "StandardScaler":
            shift = step.mean_ if step.with_mean else 0.0
            div = step.scale_ if step.with_std else 1.0
        elif kind == "MinMaxScaler":  # x * scale_ + min_
            div, shift = 1.0 / step.scale_, -step.min_ / step.scale_
        elif kind == "MaxAbsScaler":
            div, shift = step.scale_, 0.0
        else:
            return None
        w_new = w / np.asarray(div, dtype=np.float64)
        b = b - w_new @ np.broadcast_to(np.asarray(shift, dtype=np.float64), (w.shape[1],))
        w = w_new
    return LinearClassifier(w, b, classes=final.classes, name=f"Pipeline({final.name})",
                            device=device)


def wrap_model(
    model: object,
    n_classes: int | None = None,
    input_shape: tuple[int, ...] | None = None,
    device: str | torch.device = "cpu",
    example: np.ndarray | None = None,
) -> Classifier:
    """Wrap ``model`` for robustscope.

    Accepts a :class:`Classifier` (returned as is); a ``torch.nn.Module`` returning logits;
    a fitted scikit-learn linear classifier (recognised as linear, served by the exact
    solver); raw coefficients ``(W, b)``; any object with ``predict_proba`` (scikit-learn,
    XGBoost, LightGBM, ...); or a plain callable returning probabilities for a 2-D array.

    ``n_classes`` is read from the model where it says (``classes_``) and otherwise found by
    calling the model once on ``example`` (an array of a few inputs).
    """
    if isinstance(model, Classifier):
        return model
    check_device(device)
    clf = _wrap(model, n_classes, input_shape, device, example)
    if clf.feature_names is None:
        clf.feature_names = feature_names(model)
    return clf


def _wrap(model, n_classes, input_shape, device, example) -> Classifier:
    if isinstance(model, torch.nn.Module):
        probed = 0
        if n_classes is None:
            clf = TorchClassifier(model, 2, input_shape, device=device)  # for its dtype
            with torch.no_grad():
                n_classes = _probe_classes(lambda a: model(clf.as_tensor(a)), example,
                                           type(model).__name__)
            probed = min(len(example), PROBE_ROWS)
        return _probed(TorchClassifier(model, n_classes, input_shape, device=device), probed)
    if _is_sklearn_linear(model):
        return LinearClassifier.from_sklearn(model, device=device)
    affine = _affine_pipeline(model, device)
    if affine is not None:
        return affine
    if isinstance(model, tuple) and len(model) == 2:
        weights, bias = (np.asarray(m, dtype=np.float64) for m in model)
        return LinearClassifier(weights, bias, input_shape=input_shape, device=device)
    if is_tree_ensemble(model):
        return wrap_tree_model(model, device)
    predict_proba = getattr(model, "predict_proba", None)
    if callable(predict_proba):
        # a model fitted on a DataFrame is called with one, under its own column names
        predict_proba = named_input(predict_proba, feature_names(model))
        classes = getattr(model, "classes_", None)
        k = n_classes or (len(classes) if classes is not None else None)
        probed = 0
        if k is None:
            k = _probe_classes(predict_proba, example, type(model).__name__)
            probed = min(len(example), PROBE_ROWS)
        return _probed(ProbaClassifier(predict_proba, k, input_shape, classes=classes,
                                       name=type(model).__name__, device=device), probed)
    if callable(model):
        probed = 0
        k = n_classes
        if k is None:
            k = _probe_classes(model, example, getattr(model, "__name__", "callable"))
            probed = min(len(example), PROBE_ROWS)
        return _probed(ProbaClassifier(model, k, input_shape,
                                       name=getattr(model, "__name__", "callable"),
                                       device=device), probed)
    raise ModelError(
        f"cannot wrap an object of type {type(model).__module__}.{type(model).__name__}: "
        "expected a torch.nn.Module returning logits, a fitted scikit-learn / XGBoost / "
        "LightGBM classifier with predict_proba, a linear model's (W, b), or a callable "
        "returning class probabilities"
    )


def _probed(clf: Classifier, rows: int) -> Classifier:
    """Record on ``clf`` that wrapping called the model on the first ``rows`` example inputs
    (a search that wraps the model charges them to those inputs; a fact of the wrapping,
    never changed after)."""
    clf.probed_rows = rows
    return clf


def _reason(exc: BaseException) -> str:
    """An error's message; of TorchScript's (its interpreter's traceback, then the error),
    the last line, which is the error."""
    text = str(exc).strip()
    if "TorchScript interpreter" in text or "Traceback of TorchScript" in text:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        return lines[-1] if lines else type(exc).__name__
    return text


def _probe_classes(fn: Callable, example: np.ndarray | None, name: str) -> int:
    if example is None:
        raise ModelError(
            f"{name}: cannot tell the number of classes; pass n_classes= or example= (a few inputs)"
        )
    rows = np.asarray(example[:PROBE_ROWS])
    try:
        out = fn(rows)
    except Exception as exc:
        raise ModelError(f"{name} raised {type(exc).__name__} on an example input: "
                         f"{_reason(exc)}") from exc
    out = out.detach().cpu().numpy() if torch.is_tensor(out) else np.asarray(out)
    if out.ndim == 1:
        return 2
    if out.ndim != 2:
        raise ModelError(f"{name} returned an output of shape {out.shape}; expected (n, n_classes)")
    return int(out.shape[1])
