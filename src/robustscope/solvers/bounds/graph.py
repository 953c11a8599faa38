"""A torch network as a graph of four kinds of nodes, read with ``torch.fx``.

Every supported operation becomes one of

- ``input``: the network's input ``(n, *input_shape)``;
- ``affine``: ``fn(parent)``, an affine map applied per sample (Linear, Conv1d/2d,
  BatchNorm in eval mode, Flatten / view / reshape, AvgPool, Dropout in eval mode, slicing,
  and arithmetic with constants: the standardising ``(x - mean) / std`` layers put in front);
- ``relu``: ``max(parent, 0)``;
- ``sum``: the sum of its parents (residual additions; ``a - b`` is ``a + (-b)``).

``MaxPool2d`` (no padding) becomes ReLUs: ``max(a, b) = b + relu(a - b)``, applied as a
tree over the window's elements, so every method below (and the MILP) handles it exactly.
Anything else raises :class:`InputError` naming the first unsupported operation.

The graph holds a float64 copy of the network's parameters on the requested device.
"""

from __future__ import annotations

import copy
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from robustscope.core.errors import InputError

INPUT, AFFINE, RELU, SUM = "input", "affine", "relu", "sum"

#: Modules whose forward is affine per sample (in eval mode).
_AFFINE_MODULES = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.BatchNorm1d, nn.BatchNorm2d,
                   nn.AvgPool1d, nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.Flatten, nn.Identity,
                   nn.Dropout, nn.Unflatten)
#: Functions affine in their first argument when every other argument is a constant.
_AFFINE_FUNCTIONS = {F.linear, F.conv1d, F.conv2d, F.avg_pool1d, F.avg_pool2d,
                     F.adaptive_avg_pool2d, torch.flatten, operator.getitem, operator.neg,
                     torch.neg, F.dropout}
_RESHAPE_METHODS = {"view", "reshape", "flatten", "contiguous", "squeeze", "unsqueeze"}
_ADD = {operator.add, torch.add, operator.iadd, "add", "add_"}
_SUB = {operator.sub, torch.sub, operator.isub, "sub", "sub_"}
_MUL = {operator.mul, torch.mul, operator.imul, "mul", "mul_"}
_DIV = {operator.truediv, torch.div, operator.itruediv, "div", "div_", "truediv"}
_RELU = {F.relu, torch.relu, "relu", "relu_"}


@dataclass
class Node:
    """One node. ``shape`` excludes the batch dimension; ``parents`` index earlier nodes.

    For an affine node, ``fn`` maps ``(m, *parent shape)`` to ``(m, *shape)``; ``bias`` is
    ``fn(0)`` of shape ``shape``; ``transpose`` (optional) maps coefficients
    ``(m, *shape)`` to ``(m, *parent shape)`` faster than autograd; ``macs`` counts the
    multiply-adds of one sample's forward pass; ``abs_fn`` applies ``|W|`` (for maps whose
    matrix has one nonzero per row, or none negative, it is ``|fn(r) - bias|``).
    """

    kind: str
    parents: tuple[int, ...]
    shape: tuple[int, ...]
    name: str
    fn: Callable[[torch.Tensor], torch.Tensor] | None = None
    bias: torch.Tensor | None = None
    transpose: Callable[[torch.Tensor], torch.Tensor] | None = None
    macs: int = 0
    #: ``|W| r`` for ``r >= 0`` ``(m, *parent shape)``, ``W`` the linear part (IBP)
    abs_fn: Callable[[torch.Tensor], torch.Tensor] | None = None
    #: ``abs_fn`` is linear: it applies ``|W|`` to ``r`` of any sign (forward mode then
    #: needs one call instead of one per sign)
    abs_linear: bool = False

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass
class Network:
    """A topologically ordered list of nodes; node 0 is the input, the last the logits."""

    nodes: list[Node]
    device: torch.device
    dtype: torch.dtype = torch.float64
    _users: list[list[int]] = field(default_factory=list, repr=False)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return self.nodes[0].shape

    @property
    def n_classes(self) -> int:
        return self.nodes[-1].size

    @property
    def relus(self) -> list[int]:
        """Indices of the ReLU nodes, in order."""
        return [i for i, nd in enumerate(self.nodes) if nd.kind == RELU]

    @property
    def n_relus(self) -> int:
        return sum(self.nodes[i].size for i in self.relus)

    def forward(self, x: torch.Tensor, upto: int | None = None) -> list[torch.Tensor]:
        """Every node's value for inputs ``x`` ``(n, *input_shape)`` (cast to float64), or
        only those of nodes ``0 .. upto``."""
        values: list[torch.Tensor] = []
        for nd in self.nodes[:None if upto is None else upto + 1]:
            if nd.kind == INPUT:
                values.append(x.to(device=self.device, dtype=self.dtype).reshape(
                    len(x), *nd.shape))
            elif nd.kind == AFFINE:
                values.append(nd.fn(values[nd.parents[0]]))
            elif nd.kind == RELU:
                values.append(values[nd.parents[0]].clamp_min(0))
            else:
                values.append(sum(values[p] for p in nd.parents))
        return values

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """``(n, k)`` logits in float64."""
        return self.forward(x)[-1].reshape(len(x), -1)

    def prefix_macs(self) -> list[int]:
        """Per node, the multiply-adds of one sample's pass over every node up to it."""
        total, out = 0, []
        for nd in self.nodes:
            total += nd.macs + (nd.size if nd.kind != INPUT else 0)
            out.append(total)
        return out


