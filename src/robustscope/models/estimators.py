"""Gradient estimation for black-box classifiers, computed only when a solver asks for it.

Every estimator has the return contract of :meth:`Classifier.value_and_grad`:
``(logits (n, K), values (n,), grad (n, *input_shape))``, with ``grad`` the gradient of the
objective with respect to ``x`` in *original* units. Steps are set in *scaled* units
(``step_i = h * scale_i``): a feature whose range is 10,000 times another's gets a step
10,000 times larger, so every feature is probed by the same share of its range.

Queries go through ``model.logits`` and are charged like any other call: to the charge of
``model`` when it is a metered view (:class:`~robustscope.models.metered.MeteredModel`), or
to ``ledger`` when one is given (a view bound here). A call that would
take an input past its budget raises :class:`~robustscope.core.errors.BudgetExhausted` *before*
the model is queried.

Probabilities are turned into logits by the model adapters as ``log(clamp(p, PROBA_FLOOR))``
(see :mod:`robustscope.models.base`), so objectives of the logits stay finite when a black
box returns probabilities of exactly 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from robustscope.core.errors import BudgetExhausted, InputError
from robustscope.core.space import FeatureSpace
from robustscope.models.base import Classifier, QueryLedger, evaluate_offsets
from robustscope.models.metered import charge_of, metered

Objective = Callable[[torch.Tensor], torch.Tensor]
Estimate = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def _scale_and_mask(space: FeatureSpace | None, d: int, x: torch.Tensor):
    """Per-feature scale ``(d,)`` and mutable mask ``(d,)`` (ones / all True without a space)."""
    if space is None:
        return (torch.ones(d, dtype=x.dtype, device=x.device),
                torch.ones(d, dtype=torch.bool, device=x.device))
    if space.n_features != d:
        raise InputError(f"space has {space.n_features} features but inputs have {d}")
    scale = torch.as_tensor(space.scale, dtype=x.dtype, device=x.device)
    return scale, torch.as_tensor(space.mutable, device=x.device)


def _charged(model: Classifier, ledger: QueryLedger | None, owners: np.ndarray | None,
             rows_per_input: int) -> Classifier:
    """The model to call: charged to ``ledger`` (when given; else ``model``'s own charge),
    refused up front when the calls would exceed its per-input budget."""
    if ledger is None:
        outer, outer_owners = charge_of(model)  # a metered view's charge, if any
        if outer is not None:
            _check_budget(outer, outer_owners, rows_per_input)
        return model
    owners = np.arange(len(ledger.forward)) if owners is None else np.asarray(owners)
    _check_budget(ledger, owners, rows_per_input)
    return metered(model, ledger, owners)


def _check_budget(ledger: QueryLedger, owners: np.ndarray, rows_per_input: int) -> None:
    if ledger.budget is None:
        return
    left = ledger.remaining(owners)
    if (left < rows_per_input).any():
        worst = int(owners[int(np.argmin(left))])
        raise BudgetExhausted(
            f"gradient estimate needs {rows_per_input} queries per input but input {worst} "
            f"has {int(left.min())} left of a budget of {ledger.budget}"
        )


@dataclass
class FiniteDifference:
    """Central finite differences, one feature at a time.

    ``step_i = h * scale_i`` (original units), so ``h`` is a share of each feature's scale.
    With a feature space, every probe is a valid input: integer and binary features step by
    a whole number (at least 1), probes stop at the feature's bounds (one-sided differences
    there), and immutable and categorical features are not probed (gradient 0). Cost per
    input: ``2·m + 1`` queries, ``m`` = number of probed features (``+1``: the value at x).
    """

    h: float = 1e-3
    space: FeatureSpace | None = None

    def __post_init__(self) -> None:
        if not (np.isfinite(self.h) and self.h > 0):
            raise InputError(f"FiniteDifference: h must be finite and > 0, got {self.h}")

    def _probed(self, d: int) -> np.ndarray:
        if self.space is None:
            return np.ones(d, dtype=bool)
        return self.space.mutable & (self.space.types != "categorical")

    def cost(self, d: int) -> int:
        """Queries per input for inputs of ``d`` features."""
        return 2 * int(self._probed(d).sum()) + 1

    def __call__(self, model: Classifier, x: torch.Tensor, objective: Objective,
                 ledger: QueryLedger | None = None, owners: np.ndarray | None = None) -> Estimate:
        n = x.shape[0]
        d = int(np.prod(x.shape[1:]))
        scale, _ = _scale_and_mask(self.space, d, x)
        probed = self._probed(d)
        idx = torch.as_tensor(np.flatnonzero(probed), device=x.device)
        m = len(idx)
        step = (self.h * scale[idx]).expand(n, m).clone()  # (n, m) original units
        flat = x.reshape(n, -1)[:, idx]
        up, down = step, step.clone()
        if self.space is not None:
            integral = torch.as_tensor(
                np.isin(self.space.types[probed], ("integer", "binary")), device=x.device)
            whole = torch.clamp(torch.round(step), min=1.0)
            up = torch.where(integral, whole, up)
            down = torch.where(integral, whole, down)
            lower = torch.as_tensor(self.space.lower[probed], dtype=x.dtype, device=x.device)
            upper = torch.as_tensor(self.space.upper[probed], dtype=x.dtype, device=x.device)
            up = torch.minimum(up, (upper - flat).clamp_min(0.0))
            down = torch.minimum(down, (flat - lower).clamp_min(0.0))
        rows = torch.arange(m, device=x.device)
        plus = torch.zeros(n, m, d, dtype=x.dtype, device=x.device)
        minus = torch.zeros(n, m, d, dtype=x.dtype, device=x.device)
        plus[:, rows, idx] = up
        minus[:, rows, idx] = -down
        view = _charged(model, ledger, owners, 2 * m + 1)
        logits, values, probes = evaluate_offsets(view, x, torch.cat([plus, minus], 1),
                                                  objective)
        width = up + down
        safe = torch.where(width > 0, width, torch.ones_like(width))
        diff = torch.where(width > 0, (probes[:, :m] - probes[:, m:]) / safe,
                           torch.zeros_like(width))
        grad = torch.zeros(n, d, dtype=x.dtype, device=x.device)
        grad[:, idx] = diff
        return logits, values, grad.reshape(x.shape)


@dataclass
class RandomDirections:
    """Antithetic random-direction estimates (NES with Gaussian directions, SPSA with
    Rademacher ones), ``2·samples + 1`` queries per input.

    Directions ``v`` are drawn in scaled units over the mutable real features, and the model is
    probed at ``x ± sigma · scale ∘ v``. With ``E[v vᵀ] = I`` (true for both laws),

        g_scaled = 1/S · Σ_s (f(x + σ s∘v_s) - f(x - σ s∘v_s)) / (2σ) · v_s

    is an unbiased estimate (to first order) of the gradient with respect to the scaled
    coordinates; the gradient in original units is ``g_scaled / scale``.
    """

    samples: int = 50
    sigma: float = 1e-3
    distribution: str = "gaussian"  # "gaussian" (NES) or "rademacher" (SPSA)
    space: FeatureSpace | None = None
    generator: torch.Generator | None = None

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise InputError(f"RandomDirections: samples must be >= 1, got {self.samples}")
        if not (np.isfinite(self.sigma) and self.sigma > 0):
            raise InputError(f"RandomDirections: sigma must be finite and > 0, got {self.sigma}")
        if self.distribution not in ("gaussian", "rademacher"):
            raise InputError(f"RandomDirections: distribution must be 'gaussian' or "
                             f"'rademacher', got {self.distribution!r}")
        if self.generator is None:
            self.generator = torch.Generator().manual_seed(0)

    def cost(self, d: int) -> int:
        """Queries per input (independent of ``d``)."""
        return 2 * self.samples + 1

    def __call__(self, model: Classifier, x: torch.Tensor, objective: Objective,
                 ledger: QueryLedger | None = None, owners: np.ndarray | None = None) -> Estimate:
        n = x.shape[0]
        d = int(np.prod(x.shape[1:]))
        scale, mutable = _scale_and_mask(self.space, d, x)
        if self.space is not None:  # probes of integer / binary / categorical features at
            # fractional values would be invalid inputs: random directions move reals only
            mutable = mutable & torch.as_tensor(self.space.types == "real", device=x.device)
        s = self.samples
        shape = (n, s, d)
        if self.distribution == "gaussian":
            v = torch.randn(shape, generator=self.generator, dtype=x.dtype)
        else:
            v = torch.randint(0, 2, shape, generator=self.generator).to(x.dtype) * 2 - 1
        v = (v.to(x.device) * mutable.to(x.dtype))
        offsets = self.sigma * v * scale  # original units
        view = _charged(model, ledger, owners, 2 * s + 1)
        logits, values, probes = evaluate_offsets(view, x, torch.cat([offsets, -offsets], 1),
                                                  objective)
        slope = (probes[:, :s] - probes[:, s:]) / (2 * self.sigma)  # (n, S)
        g_scaled = (slope.unsqueeze(2) * v).mean(dim=1)  # (n, d)
        return logits, values, (g_scaled / scale).reshape(x.shape)


def nes(samples: int = 50, sigma: float = 1e-3, space: FeatureSpace | None = None,
        generator: torch.Generator | None = None) -> RandomDirections:
    """NES estimator: antithetic Gaussian directions."""
    return RandomDirections(samples, sigma, "gaussian", space, generator)


def spsa(samples: int = 50, sigma: float = 1e-3, space: FeatureSpace | None = None,
         generator: torch.Generator | None = None) -> RandomDirections:
    """SPSA estimator: antithetic Rademacher directions."""
    return RandomDirections(samples, sigma, "rademacher", space, generator)


def finite_difference(model: Classifier, x: torch.Tensor, objective: Objective,
                      space: FeatureSpace | None = None, h: float = 1e-3,
                      ledger: QueryLedger | None = None,
                      owners: np.ndarray | None = None) -> Estimate:
    """Central finite differences with ``step_i = h · scale_i``; see :class:`FiniteDifference`."""
    return FiniteDifference(h, space)(model, x, objective, ledger, owners)
