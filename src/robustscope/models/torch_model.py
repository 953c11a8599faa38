"""White-box adapter for PyTorch modules that return logits."""

from __future__ import annotations

import torch

from robustscope.core.errors import ModelError
from robustscope.models.base import Classifier


class TorchClassifier(Classifier):
    """A ``torch.nn.Module`` (or TorchScript module) mapping ``(n, *input_shape)`` to logits.

    Gradients come from autograd. The module is put in eval mode and moved to ``device``;
    inputs are cast to ``dtype`` (default: the dtype of the module's parameters, else float32).
    """

    differentiable = True

    def __init__(
        self,
        module: torch.nn.Module,
        n_classes: int,
        input_shape: tuple[int, ...] | None = None,
        device: str | torch.device = "cpu",
        dtype: torch.dtype | None = None,
        name: str | None = None,
    ) -> None:
        if dtype is None:  # the module's own floating dtype (float32 for most networks)
            floats = [p.dtype for p in module.parameters() if p.is_floating_point()]
            dtype = floats[0] if floats else torch.float32
        super().__init__(n_classes, input_shape, device, dtype, name or type(module).__name__)
        self.module = module.to(self.device)
        try:
            self.module.eval()
        except NotImplementedError:  # torch.export modules are traced in their eval mode
            pass
        for p in self.module.parameters():
            p.requires_grad_(False)

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        try:
            out = self.module(x.to(device=self.device, dtype=self.dtype))
        except Exception as exc:  # a user's module can raise anything
            raise ModelError(f"{self.name} raised {type(exc).__name__}: {exc}") from exc
        if not torch.is_tensor(out):
            raise ModelError(f"{self.name} returned {type(out).__name__}, expected a tensor")
        if not torch.isfinite(out).all():
            raise ModelError(f"{self.name} returned non-finite logits")
        return out
