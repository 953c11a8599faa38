"""Programs exported with a fixed batch size, run on any number of rows.

``torch.export`` traces a program at its example's shape; unless the batch dimension was
declared dynamic, the program checks that every call has exactly that many rows (a guard
``input.size()[0] == 1`` for the usual export at batch 1).
:func:`robustscope.models.shapes.static_batch` reads that size from the program, and
:class:`FixedBatch` feeds it chunks of that size: row by row at
batch 1; a last chunk that falls short is filled by repeating its last row, and the filler's
outputs are dropped (as the ONNX Runtime path does for a graph with a fixed batch), so
they add nothing to gradients. The search's ledger counts the ``n`` rows asked for; the
program itself computes ``ceil(n / batch) * batch``.
"""

from __future__ import annotations

import torch
from torch import nn


class FixedBatch(nn.Module):
    """``inner`` (a module that takes exactly ``batch`` rows) as a module that takes any
    number ``n`` of rows ``(n, *shape)``: chunks of ``batch`` rows, outputs ``(n, ...)``."""

    def __init__(self, inner: nn.Module, batch: int) -> None:
        super().__init__()
        if batch < 1:
            raise ValueError(f"batch must be at least 1, got {batch}")
        self.inner = inner
        self.batch = int(batch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, b = len(x), self.batch
        if n == b:
            return self.inner(x)
        if n == 0:  # the output's shape from one filler row
            return self.inner(torch.zeros(b, *x.shape[1:], dtype=x.dtype,
                                          device=x.device))[:0]
        parts = []
        for start in range(0, n, b):
            chunk = x[start:start + b]
            short = b - len(chunk)
            if short:
                chunk = torch.cat([chunk, chunk[-1:].expand(short, *chunk.shape[1:])])
            parts.append(self.inner(chunk)[:b - short])
        return torch.cat(parts)
