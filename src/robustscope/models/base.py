"""The model concept: what a classifier says, and at what cost.

Every adapter turns a user's classifier into a :class:`Classifier` that takes a batch of
inputs as a torch tensor of shape ``(n, *input_shape)`` in the *original* feature units and
returns logits of shape ``(n, n_classes)``. Adapters are stateless between calls: they
compute (logits, gradients, linear parameters) and offer the mechanism to set their library's
threads (:meth:`Classifier.thread_setter`), nothing more. What a call costs is charged by a
metered view built for that call (:class:`~robustscope.models.metered.MeteredModel`) to a
:class:`QueryLedger`, per input, forward and backward passes counted apart.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from robustscope.core.errors import ModelError
from robustscope.core.numerics import PROBA_FLOOR  # noqa: F401 - re-exported
from robustscope.models.threads import Setter, ThreadCount, combined, native_thread_setter


class QueryLedger:
    """Per-input counts of forward and backward passes.

    Parameters
    ----------
    n : int
        Number of inputs being evaluated.
    budget : int or None
        Largest number of passes (forward + backward) allowed per input; ``None`` = unlimited.
    """

    def __init__(self, n: int, budget: int | None = None) -> None:
        self.forward = np.zeros(n, dtype=np.int64)
        self.backward = np.zeros(n, dtype=np.int64)
        self.budget = budget
        #: Called after every charge (a search's progress watch), or ``None``.
        self.watch: Callable[[], None] | None = None

    def used(self, idx: np.ndarray | None = None) -> np.ndarray:
        """Passes used so far, forward + backward, shape ``(n,)`` or ``(len(idx),)``."""
        total = self.forward + self.backward
        return total if idx is None else total[idx]

    def remaining(self, idx: np.ndarray) -> np.ndarray:
        """Passes still allowed for inputs ``idx`` (a large number when unbudgeted)."""
        if self.budget is None:
            return np.full(len(idx), np.iinfo(np.int64).max // 4, dtype=np.int64)
        return self.budget - self.used(idx)


class Classifier:
    """Base class of all model adapters.

    Subclasses implement :meth:`_logits` (and set ``differentiable`` when autograd gives true
    gradients). Inputs are float tensors of shape ``(n, *input_shape)``; outputs are logits of
    shape ``(n, n_classes)``. For models that only give probabilities, logits are
    ``log(clamp(p, PROBA_FLOOR))``, so that softmax(logits) = p.
    """

    #: True when gradients of the logits with respect to the input are exact (autograd).
    differentiable: bool = False
    #: True when the model is affine in its input and :meth:`linear_parameters` is available.
    is_linear: bool = False
    #: Column names the wrapped model was fitted with (``None``: it has none); inputs given
    #: as a DataFrame are matched to them by name.
    feature_names: list[str] | None = None
    #: The thread count the adapter's calls pass to their library (a LightGBM booster's
    #: ``num_threads``, the ONNX Runtime session to run); ``None``: the library takes none.
    thread_count: ThreadCount | None = None

    def __init__(
        self,
        n_classes: int,
        input_shape: tuple[int, ...] | None,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float64,
        name: str = "model",
    ) -> None:
        if n_classes < 2:
            raise ModelError(f"{name}: a classifier needs at least 2 classes, got {n_classes}")
        self.n_classes = int(n_classes)
        self.input_shape = None if input_shape is None else tuple(int(s) for s in input_shape)
        self.device = torch.device(device)
        self.dtype = dtype
        self.name = name
        #: Example rows (the first inputs given to :func:`wrap_model`) the model was called on
        #: to learn its number of classes, when it was wrapped: a search that wraps the model
        #: charges them to those inputs.
        self.probed_rows = 0
        #: The library object behind the adapter (an XGBoost booster, a scikit-learn
        #: estimator, ...) whose own thread setting :meth:`thread_setter` sets; ``None``
        #: when none.
        self.native: object | None = None

    def thread_setter(self) -> Setter | None:
        """The mechanism to set this model's own library threads (``setter(n)``;
        ``setter(None)`` restores the setting the library has now), or ``None`` when it has
        none. The adapter never calls it: the search's thread policy does
        (:mod:`robustscope.search.threads`)."""
        count = self.thread_count
        return combined([native_thread_setter(self.native),
                         None if count is None else count.set])

    # -- subclasses -------------------------------------------------------------------------
    def _logits(self, x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def linear_parameters(self) -> tuple[np.ndarray, np.ndarray]:
        """``(W, b)`` with logits = x_flat @ W.T + b; W of shape (n_classes, n_features)."""
        raise ModelError(f"{self.name} is not a linear model")

    # -- public calls -----------------------------------------------------------------------
    def as_tensor(self, x: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Convert ``x`` to a tensor on this model's device and dtype (a read-only array, e.g.
        memory-mapped data, is copied: torch cannot share it safely)."""
        if isinstance(x, np.ndarray) and not x.flags.writeable:
            x = np.array(x)
        return torch.as_tensor(x, dtype=self.dtype, device=self.device)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Logits, shape ``(n, n_classes)`` (one forward pass per row, charged by a metered
        view when the call is made through one)."""
        out = self._logits(x)
        if out.ndim != 2 or out.shape[0] != x.shape[0] or out.shape[1] != self.n_classes:
            raise ModelError(
                f"{self.name} returned an output of shape {tuple(out.shape)}; "
                f"expected ({x.shape[0]}, {self.n_classes})"
            )
        return out

    def predict_proba(self, x: torch.Tensor) -> torch.Tensor:
        """Class probabilities, shape ``(n, n_classes)``."""
        with torch.no_grad():
            return torch.softmax(self.logits(x), dim=1)

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        """Predicted class (argmax of the logits), shape ``(n,)``."""
        with torch.no_grad():
            return self.logits(x).argmax(dim=1)

    def gradient_cost(self, n_features: int) -> int:
        """Passes charged per input for one :meth:`value_and_grad` call."""
        return 2 if self.differentiable else 2 * n_features + 1

    def value_and_grad(
        self,
        x: torch.Tensor,
        objective: Callable[[torch.Tensor], torch.Tensor],
        fd_step: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Logits, per-row objective values and the gradient of their sum with respect to ``x``.

        ``objective`` maps logits ``(n, K)`` to values ``(n,)``. Differentiable models use
        autograd (one forward and one backward pass per row); others use central finite
        differences with a per-feature step ``fd_step`` in original units, shape
        ``input_shape`` or ``(n, *input_shape)`` (``2·d + 1`` forward passes per row).
        """
        if self.differentiable:
            return autograd_gradient(self, x, objective)
        return central_differences(self, x, objective, fd_step)


