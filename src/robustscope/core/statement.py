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
        to (a targeted run inside an untargeted search)."""
        if self.target is not None:
            target = torch.full_like(label, self.target)
            other = logits.scatter(1, target.reshape(-1, 1), float("-inf")).max(dim=1).values
            return other - logits.gather(1, target.reshape(-1, 1)).reshape(-1)
        true = logits.gather(1, label.reshape(-1, 1)).reshape(-1)
        if towards is not None:
            return true - logits.gather(1, towards.reshape(-1, 1)).reshape(-1)
        other = logits.scatter(1, label.reshape(-1, 1), float("-inf")).max(dim=1).values
        return true - other


DECISION_CHANGE = Statement()
