"""Affine classifiers: logits = x_flat @ W.T + b. The exact solver serves them."""

from __future__ import annotations

import numpy as np
import torch

from robustscope.core.errors import ModelError
from robustscope.models.base import Classifier


class LinearClassifier(Classifier):
    """Multiclass affine model in float64.

    Parameters
    ----------
    weights : array (n_classes, n_features)
    bias : array (n_classes,)
    classes : labels of the rows of ``weights`` (default ``0..n_classes-1``).
    """

    differentiable = True
    is_linear = True

    def __init__(
        self,
        weights: np.ndarray,
        bias: np.ndarray,
        classes: np.ndarray | None = None,
        input_shape: tuple[int, ...] | None = None,
        name: str = "linear",
        device: str | torch.device = "cpu",
    ) -> None:
        w = np.asarray(weights, dtype=np.float64)
        b = np.asarray(bias, dtype=np.float64).reshape(-1)
        if w.ndim != 2 or b.shape != (w.shape[0],):
            raise ModelError(
                f"{name}: weights must be (n_classes, n_features) and bias (n_classes,); "
                f"got {w.shape} and {b.shape}"
            )
        if not (np.isfinite(w).all() and np.isfinite(b).all()):
            raise ModelError(f"{name}: non-finite coefficients")
        super().__init__(w.shape[0], input_shape or (w.shape[1],), device, torch.float64, name)
        self.weights = w
        self.bias = b
        self.classes = None if classes is None else np.asarray(classes)
        self._w = torch.as_tensor(w, device=self.device)
        self._b = torch.as_tensor(b, device=self.device)

    @classmethod
    def from_sklearn(cls, estimator, device: str | torch.device = "cpu") -> LinearClassifier:
        """From a fitted scikit-learn linear classifier (``coef_``, ``intercept_``, ``classes_``).

        A binary model's single score s becomes the two logits ``(0, s)``, so that softmax of
        the logits equals the logistic model's probabilities.
        """
        coef = np.asarray(estimator.coef_, dtype=np.float64)
        intercept = np.atleast_1d(np.asarray(estimator.intercept_, dtype=np.float64))
        classes = np.asarray(estimator.classes_)
        if coef.shape[0] == 1 and len(classes) == 2:
            coef = np.vstack([np.zeros_like(coef), coef])
            intercept = np.array([0.0, intercept[0]])
        return cls(coef, intercept, classes=classes, name=type(estimator).__name__, device=device)

    def linear_parameters(self) -> tuple[np.ndarray, np.ndarray]:
        return self.weights, self.bias

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(x.shape[0], -1).to(torch.float64)
        return flat @ self._w.T + self._b
