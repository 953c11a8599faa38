"""Which classes a targeted run should aim at: the first-order distance to each boundary.

At the clean input, the boundary between the label ``y`` and a class ``j`` lies at about
``margin_j / ||grad margin_j||_*`` (the margin ``z_y - z_j`` over the dual norm of its
gradient, in the threat's scaled units, box-blocked components left out). The class with the
smallest estimate is the best first guess for the nearest boundary; the logit order, which
ignores how fast each margin falls, often is not (on a 10-class linear model under L1, runs
aimed at the two runner-ups by logit missed the nearest class on 17 of 100 inputs).
"""

from __future__ import annotations

import torch

from robustscope.core.space import FeatureSpace
from robustscope.core.statement import Statement
from robustscope.models.base import Classifier
from robustscope.solvers.attacks.gradient.scaled_problem import ScaledProblem
from robustscope.threats.lp import LpThreat


def runner_ups(logits: torch.Tensor, y: torch.Tensor, count: int) -> torch.Tensor:
    """``(n, min(count, k - 1))`` classes other than the label ``y`` ``(n,)``, by decreasing
    clean ``logits`` ``(n, k)``."""
    masked = logits.scatter(1, y.reshape(-1, 1), float("-inf"))
    return masked.argsort(dim=1, descending=True)[:, :min(count, logits.shape[1] - 1)]


def first_order_distances(model: Classifier, x: torch.Tensor, y: torch.Tensor,
                          logits: torch.Tensor, space: FeatureSpace, threat: LpThreat,
                          statement: Statement,
                          count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``count`` other classes with the largest clean ``logits`` ``(n, k)`` (by decreasing
    logit, ``(n, count)``) and the first-order distance estimate at ``x`` to each one's
    boundary ``(n, count)``, in the threat's scaled units.

    ``x`` ``(n, *shape)`` inputs, ``y`` ``(n,)`` labels. Costs one gradient per input and
    candidate class (``count`` rows through the model per input, forward and backward),
    charged to the model's ledger like any solver call.
    """
    candidates = runner_ups(logits, y, count)  # (n, count)
    return candidates, distances_to(model, x, y, candidates, space, threat, statement)


def distances_to(model: Classifier, x: torch.Tensor, y: torch.Tensor, classes: torch.Tensor,
                 space: FeatureSpace, threat: LpThreat, statement: Statement) -> torch.Tensor:
    """The first-order distance estimate ``(n, c)`` at ``x`` ``(n, *shape)`` to the boundary
    between the label ``y`` ``(n,)`` and each class of ``classes`` ``(n, c)``, in the threat's
    scaled units. Costs ``c`` gradients per input (``n * c`` rows through the model, input by
    input), charged to the model's ledger like any solver call."""
    n, c = classes.shape
    if c == 0:
        return torch.zeros(n, 0, dtype=torch.float64, device=x.device)
    rows = torch.arange(n, device=x.device).repeat_interleave(c)
    problem = ScaledProblem(model, x[rows], y[rows], space, statement, classes.reshape(-1))
    u = torch.zeros(len(rows), problem.n_features, dtype=x.dtype, device=x.device)
    _, margin, grad = problem.margin_and_grad(u)
    grad = problem.descent_gradient(u, grad)
    distance = margin.clamp_min(0) / threat.dual_norm(grad).clamp_min(1e-30)
    return distance.reshape(n, c)


def rank_by_distance(model: Classifier, x: torch.Tensor, y: torch.Tensor, logits: torch.Tensor,
                     space: FeatureSpace, threat: LpThreat, statement: Statement,
                     count: int, known: torch.Tensor | None = None) -> torch.Tensor:
    """``(n, count)`` classes per input, nearest first by the first-order distance estimate
    at ``x`` (:func:`first_order_distances`), among the ``count`` other classes with the
    largest clean ``logits`` ``(n, k)``. ``known`` ``(n, j)``, ``j <= count``: the distances
    of the first ``j`` of those classes, already computed (not computed again). Costs
    ``count - j`` gradients per input."""
    candidates = runner_ups(logits, y, count)
    j = 0 if known is None else known.shape[1]
    rest = distances_to(model, x, y, candidates[:, j:], space, threat, statement)
    distance = rest if known is None else torch.cat([known.to(rest.dtype), rest], dim=1)
    return candidates.gather(1, distance.argsort(dim=1))
