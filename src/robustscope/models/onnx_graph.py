"""An ONNX graph read into a torch module, so that ONNX networks are white boxes.

:func:`onnx_to_torch` walks the graph's nodes in order and builds one torch step per node
from the operator set the bound propagation supports (``solvers/bounds/graph.py``): Gemm,
MatMul with a constant, Add / Sub / Mul / Div with a constant (Add / Sub of two computed
tensors: a residual sum), Conv (1-D and 2-D), Relu, Flatten, Reshape, Squeeze / Unsqueeze,
Transpose where it moves only axes of size 1 (a no-op on the data), BatchNormalization,
MaxPool, AveragePool, GlobalAveragePool, Identity, Dropout, Constant, and a final Softmax /
LogSoftmax (dropped: the module returns the logits before it, which keeps the decision).
Shape arithmetic on constants (Shape, Gather, Concat, Cast, Unsqueeze, ... of values that do
not depend on the input, as older exporters write ``x.view(x.size(0), -1)``) is folded at
reading time.

The result, an :class:`OnnxModule`, takes inputs of the graph's per-input shape with any
batch size: a graph exported with a fixed batch of 1 is read with its batch dimension free
(a Reshape whose target's first size is 1 keeps the batch instead). Anything else raises
:class:`UnsupportedOnnx` naming the first operator (and node) that stopped the reading; the
loader then serves the graph by ONNX Runtime as a black box. The loader also checks the
module against ONNX Runtime on random inputs before using it (:func:`max_difference`).
"""

from __future__ import annotations

import io
import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from robustscope.core.errors import ModelError

#: Operators whose outputs are dropped at the end of the graph (logits kept).
FINAL_NORMALISERS = ("Softmax", "LogSoftmax")
#: Operators read (the rest stop the conversion).
SUPPORTED = ("Gemm", "MatMul", "Add", "Sub", "Mul", "Div", "Conv", "Relu", "Flatten",
             "Reshape", "Squeeze", "Unsqueeze", "Transpose", "BatchNormalization", "MaxPool",
             "AveragePool", "GlobalAveragePool", "Identity", "Dropout", "Constant",
             *FINAL_NORMALISERS)


class UnsupportedOnnx(ModelError):
    """The graph holds an operator (or a use of one) that is not converted; ``op`` names it."""

    def __init__(self, op: str, node: str, why: str = "") -> None:
        self.op, self.node = op, node
        super().__init__(f"ONNX operator {op} (node '{node}'){': ' + why if why else ''}")


@dataclass
class Step:
    """One converted node: ``module`` applied to the values named ``inputs`` gives the value
    named ``output``."""

    module: nn.Module
    inputs: tuple[str, ...]
    output: str


class OnnxModule(nn.Module):
    """The converted graph: inputs ``(n, *input_shape)`` to logits ``(n, k)`` (float32,
    as ONNX Runtime computes them). ``notes`` lists what the reading changed (a dropped
    final Softmax, a fixed batch lifted). ``torch.fx`` traces it into plain calls of its
    layers, which is how the bound propagation reads it."""

    def __init__(self, steps: list[Step], input_name: str, output_name: str,
                 input_shape: tuple[int, ...], notes: list[str]) -> None:
        super().__init__()
        self.layers = nn.ModuleList([s.module for s in steps])
        self.wiring = [(s.inputs, s.output) for s in steps]
        self.input_name, self.output_name = input_name, output_name
        self.input_shape = tuple(input_shape)
        self.notes = list(notes)
        #: the final normaliser dropped (``"Softmax"``, ``"LogSoftmax"``) or ``None``
        self.dropped: str | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        values = {self.input_name: x}
        for layer, (inputs, output) in zip(self.layers, self.wiring, strict=True):
            values[output] = layer(*[values[name] for name in inputs])
        out = values[self.output_name]
        return out.reshape(out.shape[0], -1)


