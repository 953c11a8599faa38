"""Pieces shared by the gradient-based solvers: the scaled-space view of a model."""

from __future__ import annotations

import math

import torch

from robustscope.core.space import FeatureSpace
from robustscope.core.statement import Statement
from robustscope.models.base import Classifier


class ScaledProblem:
    """The attack problem of a batch in scaled coordinates ``u = (x' - x) / scale``.

    ``margin_and_grad(u)`` returns the statement's margin (negative = counterexample) and its
    gradient with respect to ``u``, both through the model (charged to the model's ledger).
    ``towards`` (n,) optionally makes the margin targeted at a class per input.
    """

    def __init__(self, model: Classifier, x: torch.Tensor, y: torch.Tensor, space: FeatureSpace,
                 statement: Statement, towards: torch.Tensor | None = None) -> None:
        self.model, self.x, self.y, self.space = model, x, y, space
        self.statement, self.towards = statement, towards
        self.lo, self.hi = space.delta_bounds(x)
        self.scale = torch.as_tensor(space.scale, dtype=x.dtype, device=x.device)
        # finite-difference step for black-box models: 1e-3 of each feature's scale
        self.fd_step = (1e-3 * self.scale).reshape(x.shape[1:])

    @property
    def n_features(self) -> int:
        return self.lo.shape[1]

    def clip(self, u: torch.Tensor) -> torch.Tensor:
        """Clamp ``u`` into the box of valid perturbations."""
        return torch.maximum(torch.minimum(u, self.hi), self.lo)

    def descent_gradient(self, u: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        """``grad`` with the components zeroed that a descent step ``u - a * grad`` could not
        follow because ``u`` sits on the box (so steps and norms see only feasible moves)."""
        blocked = ((grad > 0) & (u <= self.lo)) | ((grad < 0) & (u >= self.hi))
        return torch.where(blocked, torch.zeros_like(grad), grad)

    def candidate(self, u: torch.Tensor) -> torch.Tensor:
        """The input ``x + u * scale`` for scaled perturbation ``u`` (n, d)."""
        return self.space.apply_delta(self.x, u)

    def margin_and_grad(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(logits, margin (n,), d margin / d u (n, d))``."""
        def objective(logits: torch.Tensor) -> torch.Tensor:
            return self.statement.margin(logits.to(torch.float64), self.y, self.towards)

        logits, margin, grad_x = self.model.value_and_grad(self.candidate(u), objective,
                                                           fd_step=self.fd_step)
        grad_u = grad_x.reshape(u.shape).to(u.dtype) * self.scale
        return logits, margin.to(u.dtype), grad_u

    def success(self, logits: torch.Tensor) -> torch.Tensor:
        """Boolean (n,): the statement holds for these logits (argmax decides ties)."""
        return self.statement.holds(logits.argmax(dim=1), self.y)


def cosine_schedule(step: int, steps: int, start: float, end: float) -> float:
    """Cosine annealing from ``start`` (step 0) to ``end`` (last step)."""
    if steps <= 1:
        return start
    return end + 0.5 * (start - end) * (1 + math.cos(math.pi * step / (steps - 1)))