def read_network(module: nn.Module, input_shape: tuple[int, ...],
                 device: str | torch.device = "cpu") -> Network:
    """The graph of ``module`` for inputs of shape ``input_shape`` (batch excluded).

    Raises :class:`InputError` naming the first operation that is not supported (and for
    TorchScript modules, which ``torch.fx`` cannot read; a scripted ``Sequential`` of
    Linear / ReLU / Flatten layers is read layer by layer).
    """
    device = torch.device(device)
    module = _plain_module(module)
    try:
        net64 = copy.deepcopy(module).to(device=device, dtype=torch.float64).eval()
    except Exception as exc:  # modules holding handles, locks, ... cannot be copied
        raise InputError(f"bound propagation cannot copy {type(module).__name__} to float64 "
                         f"({type(exc).__name__}: {exc})") from exc
    for p in net64.parameters():
        p.requires_grad_(False)
    try:
        gm = torch.fx.symbolic_trace(net64)
    except Exception as exc:  # fx raises many kinds on dynamic control flow
        raise InputError(f"bound propagation cannot read {type(module).__name__} with "
                         f"torch.fx ({type(exc).__name__}: {exc})") from exc
    example = torch.zeros(1, *input_shape, dtype=torch.float64, device=device)
    try:
        torch.fx.passes.shape_prop.ShapeProp(gm).propagate(example)
    except Exception as exc:
        raise InputError(f"bound propagation: {type(module).__name__} does not run on inputs "
                         f"of shape {tuple(input_shape)} ({exc})") from exc
    try:
        return _Reader(gm, tuple(input_shape), device).read()
    except InputError:
        raise
    except Exception as exc:  # a user's module can make any operation fail
        raise InputError(f"bound propagation cannot read {type(module).__name__} "
                         f"({type(exc).__name__}: {exc})") from exc


def _plain_module(module) -> nn.Module:
    """A TorchScript Sequential of Linear / ReLU / Flatten layers as a plain Sequential."""
    if not isinstance(module, torch.jit.ScriptModule):
        return module
    if getattr(module, "original_name", None) != "Sequential":
        raise InputError("bound propagation cannot read a TorchScript module other than a "
                         "Sequential of Linear, ReLU and Flatten layers; pass the nn.Module")
    layers = []
    for i, m in enumerate(module.children()):
        name = getattr(m, "original_name", type(m).__name__)
        if name == "Linear":
            lin = nn.Linear(m.weight.shape[1], m.weight.shape[0], bias=m.bias is not None)
            with torch.no_grad():
                lin.weight.copy_(m.weight)
                if m.bias is not None:
                    lin.bias.copy_(m.bias)
            layers.append(lin)
        elif name in ("ReLU", "Flatten", "Identity"):
            layers.append({"ReLU": nn.ReLU, "Flatten": nn.Flatten,
                           "Identity": nn.Identity}[name]())
        else:
            raise InputError(f"bound propagation: layer {i} of the TorchScript Sequential is "
                             f"{name}, which is not supported")
    return nn.Sequential(*layers)