# -- small modules (traced by torch.fx into the calls the bound propagation reads) ----------
class Constant(nn.Module):
    """``t op c`` (or ``c op t`` where ``left``) for a constant ``c``."""

    def __init__(self, op: str, value: np.ndarray, left: bool = False) -> None:
        super().__init__()
        self.op, self.left = op, left
        self.register_buffer("value", torch.as_tensor(np.array(value, dtype=np.float32)))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        c = self.value
        if self.op == "Add":
            return t + c
        if self.op == "Mul":
            return t * c
        if self.op == "Div":
            return t / c
        return c - t if self.left else t - c


class Sum(nn.Module):
    """``a + b`` or ``a - b`` of two computed tensors (residual connections)."""

    def __init__(self, negate: bool) -> None:
        super().__init__()
        self.negate = negate

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a - b if self.negate else a + b


class Reshape(nn.Module):
    """``t`` reshaped to ``(n, *shape)``: the batch dimension kept, whatever its size."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.shape = tuple(int(s) for s in shape)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return t.reshape(t.shape[0], *self.shape)


class LeftLinear(nn.Module):
    """``W @ t`` for ``t`` of shape ``(n, m, 1)``: a Linear on the flattened column."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.linear = linear

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        out = self.linear(t.reshape(t.shape[0], -1))
        return out.reshape(out.shape[0], -1, 1)


# -- reading --------------------------------------------------------------------------------
def onnx_to_torch(model) -> OnnxModule:
    """The :class:`OnnxModule` of an ``onnx.ModelProto`` (one float input, one output).

    Raises :class:`UnsupportedOnnx` at the first node it cannot convert."""
    from onnx import numpy_helper

    graph = model.graph
    consts: dict[str, np.ndarray] = {i.name: numpy_helper.to_array(i)
                                     for i in graph.initializer}
    inputs = [i for i in graph.input if i.name not in consts]
    if len(inputs) != 1:
        raise UnsupportedOnnx("inputs", inputs[1].name if len(inputs) > 1 else "-",
                              f"the graph takes {len(inputs)} inputs; one is converted")
    inp = inputs[0]
    dims = [d.dim_value if d.HasField("dim_value") else None
            for d in inp.type.tensor_type.shape.dim]
    if not dims or any(d is None for d in dims[1:]):
        raise UnsupportedOnnx("inputs", inp.name, f"input shape {dims} is not fixed past the "
                              "batch dimension")
    input_shape = tuple(int(d) for d in dims[1:])
    notes: list[str] = []
    if dims[0] is not None:
        notes.append(f"the graph's fixed batch of {dims[0]} is lifted (the converted network "
                     "takes any batch)")
    # values computed from the input, at batch 1: their shapes guide the conversion
    computed: dict[str, torch.Tensor] = {inp.name: torch.zeros(1, *input_shape)}
    steps: list[Step] = []
    outputs = [o.name for o in graph.output]
    if len(outputs) != 1:
        raise UnsupportedOnnx("outputs", outputs[-1], f"the graph has {len(outputs)} outputs")
    out_name = outputs[0]
    nodes = list(graph.node)
    dropped = None
    for i, node in enumerate(nodes):
        reader = _Node(node, consts, computed)
        if not reader.depends():
            consts.update(reader.fold())
            continue
        if node.op_type in FINAL_NORMALISERS:
            rest = nodes[i + 1:]
            if node.output[0] == out_name and not rest:
                out_name = node.input[0]
                dropped = node.op_type
                notes.append(f"the final {node.op_type} is dropped: the network's logits "
                             "are used (same decisions)")
                break
            raise UnsupportedOnnx(node.op_type, node.name or node.output[0],
                                  "only a final Softmax / LogSoftmax is converted")
        step = reader.step()
        with torch.no_grad():
            value = step.module(*[computed[n] for n in step.inputs])
        computed[step.output] = value
        steps.append(step)
    if out_name not in computed:
        raise UnsupportedOnnx("outputs", out_name, "the output does not depend on the input")
    module = OnnxModule(steps, inp.name, out_name, input_shape, notes)
    module.dropped = dropped
    return module


