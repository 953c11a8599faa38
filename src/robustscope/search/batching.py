"""Batch sizes from free memory: how many images one attack step can hold at once.

A step of an image attack keeps, per image, what the network saves for its backward pass
(activations) plus a few copies of the image (clean, perturbed, best so far, gradient) and
of the threat's parameters. :func:`auto_batch_size` measures the first on two rows — one
forward and backward pass through the model, charged to those inputs like every other call —
by summing the bytes of the tensors autograd saves, and divides a share of the device's free
memory (``torch.cuda.mem_get_info`` on a GPU, ``MemAvailable`` of ``/proc/meminfo`` on the
CPU) by the per-image total.

The batch size changes which inputs share a generator and float rounding, so results can
differ in the last digits between machines with different free memory: use a fixed
``batch_size`` where runs must agree to the bit.
"""

from __future__ import annotations

import torch

from robustscope.core.errors import InputError

#: Share of the free memory a batch may take.
MEMORY_SHARE = 0.5
#: Copies of one image a step keeps besides the network's activations.
IMAGE_COPIES = 8
#: Bounds of an automatic batch size.
MIN_BATCH, MAX_BATCH = 1, 4096
#: Batch size when the free memory cannot be read.
FALLBACK_BATCH = 256


def free_memory(device: torch.device) -> int | None:
    """Bytes free on ``device`` (CUDA: the driver's count; CPU: ``MemAvailable``), or
    ``None`` where this cannot be read."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type == "cpu":
        try:
            with open("/proc/meminfo") as f:
                for line in f:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
    return None


def saved_bytes_per_row(view, x: torch.Tensor, loss) -> float:
    """Bytes autograd saves per row for one forward of ``view`` (a charged model view) on
    ``x`` ``(m, ...)`` with the gradient of ``loss(logits)`` (each saved storage counted
    once)."""
    seen: dict[tuple[int, int], int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        try:
            key = (t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
            seen[key] = key[1]
        except (RuntimeError, NotImplementedError):  # tensors without a storage
            seen[(id(t), 0)] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        view.value_and_grad(x, loss)
    return sum(seen.values()) / max(len(x), 1)


def auto_batch_size(view, x: torch.Tensor, loss, param_numel: int = 0,
                    share: float = MEMORY_SHARE) -> int:
    """A batch size for attack steps on images like ``x`` ``(m >= 1, ...)``: ``share`` of
    the free memory of ``x``'s device over (activations per row, measured with
    :func:`saved_bytes_per_row` on ``x``, + ``IMAGE_COPIES`` images + 4 copies of
    ``param_numel`` threat parameters), within ``[MIN_BATCH, MAX_BATCH]``;
    :data:`FALLBACK_BATCH` where the free memory cannot be read."""
    if not 0 < share <= 1:
        raise InputError(f"share must lie in (0, 1], got {share}")
    free = free_memory(x.device)
    if free is None:
        return FALLBACK_BATCH
    row = saved_bytes_per_row(view, x, loss)
    item = x.element_size()
    row += IMAGE_COPIES * x[0].numel() * item + 4 * param_numel * item
    return int(min(MAX_BATCH, max(MIN_BATCH, share * free // max(row, 1.0))))


__all__ = ["FALLBACK_BATCH", "MAX_BATCH", "MEMORY_SHARE", "auto_batch_size", "free_memory",
           "saved_bytes_per_row"]