class _Reader:
    """Walks an fx graph once; ``ids`` maps an fx node to its graph node (it depends on the
    input) and ``consts`` to its value (it does not)."""

    def __init__(self, gm: torch.fx.GraphModule, input_shape, device) -> None:
        self.gm, self.device = gm, device
        self.nodes: list[Node] = []
        self.ids: dict[torch.fx.Node, int] = {}
        self.consts: dict[torch.fx.Node, object] = {}
        self.input_shape = input_shape

    def read(self) -> Network:
        for fx_node in self.gm.graph.nodes:
            self._read(fx_node)
        return Network(self.nodes, self.device)

    # -- helpers --------------------------------------------------------------------------
    def _add(self, node: Node) -> int:
        self.nodes.append(node)
        return len(self.nodes) - 1

    def _shape(self, fx_node) -> tuple[int, ...]:
        meta = fx_node.meta.get("tensor_meta")
        if meta is None or not hasattr(meta, "shape"):
            raise InputError(f"bound propagation: operation '{fx_node.name}' does not return "
                             "one tensor")
        shape = tuple(meta.shape)
        if not shape or shape[0] != 1:
            raise InputError(f"bound propagation: operation '{fx_node.name}' changes the "
                             f"batch dimension (shape {shape} for one input)")
        return shape[1:]

    def _const(self, arg):
        """The value of a constant argument (nested tuples / lists allowed)."""
        if isinstance(arg, torch.fx.Node):
            return self.consts[arg]
        if isinstance(arg, (list, tuple)):
            return type(arg)(self._const(a) for a in arg)
        if isinstance(arg, slice):
            return slice(self._const(arg.start), self._const(arg.stop), self._const(arg.step))
        return arg

    def _depends(self, arg) -> bool:
        if isinstance(arg, torch.fx.Node):
            return arg in self.ids
        if isinstance(arg, (list, tuple)):
            return any(self._depends(a) for a in arg)
        if isinstance(arg, slice):
            return any(self._depends(a) for a in (arg.start, arg.stop, arg.step))
        return False

    def _affine(self, parent: int, fn, shape, name, transpose=None, macs=None,
                abs_fn=None) -> int:
        """An affine node; without ``abs_fn`` the map must be elementwise, a selection or
        have no negative entry (then ``|W| r = |W r|`` for ``r >= 0``). A given ``abs_fn``
        must be linear (``|W| r`` for ``r`` of any sign)."""
        in_shape = self.nodes[parent].shape
        with torch.no_grad():
            zero = torch.zeros(1, *in_shape, dtype=torch.float64, device=self.device)
            bias = fn(zero).reshape(shape)
        if macs is None:
            macs = math.prod(shape)
        linear = abs_fn is not None
        if abs_fn is None:
            abs_fn = lambda r, fn=fn, b=bias: (fn(r) - b).abs()  # noqa: E731
        return self._add(Node(AFFINE, (parent,), tuple(shape), name, fn, bias, transpose,
                              int(macs), abs_fn, linear))

    def _unsupported(self, fx_node, what: str):
        where = fx_node.target if fx_node.op == "call_module" else fx_node.name
        raise InputError(f"bound propagation does not support operation '{where}' "
                         f"({what}); supported: Linear, Conv1d/2d, ReLU, BatchNorm (eval), "
                         "Flatten/view/reshape, AvgPool, MaxPool2d without padding, residual "
                         "additions and arithmetic with constants")

    # -- one fx node ----------------------------------------------------------------------
    def _read(self, fx_node) -> None:
        op = fx_node.op
        if op == "placeholder":
            if self.nodes:
                self._unsupported(fx_node, "a second input")
            self.ids[fx_node] = self._add(Node(INPUT, (), self.input_shape, "input"))
            return
        if op == "get_attr":
            target = self.gm
            for part in fx_node.target.split("."):
                target = getattr(target, part)
            self.consts[fx_node] = target
            return
        if op == "output":
            out = fx_node.args[0]
            if not (isinstance(out, torch.fx.Node) and out in self.ids):
                self._unsupported(fx_node, "an output that is not one tensor of logits")
            if self.ids[out] != len(self.nodes) - 1:  # make the logits the last node
                self.ids[out] = self._affine(self.ids[out], lambda t: t, self._shape(out),
                                             "output")
            if len(self.nodes[-1].shape) != 1:
                self._unsupported(fx_node, f"logits of shape {self.nodes[-1].shape}, "
                                           "expected (n, k)")
            return
        if not self._depends(list(fx_node.args) + list(fx_node.kwargs.values())):
            self._constant(fx_node)
            return
        if (fx_node.op == "call_method" and fx_node.target in ("size", "dim")) or \
                (fx_node.target is getattr and fx_node.args[1] in ("shape", "ndim")):
            self.consts[fx_node] = _SIZE  # sizes only feed reshapes, read from shapes
            return
        if op == "call_module":
            self._module(fx_node, self.gm.get_submodule(fx_node.target))
        elif op == "call_function":
            self._function(fx_node, fx_node.target)
        elif op == "call_method":
            self._function(fx_node, fx_node.target)
        else:
            self._unsupported(fx_node, op)

    def _constant(self, fx_node) -> None:
        args, kwargs = self._const(fx_node.args), self._const(fx_node.kwargs)
        if _SIZE in _flat(args) or _SIZE in _flat(list(kwargs.values())):
            self.consts[fx_node] = _SIZE
            return
        if fx_node.op == "call_module":
            value = self.gm.get_submodule(fx_node.target)(*args, **kwargs)
        elif fx_node.op == "call_method":
            value = getattr(args[0], fx_node.target)(*args[1:], **kwargs)
        else:
            value = fx_node.target(*args, **kwargs)
        self.consts[fx_node] = value

    def _module(self, fx_node, mod: nn.Module) -> None:
        parent = self._single_input(fx_node)
        shape = self._shape(fx_node)
        name = f"{fx_node.target} ({type(mod).__name__})"
        if isinstance(mod, nn.ReLU):
            self.ids[fx_node] = self._add(Node(RELU, (parent,), shape, name))
        elif isinstance(mod, nn.MaxPool2d):
            self.ids[fx_node] = self._maxpool(fx_node, parent, mod.kernel_size, mod.stride,
                                              mod.padding, mod.dilation, mod.ceil_mode, name)
        elif isinstance(mod, _AFFINE_MODULES):
            if isinstance(mod, (nn.BatchNorm1d, nn.BatchNorm2d)) and \
                    mod.running_mean is None:
                self._unsupported(fx_node, "BatchNorm without running statistics")
            transpose = abs_fn = None
            macs = math.prod(shape)
            if isinstance(mod, nn.Linear):
                w = mod.weight
                transpose = lambda a, w=w: a @ w  # noqa: E731
                abs_fn = lambda r, w=w.abs(): r @ w.T  # noqa: E731
                macs = w.numel()
            elif isinstance(mod, (nn.Conv1d, nn.Conv2d)):
                macs = math.prod(shape) * mod.weight[0].numel()
                conv = F.conv2d if isinstance(mod, nn.Conv2d) else F.conv1d
                if mod.padding_mode != "zeros":
                    self._unsupported(fx_node, f"convolution with {mod.padding_mode} padding")
                abs_fn = lambda r, m=mod, c=conv, w=mod.weight.abs(): c(  # noqa: E731
                    r, w, None, m.stride, m.padding, m.dilation, m.groups)
                transpose = _conv_transpose(mod, self.nodes[parent].shape)
            elif isinstance(mod, (nn.BatchNorm1d, nn.BatchNorm2d)):
                scale = _batchnorm_scale(mod, self.nodes[parent].shape)
                transpose = lambda a, s=scale: a * s  # noqa: E731
                abs_fn = lambda r, s=scale.abs(): r * s  # noqa: E731
            else:  # pooling averages, flattening, identity: no negative weight, no bias
                abs_fn = mod
            self.ids[fx_node] = self._affine(parent, mod, shape, name, transpose, macs,
                                             abs_fn)
        else:
            self._unsupported(fx_node, f"module {type(mod).__name__}")

    def _single_input(self, fx_node) -> int:
        args = list(fx_node.args) + list(fx_node.kwargs.values())
        dep = [a for a in args if self._depends(a)]
        if len(dep) != 1 or not isinstance(dep[0], torch.fx.Node) or dep[0] is not args[0]:
            self._unsupported(fx_node, "an operation on more than one input-dependent tensor")
        return self.ids[dep[0]]

    def _function(self, fx_node, target) -> None:
        shape = self._shape(fx_node)
        name = f"{fx_node.name} ({getattr(target, '__name__', target)})"
        args = fx_node.args
        dep = [self._depends(a) for a in args] + [self._depends(v)
                                                  for v in fx_node.kwargs.values()]
        if target in _ADD or target in _SUB:
            sign = 1.0 if target in _ADD else -1.0
            if len(args) == 2 and all(dep) and not fx_node.kwargs:
                a, b = self.ids[args[0]], self.ids[args[1]]
                if sign < 0:
                    b = self._affine(b, operator.neg, self.nodes[b].shape, f"{name} (negate)",
                                     transpose=operator.neg, abs_fn=_identity)
                self.ids[fx_node] = self._add(Node(SUM, (a, b), shape, name))
                return
            if len(args) == 2 and not fx_node.kwargs:
                if dep[0]:
                    c = self._const(args[1])
                    fn = (lambda t, c=c: t + c) if sign > 0 else (lambda t, c=c: t - c)
                    self.ids[fx_node] = self._affine(self.ids[args[0]], fn, shape, name)
                else:
                    c = self._const(args[0])
                    fn = (lambda t, c=c: c + t) if sign > 0 else (lambda t, c=c: c - t)
                    self.ids[fx_node] = self._affine(self.ids[args[1]], fn, shape, name)
                return
            self._unsupported(fx_node, "an addition with extra arguments")
        if target in _MUL or target in _DIV:
            if len(args) != 2 or fx_node.kwargs or all(dep) or (target in _DIV and dep[1]):
                self._unsupported(fx_node, "a product or quotient of input-dependent tensors")
            k = 0 if dep[0] else 1
            c = self._const(args[1 - k])
            if target in _MUL:
                fn = lambda t, c=c: t * c  # noqa: E731
            else:
                fn = lambda t, c=c: t / c  # noqa: E731
            self.ids[fx_node] = self._affine(self.ids[args[k]], fn, shape, name)
            return
        parent = self._single_input(fx_node)
        if target in _RELU:
            self.ids[fx_node] = self._add(Node(RELU, (parent,), shape, name))
        elif target in _RESHAPE_METHODS or (
                target is torch.reshape and self._depends(args[0])):
            in_shape = self.nodes[parent].shape
            reshape = lambda t, s=shape: t.reshape(t.shape[0], *s)  # noqa: E731
            self.ids[fx_node] = self._affine(
                parent, reshape, shape, name,
                transpose=lambda a, s=in_shape: a.reshape(a.shape[0], *s), macs=0,
                abs_fn=reshape)
        elif target is F.max_pool2d:
            p = _max_pool_args(self._const(args[1:]), self._const(fx_node.kwargs))
            self.ids[fx_node] = self._maxpool(fx_node, parent, *p, name)
        elif target in _AFFINE_FUNCTIONS:
            rest, kwargs = self._const(args[1:]), self._const(fx_node.kwargs)
            if target is F.dropout and (kwargs.get("training", False) or
                                        (len(rest) > 1 and rest[1])):
                self._unsupported(fx_node, "dropout in training mode")
            macs, abs_fn = math.prod(shape), None
            if target in (F.linear, F.conv1d, F.conv2d):
                weight = rest[0] if rest else kwargs["weight"]
                macs = math.prod(shape) * weight[0].numel()
                r_abs = (weight.abs(), None, *rest[2:]) if rest else ()
                kw_abs = {**kwargs, "bias": None} if "bias" in kwargs else dict(kwargs)
                if not rest:
                    kw_abs["weight"] = weight.abs()
                abs_fn = lambda r, f=target, a=r_abs, kw=kw_abs: f(r, *a, **kw)  # noqa: E731
            fn = lambda t, f=target, r=rest, kw=kwargs: f(t, *r, **kw)  # noqa: E731
            if target in (operator.neg, torch.neg):
                abs_fn = _identity
            elif abs_fn is None:  # averages, selections, flattening: no negative weight or bias
                abs_fn = fn
            self.ids[fx_node] = self._affine(parent, fn, shape, name, macs=macs,
                                             abs_fn=abs_fn)
        else:
            self._unsupported(fx_node, f"function {getattr(target, '__name__', target)}")

    def _maxpool(self, fx_node, parent, kernel, stride, padding, dilation, ceil_mode,
                 name) -> int:
        kernel, stride = _pair(kernel), _pair(stride if stride is not None else kernel)
        if _pair(padding) != (0, 0) or _pair(dilation) != (1, 1):
            self._unsupported(fx_node, "MaxPool2d with padding or dilation")
        shape = self._shape(fx_node)
        if len(shape) != 3 or len(self.nodes[parent].shape) != 3:
            self._unsupported(fx_node, "MaxPool2d on inputs that are not (C, H, W)")
        ho, wo = shape[1], shape[2]
        h_in, w_in = self.nodes[parent].shape[1:]
        if ceil_mode and ((ho - 1) * stride[0] + kernel[0] > h_in or
                          (wo - 1) * stride[1] + kernel[1] > w_in):
            self._unsupported(fx_node, "MaxPool2d whose ceil_mode windows leave the input")
        items = []
        for i in range(kernel[0]):
            for j in range(kernel[1]):
                sl = (slice(None), slice(None),
                      slice(i, i + stride[0] * (ho - 1) + 1, stride[0]),
                      slice(j, j + stride[1] * (wo - 1) + 1, stride[1]))
                window = lambda t, s=sl: t[s]  # noqa: E731  (a selection: |W| = W)
                items.append(self._affine(parent, window, shape,
                                          f"{name} window ({i},{j})", macs=0,
                                          transpose=_window_transpose(sl, (h_in, w_in)),
                                          abs_fn=window))
        while len(items) > 1:  # max(a, b) = b + relu(a - b), pairwise
            nxt = []
            for a, b in zip(items[0::2], items[1::2], strict=False):
                neg = self._affine(b, operator.neg, shape, f"{name} (negate)", macs=0,
                                   transpose=operator.neg, abs_fn=_identity)
                diff = self._add(Node(SUM, (a, neg), shape, f"{name} (difference)"))
                rel = self._add(Node(RELU, (diff,), shape, f"{name} (relu)"))
                nxt.append(self._add(Node(SUM, (rel, b), shape, f"{name} (max)")))
            if len(items) % 2:
                nxt.append(items[-1])
            items = nxt
        return items[0]


