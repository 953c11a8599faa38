"""The statement: what counts as a failure of the model."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Statement:
    """A counterexample changes the decision away from the label (``target=None``), or
    reaches class index ``target``.

    ``margin`` is what solvers minimise: negative when the statement holds for the logits
    (up to ties, which :meth:`holds` settles by the model's own argmax).
    """

    target: int | None = None

    @property
    def name(self) -> str:
        return "decision-change" if self.target is None else f"target-{self.target}"

    def holds(self, prediction: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
        """Boolean ``(n,)``: the prediction satisfies the failure statement."""
        if self.target is None:
            return prediction != label
        return prediction == self.target

    def margin(self, logits: torch.Tensor, label: torch.Tensor,
               towards: torch.Tensor | None = None) -> torch.Tensor:
        """Per-row margin ``(n,)``; ``towards`` optionally names, per row, the class to push
        to (a targeted run inside an untargeted search; -1: that row stays untargeted)."""
        if self.target is not None:
            target = torch.full_like(label, self.target)
            other = logits.scatter(1, target.reshape(-1, 1), float("-inf")).max(dim=1).values
            return other - logits.gather(1, target.reshape(-1, 1)).reshape(-1)
        true = logits.gather(1, label.reshape(-1, 1)).reshape(-1)
        other = logits.scatter(1, label.reshape(-1, 1), float("-inf")).max(dim=1).values
        if towards is not None:
            aimed = true - logits.gather(1, towards.clamp_min(0).reshape(-1, 1)).reshape(-1)
            return torch.where(towards >= 0, aimed, true - other)
        return true - other

    def smooth_margin(self, logits: torch.Tensor, label: torch.Tensor,
                      towards: torch.Tensor | None = None) -> torch.Tensor:
        """A smooth lower bound ``(n,)`` of :meth:`margin` for an untargeted statement: the
        label's logit minus the log-sum-exp (not the max) of the others. Its gradient weighs
        every other class by its softmax share among them, so a descent heads for the boundary
        the classes share rather than locking onto the runner-up of the moment (on LeNet-5
        under L2 at 100-200 passes per input, this halved the p90 excess of the minimum-norm
        run). Targeted statements and the rows of targeted runs (``towards`` >= 0) keep
        :meth:`margin`."""
        if self.target is not None:
            return self.margin(logits, label)
        true = logits.gather(1, label.reshape(-1, 1)).reshape(-1)
        others = logits.scatter(1, label.reshape(-1, 1), float("-inf"))
        smooth = true - torch.logsumexp(others, dim=1)
        if towards is None:
            return smooth
        return torch.where(towards >= 0, self.margin(logits, label, towards), smooth)


DECISION_CHANGE = Statement()


#: Units of the last place, times the size of the logits, by which a point meant to lie past a
#: model's decision boundary should pass it: closer, the model's own rounding, which for a
#: float32 network depends on the batch the point is evaluated in, can put it on either side
#: (a line-search point 1e-6 past a digits MLP's boundary changed the decision in the
#: search's batch and not in a batch of six).
ROUNDING_ULPS = 16


def rounding_margin(logits: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``(n,)`` float64: ``ROUNDING_ULPS`` units of ``dtype``'s last place times
    ``1 + max |logit|`` of each row of ``logits`` ``(n, k)`` (the model computes in
    ``dtype``): how far past zero a margin should aim to stay a counterexample in any
    batch."""
    size = 1 + logits.detach().abs().amax(dim=1).to(torch.float64)
    return ROUNDING_ULPS * torch.finfo(dtype).eps * size
