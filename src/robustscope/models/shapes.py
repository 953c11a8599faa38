"""What input shape a torch model takes, where the model says (:func:`model_input`), and
how data of another shape fits it (:func:`fit_input`).

A ``torch.export`` program states its input's shape (the example it was exported with). A
TorchScript or eager module does not, but its first layer tells part of it: a ``Conv2d``
takes ``C×H×W`` images of its ``in_channels``, a ``Conv1d`` ``C×L`` sequences, a ``Linear``
rows of its ``in_features`` (any shape of that size when a ``Flatten`` comes first). That is
read only where the model fails on the data (a module's first layer in definition order need
not be the first it calls), to say why in one line or to fit the data to it. Flat rows
(a CSV, an NPZ of ``N×d``) are reshaped to the shape the model takes where that shape is
known and the sizes agree; a ``Conv2d``'s image size is then taken as square, and said. Any
other mismatch is one line: the data's shape and the model's (:class:`ShapeError`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from robustscope.core.errors import ModelError
from robustscope.models.fixed_batch import FixedBatch


@dataclass(frozen=True)
class Takes:
    """The per-input shape a model takes: known sizes, ``None`` where the model does not say
    (a convolution's image size); ``flat`` when any shape of ``size`` values is taken (a
    ``Flatten`` before the first layer); ``source`` says where it was read."""

    shape: tuple[int | None, ...]
    source: str
    flat: bool = False

    @property
    def size(self) -> int | None:
        return None if None in self.shape else math.prod(self.shape)  # type: ignore[arg-type]

    def text(self) -> str:
        """``N×1×8×8``, ``N×3×H×W`` (unknown sizes by name), ``N×64``."""
        names = {3: "CHW", 2: "CL"}.get(len(self.shape), "")
        dims = [str(s) if s is not None else (names[i] if names else "?")
                for i, s in enumerate(self.shape)]
        return "N×" + "×".join(dims)


class ShapeError(ModelError):
    """The data's inputs do not have a shape the model takes; ``takes`` is the model's, and
    ``hint`` (``""`` or ``"; ..."``) how to fix the data."""

    def __init__(self, have: tuple[int, ...], takes: Takes, hint: str = "") -> None:
        self.have, self.takes, self.hint = tuple(have), takes, hint
        super().__init__(f"inputs of shape {self.have}; the model takes {takes.text()} "
                         f"({takes.source}){hint}")


def _exported_shape(module: torch.fx.GraphModule) -> tuple | None:
    """The shape (batch first; sizes ``int``, or symbolic where dynamic) of a
    ``torch.export`` program's first input with a recorded shape, ``None`` where none is."""
    for node in module.graph.nodes:
        val = node.meta.get("val") if node.op == "placeholder" else None
        if val is not None and hasattr(val, "shape") and len(val.shape) >= 1:
            return tuple(val.shape)
    return None


def static_batch(module: object) -> int | None:
    """The batch size a ``torch.export`` program's module was fixed at (its first input's
    leading dimension, where it is a plain integer); ``None`` when it is dynamic or the
    module is not such a program."""
    if not isinstance(module, torch.fx.GraphModule):
        return None
    shape = _exported_shape(module)
    return int(shape[0]) if shape is not None and isinstance(shape[0], int) else None


def model_input(module: object) -> Takes | None:
    """The input shape ``module`` takes, as far as it says (``None`` when it says nothing)."""
    if isinstance(module, FixedBatch):
        module = module.inner
    if isinstance(module, torch.fx.GraphModule):
        shape = _exported_shape(module)
        if shape is None:
            return None
        dims = tuple(int(s) if isinstance(s, int) else None for s in shape[1:])
        return Takes(dims, "the shape the program was exported with")
    if not isinstance(module, torch.nn.Module):
        return None
    flat = False
    for _, sub in module.named_modules():
        kind = getattr(sub, "original_name", None) or type(sub).__name__
        if kind == "Flatten":
            flat = True
        elif kind in ("Conv2d", "Conv1d") and not flat:
            channels = int(sub.in_channels)
            dims = (channels, None, None) if kind == "Conv2d" else (channels, None)
            return Takes(dims, f"its first layer is a {kind} of {channels} channel(s)")
        elif kind == "Linear":
            n = int(sub.in_features)
            return Takes((n,), f"its first layer is a Linear of {n} inputs"
                         + (" after a Flatten" if flat else ""), flat=flat)
        elif kind not in ("Sequential", "ReLU", "Identity", "Dropout") and sub is not module \
                and any(True for _ in sub.parameters(recurse=False)):
            return None  # another first layer: its input is not read here
    return None


def fit_input(have: tuple[int, ...], takes: Takes | None) -> tuple[tuple[int, ...] | None, str]:
    """The shape to give inputs of per-input shape ``have`` for a model that ``takes``:
    ``(None, "")`` when ``have`` fits as it is (or nothing is known), ``(shape, note)`` when
    flat rows are reshaped to ``shape`` (``note`` says so, for the summary). Raises
    :class:`ShapeError` when the shapes cannot agree."""
    have = tuple(int(s) for s in have)
    if takes is None:
        return None, ""
    d = math.prod(have)
    if takes.flat:
        if d == takes.size:
            return None, ""
        raise ShapeError(have, takes)
    if len(takes.shape) == 1 and not takes.flat and have and have[-1] == takes.shape[0]:
        return None, ""  # a Linear maps the last dimension, whatever comes before
    if len(have) == len(takes.shape) and all(t is None or t == h
                                             for h, t in zip(have, takes.shape, strict=True)):
        return None, ""
    if len(have) == 1 and len(takes.shape) > 1:
        shape, how = _filled(d, takes.shape)
        if shape is not None:
            return shape, (f"rows of {d} values were taken as {'×'.join(map(str, shape))} "
                           f"inputs, the shape the model takes ({takes.source}{how})")
    hint = ""
    if len(have) == 3 and len(takes.shape) == 3 and takes.shape[0] == have[2] != have[0]:
        hint = ("; the images look channels-last (N×H×W×C): give them channels first, "
                "X.transpose(0, 3, 1, 2)")
    raise ShapeError(have, takes, hint)


def _filled(d: int, shape: tuple[int | None, ...]) -> tuple[tuple[int, ...] | None, str]:
    """``shape`` with its unknown sizes filled so that it holds ``d`` values: exactly when
    all are known, as a square image when two are not; ``None`` when they cannot be."""
    known = math.prod(s for s in shape if s is not None)
    unknown = [i for i, s in enumerate(shape) if s is None]
    if d % known:
        return None, ""
    rest = d // known
    if not unknown:
        return (tuple(shape) if rest == 1 else None), ""  # type: ignore[return-value]
    if len(unknown) == 1:
        return tuple(rest if s is None else s for s in shape), ""
    side = math.isqrt(rest)
    if len(unknown) == 2 and side * side == rest:
        return (tuple(side if s is None else s for s in shape),
                "; square images assumed")
    return None, ""