def _identity(t: torch.Tensor) -> torch.Tensor:
    return t


def _conv_transpose(mod: nn.Module, in_shape: tuple[int, ...]):
    """``a -> a . W`` of a convolution without bias: coefficients ``(m, *out shape)`` to
    ``(m, *in_shape)`` (the gradient of the input, without running the forward)."""
    grad = torch.nn.grad.conv2d_input if isinstance(mod, nn.Conv2d) else \
        torch.nn.grad.conv1d_input

    def transpose(a: torch.Tensor, w=mod.weight, m=mod) -> torch.Tensor:
        return grad((a.shape[0], *in_shape), w, a, m.stride, m.padding, m.dilation, m.groups)
    return transpose


def _batchnorm_scale(mod: nn.Module, in_shape: tuple[int, ...]) -> torch.Tensor:
    """The per-channel scale of a batch norm in eval mode, shaped to broadcast over
    ``(m, *in_shape)``: its linear part (and its own transpose)."""
    with torch.no_grad():
        scale = torch.rsqrt(mod.running_var + mod.eps)
        if mod.weight is not None:
            scale = scale * mod.weight
    return scale.reshape(-1, *([1] * (len(in_shape) - 1)))


def _window_transpose(sl: tuple, spatial: tuple[int, int]):
    """``a -> a . W`` of taking the strided window ``sl`` of a ``(C, H, W)`` tensor: the
    coefficients scattered back into zeros."""
    def transpose(a: torch.Tensor) -> torch.Tensor:
        out = a.new_zeros(*a.shape[:2], *spatial)
        out[sl] = a
        return out
    return transpose


class _Size:
    """The value of ``x.size(...)`` / ``x.shape``: known only through the reshapes it feeds."""


_SIZE = _Size()


def _flat(args) -> list:
    out = []
    for a in args:
        out.extend(_flat(a) if isinstance(a, (list, tuple)) else [a])
    return out


def _pair(v) -> tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, int) else (int(v[0]), int(v[1]))


def _max_pool_args(rest, kwargs):
    """``(kernel, stride, padding, dilation, ceil_mode)`` of an ``F.max_pool2d`` call."""
    names = ("kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices")
    given = dict(zip(names, rest, strict=False))
    given.update(kwargs)
    if given.get("return_indices"):
        raise InputError("bound propagation: max_pool2d with return_indices is not supported")
    return (given["kernel_size"], given.get("stride"), given.get("padding", 0),
            given.get("dilation", 1), given.get("ceil_mode", False))