def autograd_gradient(model: Classifier, x: torch.Tensor,
                      objective: Callable[[torch.Tensor], torch.Tensor],
                      backward: Callable[[int], None] | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:meth:`Classifier.value_and_grad` by autograd through ``model.logits``;
    ``backward(rows)`` is called once the objective is known, before the backward pass (a
    metered view charges it there)."""
    with torch.enable_grad():
        xg = x.detach().clone().requires_grad_(True)
        logits = model.logits(xg)
        values = objective(logits)
        if backward is not None:
            backward(x.shape[0])
        (grad,) = torch.autograd.grad(values.sum(), xg)
    return logits.detach(), values.detach(), grad


def evaluate_offsets(model: Classifier, x: torch.Tensor, offsets: torch.Tensor,
                     objective: Callable[[torch.Tensor], torch.Tensor]
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Query ``x`` and ``x + offsets`` in one batched call, for gradient estimates.

    ``offsets`` has shape ``(n, m, d)`` in original units. The ``n·(m + 1)`` rows are grouped
    per input, so a charge gives each input ``m + 1`` passes. Returns logits at ``x``
    ``(n, K)``, objective at ``x`` ``(n,)`` and objective at every offset ``(n, m)``.
    """
    n = x.shape[0]
    flat = x.reshape(n, 1, -1)
    m = offsets.shape[1]
    rows = torch.cat([flat, flat + offsets], dim=1)  # (n, m + 1, d)
    with torch.no_grad():
        logits_all = model.logits(rows.reshape(n * (m + 1), *x.shape[1:]))
        per_offset = logits_all.reshape(n, m + 1, -1).transpose(0, 1)  # (m + 1, n, K)
        # the objective sees n rows at a time, in input order, as it expects
        values = torch.stack([objective(chunk) for chunk in per_offset], dim=1)  # (n, m + 1)
    return per_offset[0], values[:, 0], values[:, 1:]


def central_differences(
    model: Classifier,
    x: torch.Tensor,
    objective: Callable[[torch.Tensor], torch.Tensor],
    fd_step: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Central finite differences, one batched call of ``n·(2d + 1)`` rows through
    ``model.logits`` (a metered view charges them)."""
    n = x.shape[0]
    d = int(np.prod(x.shape[1:]))
    if fd_step is None:
        step = torch.full((n, d), 1e-3, dtype=x.dtype, device=x.device)
    else:
        step = torch.as_tensor(fd_step, dtype=x.dtype, device=x.device).reshape(-1, d)
        step = step.expand(n, d)
    eye = torch.eye(d, dtype=x.dtype, device=x.device)
    offsets = eye.unsqueeze(0) * step.unsqueeze(1)  # (n, d, d)
    logits, values, probes = evaluate_offsets(model, x, torch.cat([offsets, -offsets], 1),
                                              objective)
    grad = (probes[:, :d] - probes[:, d:]) / (2 * step)
    return logits, values, grad.reshape(x.shape)