class _Node:
    """One ONNX node: its attributes, its constant inputs and the shapes of computed ones."""

    def __init__(self, node, consts: dict, computed: dict) -> None:
        from onnx import helper

        self.node, self.consts, self.computed = node, consts, computed
        self.op = node.op_type
        self.name = node.name or node.output[0]
        self.attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        self.args = [n for n in node.input]

    def fail(self, why: str = "") -> UnsupportedOnnx:
        return UnsupportedOnnx(self.op, self.name, why)

    def depends(self) -> bool:
        return any(a in self.computed for a in self.args if a)

    def const(self, k: int) -> np.ndarray | None:
        if k >= len(self.args) or not self.args[k]:
            return None
        if self.args[k] not in self.consts:
            raise self.fail(f"input {k} must be a constant")
        return self.consts[self.args[k]]

    def shape(self, k: int) -> tuple[int, ...]:
        return tuple(self.computed[self.args[k]].shape)

    # -- constant folding -------------------------------------------------------------------
    def fold(self) -> dict[str, np.ndarray]:
        """The outputs of a node whose inputs are all constant, computed in numpy."""
        from onnx import numpy_helper

        op, a = self.op, self.attrs
        if op == "Constant":
            if "value" not in a:
                raise self.fail("only a tensor 'value' is converted")
            return {self.node.output[0]: numpy_helper.to_array(a["value"])}
        if op == "Shape":
            src = self.args[0]
            shape = self.computed[src].shape if src in self.computed else \
                self.consts[src].shape
            return {self.node.output[0]: np.array(shape, dtype=np.int64)}
        vals = [self.consts.get(n) if n else None for n in self.args]
        if any(v is None for v, n in zip(vals, self.args, strict=True) if n):
            raise self.fail("an input is neither constant nor computed from the input")
        out = _fold(op, a, vals)
        if out is None:
            raise self.fail("not folded as a constant")
        return {self.node.output[0]: out}

    # -- one step on the computed values ----------------------------------------------------
    def step(self) -> Step:
        op, out = self.op, self.node.output[0]
        dep = [self.args[k] for k in range(len(self.args)) if self.args[k] in self.computed]
        x = dep[0]
        if op in ("Relu",):
            return Step(nn.ReLU(), (x,), out)
        if op in ("Identity", "Dropout"):
            return Step(nn.Identity(), (x,), out)
        if op == "Gemm":
            return Step(self._gemm(), (x,), out)
        if op == "MatMul":
            return self._matmul(out)
        if op in ("Add", "Sub", "Mul", "Div"):
            return self._arith(out)
        if op == "Conv":
            return Step(self._conv(), (x,), out)
        if op == "BatchNormalization":
            return Step(self._batchnorm(), (x,), out)
        if op in ("MaxPool", "AveragePool"):
            return Step(self._pool(), (x,), out)
        if op == "GlobalAveragePool":
            if len(self.shape(0)) != 4:
                raise self.fail("only on (N, C, H, W) inputs")
            return Step(nn.AdaptiveAvgPool2d(1), (x,), out)
        if op in ("Flatten", "Reshape", "Squeeze", "Unsqueeze", "Transpose"):
            return Step(self._reshape(), (x,), out)
        raise self.fail("not converted")

    def _only_first(self) -> None:
        if self.args[0] not in self.computed or any(
                n in self.computed for n in self.args[1:]):
            raise self.fail("only its first input may depend on the network's input")

    def _gemm(self) -> nn.Module:
        self._only_first()
        a = self.attrs
        if a.get("transA", 0):
            raise self.fail("transA=1")
        if len(self.shape(0)) != 2:
            raise self.fail(f"input of shape {self.shape(0)}, expected (N, features)")
        w = self.const(1).astype(np.float64)
        w = w if a.get("transB", 0) else w.T  # (out, in)
        w = w * float(a.get("alpha", 1.0))
        c = self.const(2)
        if c is not None and np.ndim(c) == 2 and np.shape(c)[0] != 1:
            raise self.fail(f"a bias C of shape {np.shape(c)} with a batch dimension")
        bias = (np.array(np.broadcast_to(np.asarray(c, dtype=np.float64)
                                         * float(a.get("beta", 1.0)),
                                         (1, w.shape[0]))).reshape(-1)
                if c is not None else None)
        return _linear(w, bias)

    def _matmul(self, out: str) -> Step:
        left, right = self.args
        if right in self.consts and left in self.computed:
            w = self.consts[right]
            if w.ndim != 2:
                raise self.fail(f"a constant of shape {w.shape}; a matrix is converted")
            return Step(_linear(w.T, None), (left,), out)
        if left in self.consts and right in self.computed:
            w = self.consts[left]
            shape = self.shape(1)
            if w.ndim != 2 or len(shape) != 3 or shape[2] != 1:
                raise self.fail("a constant matrix times a computed (N, m, 1) column is "
                                f"converted; got {w.shape} @ {shape}")
            return Step(LeftLinear(_linear(w, None)), (right,), out)
        raise self.fail("a product of two computed tensors")

    def _arith(self, out: str) -> Step:
        x, y = self.args
        if x in self.computed and y in self.computed:
            if self.op not in ("Add", "Sub"):
                raise self.fail("a product or quotient of two computed tensors")
            return Step(Sum(self.op == "Sub"), (x, y), out)
        if x in self.computed:
            value, t, left = self.consts[y], x, False
        else:
            if self.op == "Div":
                raise self.fail("division by a computed tensor")
            value, t, left = self.consts[x], y, True
        shape = self.shape(self.args.index(t))  # (1, ...): the batch dimension included
        if np.ndim(value) > len(shape):
            raise self.fail(f"a constant of shape {np.shape(value)} broadcast over a tensor "
                            f"of shape {shape}")
        if np.ndim(value) == len(shape) and np.shape(value)[0] != 1:
            raise self.fail(f"a constant of shape {np.shape(value)} along the batch dimension")
        return Step(Constant(self.op, value, left and self.op == "Sub"), (t,), out)

    def _conv(self) -> nn.Module:
        self._only_first()
        a = self.attrs
        if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            raise self.fail("auto_pad")
        w = self.const(1)
        b = self.const(2)
        dims = w.ndim - 2
        if dims not in (1, 2):
            raise self.fail(f"a {dims}-D convolution")
        pads = list(a.get("pads", [0] * 2 * dims))
        if pads[:dims] != pads[dims:]:
            raise self.fail(f"asymmetric padding {pads}")
        cls = nn.Conv2d if dims == 2 else nn.Conv1d
        group = int(a.get("group", 1))
        conv = cls(w.shape[1] * group, w.shape[0], tuple(w.shape[2:]),
                   stride=tuple(a.get("strides", [1] * dims)), padding=tuple(pads[:dims]),
                   dilation=tuple(a.get("dilations", [1] * dims)), groups=group,
                   bias=b is not None)
        with torch.no_grad():
            conv.weight.copy_(torch.as_tensor(np.array(w)))
            if b is not None:
                conv.bias.copy_(torch.as_tensor(np.array(b)))
        return conv

    def _batchnorm(self) -> nn.Module:
        self._only_first()
        scale, bias, mean, var = (self.const(k) for k in range(1, 5))
        rank = len(self.shape(0))
        cls = nn.BatchNorm2d if rank == 4 else nn.BatchNorm1d
        if rank not in (2, 3, 4):
            raise self.fail(f"on inputs of rank {rank}")
        bn = cls(len(mean), eps=float(self.attrs.get("epsilon", 1e-5)))
        with torch.no_grad():
            bn.weight.copy_(torch.as_tensor(np.array(scale)))
            bn.bias.copy_(torch.as_tensor(np.array(bias)))
            bn.running_mean.copy_(torch.as_tensor(np.array(mean)))
            bn.running_var.copy_(torch.as_tensor(np.array(var)))
        return bn.eval()

    def _pool(self) -> nn.Module:
        a = self.attrs
        if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            raise self.fail("auto_pad")
        kernel = tuple(a["kernel_shape"])
        if len(kernel) != 2 or len(self.shape(0)) != 4:
            raise self.fail("only 2-D pooling of (N, C, H, W) inputs")
        pads = list(a.get("pads", [0, 0, 0, 0]))
        if pads[:2] != pads[2:]:
            raise self.fail(f"asymmetric padding {pads}")
        if any(d != 1 for d in a.get("dilations", [1, 1])) and self.op == "AveragePool":
            raise self.fail("dilation")
        stride = tuple(a.get("strides", [1, 1]))
        ceil = bool(a.get("ceil_mode", 0))
        if self.op == "MaxPool":
            if len(self.node.output) > 1 and self.node.output[1]:
                raise self.fail("with indices")
            return nn.MaxPool2d(kernel, stride, tuple(pads[:2]),
                                tuple(a.get("dilations", [1, 1])), ceil_mode=ceil)
        return nn.AvgPool2d(kernel, stride, tuple(pads[:2]), ceil_mode=ceil,
                            count_include_pad=bool(a.get("count_include_pad", 0)))

    def _reshape(self) -> nn.Module:
        """Flatten, Reshape, Squeeze, Unsqueeze and no-op Transposes, all as a reshape that
        keeps the batch dimension; computed at batch 1, so a target whose first size is
        not the batch's (1) is refused."""
        src = self.shape(0)
        probe = np.zeros(src)
        a = self.attrs
        if self.op == "Flatten":
            axis = int(a.get("axis", 1)) % (len(src) or 1)
            new = (int(np.prod(src[:axis])), int(np.prod(src[axis:])))
        elif self.op == "Reshape":
            target = [int(s) for s in self.const(1)]
            if not a.get("allowzero", 0):
                target = [src[i] if s == 0 else s for i, s in enumerate(target)]
            new = probe.reshape(target).shape
        elif self.op in ("Squeeze", "Unsqueeze"):
            axes = a.get("axes")
            if axes is None and len(self.args) > 1:
                axes = [int(v) for v in self.const(1)]
            if self.op == "Squeeze":
                new = np.squeeze(probe, axis=None if axes is None else tuple(axes)).shape
            else:
                new = np.expand_dims(probe, tuple(axes)).shape
        else:  # Transpose
            perm = list(a.get("perm", list(range(len(src)))[::-1]))
            moved = [p for p in perm if src[p] != 1]
            if moved != sorted(moved):
                raise self.fail(f"perm {perm} on shape {src} moves the data")
            new = tuple(src[p] for p in perm)
        if not new or new[0] != 1 or src[0] != 1:
            raise self.fail(f"shape {src} to {tuple(new)} does not keep the batch dimension")
        return Reshape(tuple(new[1:]))


