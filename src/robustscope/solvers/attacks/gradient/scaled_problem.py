"""Pieces shared by the gradient-based solvers: the scaled-space view of a model."""

from __future__ import annotations

import math

import torch

from robustscope.core.relations import project_relations
from robustscope.core.space import FeatureSpace
from robustscope.core.statement import Statement
from robustscope.models.base import Classifier
from robustscope.threats.lp import LpThreat


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

    def clip(self, u: torch.Tensor, threat: LpThreat | None = None,
             radius: torch.Tensor | None = None,
             anchor: torch.Tensor | None = None) -> torch.Tensor:
        """Clamp ``u`` (n, d) into the box of valid perturbations; with relations between
        features, move it into ``box ∩ relations`` (discrete features relaxed to reals, see
        :func:`~robustscope.core.relations.project_relations`) and, given ``threat`` and
        ``radius`` (n,), shrink it back into the ball: ``u = 0`` is feasible and the set is
        convex, so the shrunk point stays feasible. ``anchor`` (n, d): a feasible point per
        input (the iterate before the step) that the projection falls back towards instead
        of ``u = 0``, so that a step keeps its progress."""
        u = torch.maximum(torch.minimum(u, self.hi), self.lo)
        rel = self.space.relations
        if rel is None or rel.is_linear_empty:
            return u
        flat = self.x.reshape(len(self.x), -1)
        lower, upper = flat + self.lo * self.scale, flat + self.hi * self.scale
        free = torch.as_tensor(self.space.mutable, device=u.device)
        start = flat if anchor is None else flat + anchor * self.scale
        cand, ok = project_relations(rel, flat + u * self.scale, start, lower, upper,
                                     self.scale, free)
        if anchor is not None and not ok.all():
            cand[~ok] = project_relations(rel, cand[~ok], flat[~ok], lower[~ok], upper[~ok],
                                          self.scale, free)[0]
        u = (cand - flat) / self.scale
        if threat is not None and radius is not None:
            norm = threat.norm(u)
            factor = torch.where(norm > radius, radius / norm.clamp_min(1e-300),
                                 torch.ones_like(norm))
            u = u * factor.clamp(0, 1)[:, None]
        return u

    def descent_gradient(self, u: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        """``grad`` with the components zeroed that a descent step ``u - a * grad`` could not
        follow because ``u`` sits on the box (so steps and norms see only feasible moves)."""
        blocked = ((grad > 0) & (u <= self.lo)) | ((grad < 0) & (u >= self.hi))
        return torch.where(blocked, torch.zeros_like(grad), grad)

    def candidate(self, u: torch.Tensor) -> torch.Tensor:
        """The input ``x + u * scale`` for scaled perturbation ``u`` (n, d)."""
        return self.space.apply_delta(self.x, u)

    def margin_and_grad(self, u: torch.Tensor, smooth: bool = False
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(logits, margin (n,), d objective / d u (n, d))``: the objective is the margin,
        or with ``smooth`` the statement's :meth:`~robustscope.core.statement.Statement.
        smooth_margin` (the margin returned stays the true one)."""
        rule = self.statement.smooth_margin if smooth else self.statement.margin

        def objective(logits: torch.Tensor) -> torch.Tensor:
            return rule(logits.to(torch.float64), self.y, self.towards)

        logits, value, grad_x = self.model.value_and_grad(self.candidate(u), objective,
                                                          fd_step=self.fd_step)
        margin = (self.statement.margin(logits.detach().to(torch.float64), self.y, self.towards)
                  if smooth else value)
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
