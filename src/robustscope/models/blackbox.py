"""Black-box adapter: any callable that returns class probabilities for a 2-D array."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from robustscope.core.errors import ModelError
from robustscope.models.base import PROBA_FLOOR, Classifier

#: Smallest tolerated deviation of a probability from [0, 1] (exact and float64 outputs).
BOUND_TOLERANCE = 1e-9
#: Largest tolerated deviation of a row's sum from 1 at any precision: models that round
#: their probabilities (to 3 decimals, say) are still probability models.
SUM_TOLERANCE = 1e-3


def probability_tolerance(dtype: np.dtype, n_classes: int) -> float:
    """How far probabilities of ``dtype`` may stray from [0, 1]: a few rounding errors per
    class of the precision they were computed in (about 1e-5 for float32,
    :data:`BOUND_TOLERANCE` for float64 and exact types)."""
    dtype = np.dtype(dtype)
    if not np.issubdtype(dtype, np.floating):
        return BOUND_TOLERANCE
    return max(BOUND_TOLERANCE, 16 * float(np.finfo(dtype).eps) * max(n_classes, 8))


class ProbaClassifier(Classifier):
    """Wraps ``predict_proba(X: ndarray (n, d)) -> ndarray (n, n_classes)``.

    The callable sees float64 numpy arrays with one row per input (images are flattened);
    nothing about it needs to be differentiable. Its logits are ``log(clamp(p, 1e-12))``.
    Every output is checked: finite, in [0, 1], rows summing to 1, within the rounding of
    the precision it is returned in (:func:`probability_tolerance`).
    """

    differentiable = False

    def __init__(
        self,
        predict_proba: Callable[[np.ndarray], np.ndarray],
        n_classes: int,
        input_shape: tuple[int, ...] | None = None,
        classes: np.ndarray | None = None,
        name: str = "predict_proba",
        device: str | torch.device = "cpu",
    ) -> None:
        super().__init__(n_classes, input_shape, device, torch.float64, name)
        self._predict_proba = predict_proba
        # a bound method (``model.predict_proba``): its model's own threads are limited too
        self.native = getattr(predict_proba, "__self__", None)
        self.classes = None if classes is None else np.asarray(classes)

    def probabilities_numpy(self, x: np.ndarray) -> np.ndarray:
        """Call the wrapped function and validate its output, shape ``(n, n_classes)``."""
        try:
            p = np.asarray(self._predict_proba(x))
        except Exception as exc:
            raise ModelError(f"{self.name} raised {type(exc).__name__}: {exc}") from exc
        tol = probability_tolerance(p.dtype, self.n_classes)
        p = p.astype(np.float64, copy=False)
        if p.ndim == 1 and self.n_classes == 2:  # boosters that return P(class 1) only
            p = np.stack([1.0 - p, p], axis=1)
        if p.shape != (x.shape[0], self.n_classes):
            raise ModelError(
                f"{self.name} returned shape {p.shape}; expected ({x.shape[0]}, {self.n_classes})"
            )
        bad = ~np.isfinite(p).all(axis=1) | (p < -tol).any(axis=1) | (p > 1 + tol).any(axis=1)
        bad |= np.abs(p.sum(axis=1) - 1.0) > max(tol, SUM_TOLERANCE)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise ModelError(
                f"{self.name} returned non-probabilities (row {row}: {p[row][:6].tolist()}, "
                f"sum {p[row].sum():.6g}); pass a function that returns class probabilities"
            )
        return p

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.detach().reshape(x.shape[0], -1).cpu().numpy().astype(np.float64, copy=False)
        p = self.probabilities_numpy(flat)
        return torch.log(torch.as_tensor(p, device=self.device).clamp_min(PROBA_FLOOR))