def _linear(w: np.ndarray, bias) -> nn.Linear:
    """``nn.Linear`` with weight ``w`` ``(out, in)`` and ``bias`` ``(out,)`` or ``None``."""
    lin = nn.Linear(w.shape[1], w.shape[0], bias=bias is not None)
    with torch.no_grad():
        lin.weight.copy_(torch.as_tensor(np.array(w, dtype=np.float32)))
        if bias is not None:
            lin.bias.copy_(torch.as_tensor(np.array(bias, dtype=np.float32)))
    return lin


def _fold(op: str, a: dict, vals: list) -> np.ndarray | None:
    """``op`` on constant inputs ``vals`` (shape arithmetic), or ``None`` when not folded."""
    x = vals[0]
    if op in ("Identity", "Dropout"):
        return x
    if op == "Cast":
        from onnx import helper

        return x.astype(helper.tensor_dtype_to_np_dtype(int(a["to"])))
    if op in ("Add", "Sub", "Mul", "Div"):
        f = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}[op]
        out = f(x, vals[1])
        if op == "Div" and np.issubdtype(x.dtype, np.integer):
            out = (x // vals[1]).astype(x.dtype)
        return np.asarray(out).astype(np.result_type(x, vals[1]))
    if op == "Gather":
        return np.take(x, vals[1], axis=int(a.get("axis", 0)))
    if op == "Unsqueeze":
        axes = a.get("axes", vals[1] if len(vals) > 1 else None)
        return np.expand_dims(x, tuple(int(v) for v in axes))
    if op == "Squeeze":
        axes = a.get("axes", vals[1] if len(vals) > 1 else None)
        return np.squeeze(x, axis=None if axes is None else tuple(int(v) for v in axes))
    if op == "Concat":
        return np.concatenate([v for v in vals], axis=int(a["axis"]))
    if op == "Reshape":
        return x.reshape([int(s) for s in vals[1]])
    if op == "Transpose":
        return np.transpose(x, a.get("perm"))
    return None


def max_difference(module: nn.Module, run, input_shape: tuple[int, ...],
                   example: np.ndarray | None = None, n: int = 8,
                   seed: int = 0) -> tuple[float, float]:
    """``(max |torch - ONNX Runtime|, max |ONNX Runtime|)`` of the logits on ``n`` random
    inputs (half uniform in [0, 1], half standard normal) and the ``example`` rows; ``run``
    maps ``(m, *input_shape)`` float32 inputs to the graph's outputs ``(m, k)``."""
    rng = np.random.default_rng(seed)
    size = math.prod(input_shape)
    rows = [rng.uniform(0, 1, (n // 2, size)), rng.standard_normal((n - n // 2, size))]
    if example is not None:
        rows.append(np.asarray(example, dtype=np.float64).reshape(len(example), -1))
    x = np.concatenate(rows).reshape(-1, *input_shape).astype(np.float32)
    want = np.asarray(run(x), dtype=np.float64).reshape(len(x), -1)
    with torch.no_grad():
        logits = module(torch.as_tensor(x)).double()
        dropped = getattr(module, "dropped", None)
        if dropped == "Softmax":
            logits = torch.softmax(logits, dim=1)
        elif dropped == "LogSoftmax":
            logits = torch.log_softmax(logits, dim=1)
        have = logits.numpy().reshape(len(x), -1)
    if have.shape != want.shape:
        return math.inf, float(np.abs(want).max())
    return float(np.abs(have - want).max()), float(np.abs(want).max())


def torch_via_onnx(module: nn.Module, input_shape: tuple[int, ...],
                   dtype: torch.dtype = torch.float32) -> OnnxModule:
    """A TorchScript module (scripted or traced) or a ``torch.export`` program's module as
    an :class:`OnnxModule`: exported to ONNX in memory (torch's TorchScript-based exporter;
    an exported program is traced first, a :class:`~robustscope.models.fixed_batch.
    FixedBatch` at its fixed batch, which the reader frees where it is 1), then read by
    :func:`onnx_to_torch`. Raises
    :class:`UnsupportedOnnx` (or the exporter's error) where that fails."""
    import onnx

    from robustscope.models.fixed_batch import FixedBatch

    batch = 1
    if isinstance(module, FixedBatch):  # exported at its own batch (the reader frees 1)
        module, batch = module.inner, module.batch
    weight = next(iter(module.parameters()), None)
    device = weight.device if weight is not None else torch.device("cpu")
    example = torch.zeros(batch, *input_shape, dtype=dtype, device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if isinstance(module, torch.fx.GraphModule):
            module = torch.jit.trace(module, example)
        buf = io.BytesIO()
        torch.onnx.export(module, example, buf, dynamo=False, input_names=["x"],
                          output_names=["y"])
    layers = onnx_to_torch(onnx.load_from_string(buf.getvalue()))
    layers.notes = [n for n in layers.notes if "fixed batch" not in n]
    return layers.to(dtype)
