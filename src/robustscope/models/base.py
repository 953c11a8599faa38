"""The model concept: what a classifier says, and at what cost.

Every adapter turns a user's classifier into a :class:`Classifier` that takes a batch of
inputs as a torch tensor of shape ``(n, *input_shape)`` in the *original* feature units and
returns logits of shape ``(n, n_classes)``. Calls are charged to a :class:`QueryLedger`, per
input, forward and backward passes counted apart.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

from robustscope.core.errors import BudgetExhausted, ModelError
from robustscope.core.numerics import PROBA_FLOOR  # noqa: F401 - re-exported
from robustscope.models.threads import fit_threads


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

    def used(self, idx: np.ndarray | None = None) -> np.ndarray:
        """Passes used so far, forward + backward, shape ``(n,)`` or ``(len(idx),)``."""
        total = self.forward + self.backward
        return total if idx is None else total[idx]

    def remaining(self, idx: np.ndarray) -> np.ndarray:
        """Passes still allowed for inputs ``idx`` (a large number when unbudgeted)."""
        if self.budget is None:
            return np.full(len(idx), np.iinfo(np.int64).max // 4, dtype=np.int64)
        return self.budget - self.used(idx)


@dataclass
class _Charge:
    ledger: QueryLedger
    owners: np.ndarray  # input index of each row of the batch being worked on
    #: how often each owner appears among the owners (``None``: each once, the usual case)
    repeats: np.ndarray | None = None

    @classmethod
    def of(cls, ledger: QueryLedger, owners: np.ndarray) -> _Charge:
        owners = np.asarray(owners, dtype=np.int64)
        counts = np.bincount(owners) if len(owners) else owners
        repeats = counts[owners] if len(owners) and counts.max() > 1 else None
        return cls(ledger, owners, repeats)


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
        self._charge: _Charge | None = None
        #: Rows passed through the model since creation, all charges included.
        self.total_forward = 0
        self.total_backward = 0
        #: Example rows (the first inputs given to :func:`wrap_model`) the model was called on
        #: to learn its number of classes; a search charges them to those inputs once.
        self.probed_rows = 0
        #: The library object behind the adapter (an XGBoost booster, a scikit-learn
        #: estimator, ...) whose own thread setting a search limits; ``None`` when none.
        self.native: object | None = None

    def charge_probe(self, ledger: QueryLedger) -> None:
        """Charge the wrapping probe's rows (one forward pass each) to the first inputs of
        ``ledger``, once."""
        rows = min(self.probed_rows, len(ledger.forward))
        ledger.forward[:rows] += 1
        self.total_forward += rows
        self.probed_rows = 0

    # -- subclasses -------------------------------------------------------------------------
    def _logits(self, x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def linear_parameters(self) -> tuple[np.ndarray, np.ndarray]:
        """``(W, b)`` with logits = x_flat @ W.T + b; W of shape (n_classes, n_features)."""
        raise ModelError(f"{self.name} is not a linear model")

    # -- accounting -------------------------------------------------------------------------
    @contextlib.contextmanager
    def charging(self, ledger: QueryLedger, owners: np.ndarray) -> Iterator[None]:
        """Charge every call made inside the block to inputs ``owners``.

        A call on ``B`` rows while ``m = len(owners)`` inputs are being worked on charges
        ``B / m`` passes to each of them (``B`` must be a multiple of ``m``): solvers that
        expand a batch (restarts, finite differences) keep rows grouped per input.
        """
        previous = self._charge
        self._charge = _Charge.of(ledger, owners)
        try:
            yield
        finally:
            self._charge = previous

    @contextlib.contextmanager
    def narrowed(self, rows: np.ndarray | torch.Tensor) -> Iterator[None]:
        """Inside a :meth:`charging` block over ``m`` inputs, charge the calls of the block
        to the subset ``rows`` (positions ``0..m-1`` of the current owners): for solvers
        that continue on some of their inputs only. Without a charge, does nothing."""
        charge = self._charge
        if charge is None:
            yield
            return
        rows = rows.cpu().numpy() if torch.is_tensor(rows) else np.asarray(rows)
        with self.charging(charge.ledger, charge.owners[rows.astype(np.int64)]):
            yield

    def _count(self, rows: int, backward: bool) -> None:
        """Charge ``rows`` passes before they are made: a call that would take an input past
        its budget is refused (:class:`BudgetExhausted`) and charges nothing."""
        charge = self._charge
        if charge is not None and len(charge.owners):
            m = len(charge.owners)
            if rows % m:
                raise RuntimeError(f"batch of {rows} rows cannot be charged to {m} inputs")
            ledger = charge.ledger
            if ledger.budget is not None:
                share = rows // m if charge.repeats is None else charge.repeats * (rows // m)
                if (ledger.used(charge.owners) + share).max() > ledger.budget:
                    raise BudgetExhausted(
                        f"query budget of {ledger.budget} passes per input exceeded")
            counts = ledger.backward if backward else ledger.forward
            np.add.at(counts, charge.owners, rows // m)
        if backward:
            self.total_backward += rows
        else:
            self.total_forward += rows

    # -- public calls -----------------------------------------------------------------------
    def as_tensor(self, x: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Convert ``x`` to a tensor on this model's device and dtype (a read-only array, e.g.
        memory-mapped data, is copied: torch cannot share it safely)."""
        if isinstance(x, np.ndarray) and not x.flags.writeable:
            x = np.array(x)
        return torch.as_tensor(x, dtype=self.dtype, device=self.device)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Logits, shape ``(n, n_classes)``; charged as one forward pass per row."""
        self._count(x.shape[0], backward=False)
        fit_threads(math.prod(x.shape), self.native)  # inside a search: its thread count
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
            with torch.enable_grad():
                xg = x.detach().clone().requires_grad_(True)
                logits = self.logits(xg)
                values = objective(logits)
                self._count(x.shape[0], backward=True)
                (grad,) = torch.autograd.grad(values.sum(), xg)
            return logits.detach(), values.detach(), grad
        return _finite_difference(self, x, objective, fd_step)


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


def _finite_difference(
    model: Classifier,
    x: torch.Tensor,
    objective: Callable[[torch.Tensor], torch.Tensor],
    fd_step: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Central finite differences, one batched call of ``n·(2d + 1)`` rows."""
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
