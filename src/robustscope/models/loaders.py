"""Loading model files without running arbitrary code unless the user says so.

Formats by extension: XGBoost ``.json`` / ``.ubj``, LightGBM ``.txt``, scikit-learn ``.skops``,
TorchScript ``.pt`` / ``.pth``, ``torch.export`` programs ``.pt2``, ONNX ``.onnx``;
pickle / joblib (``.pkl``, ``.pickle``, ``.joblib``) only with ``trust_pickle=True``, since
unpickling can execute any code.
"""

from __future__ import annotations

import json
import logging
import math
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from robustscope.core.checks import check_device
from robustscope.core.errors import ModelError
from robustscope.models.base import Classifier
from robustscope.models.blackbox import ProbaClassifier
from robustscope.models.fixed_batch import FixedBatch
from robustscope.models.names import feature_names, named_input
from robustscope.models.shapes import ShapeError, Takes, fit_input, model_input, static_batch
from robustscope.models.threads import ThreadCount
from robustscope.models.torch_model import TorchClassifier
from robustscope.models.trees import wrap_tree_model
from robustscope.models.wrap import wrap_model

log = logging.getLogger(__name__)

PICKLE_SUFFIXES = (".pkl", ".pickle", ".joblib")
MODEL_SUFFIXES = (".json", ".ubj", ".txt", ".skops", ".pt", ".pth", ".pt2", ".onnx",
                  *PICKLE_SUFFIXES)


#: A native library's log prefix: ``[23:21:47] /path/to/file.cc:409: ``.
_NATIVE_PREFIX = re.compile(r"^\[[0-9:]+\]\s+\S+:\d+:\s*")


#: How the command line lets a user trust a pickled file (a spec says it its own way).
TRUST_OPTION = "pass --trust-pickle"


class UntrustedModel(ModelError):
    """A model file that loads only if its source is trusted (it can run code when read).

    ``template`` is the message with ``{trust}`` where the way to trust it goes: the command
    line's :data:`TRUST_OPTION` in ``str(exc)``; :meth:`telling` gives another way."""

    def __init__(self, template: str) -> None:
        super().__init__(template.replace("{trust}", TRUST_OPTION))
        self.template = template

    def telling(self, trust: str) -> str:
        """The message with ``trust`` as the way to trust the file."""
        return self.template.replace("{trust}", trust)


def native_reason(exc: BaseException) -> str:
    """The first line of a library's error, without the native log prefix and stack trace
    that XGBoost and LightGBM append (a user needs the reason, not C++ frames)."""
    text = str(exc).strip()
    text = text.split("Stack trace:")[0].strip()
    first = (text.splitlines() or [type(exc).__name__])[0].strip()
    return _NATIVE_PREFIX.sub("", first).rstrip(" :") or type(exc).__name__


def load_model(path: str | Path, trust_pickle: bool = False, device: str = "cpu",
               example: np.ndarray | None = None) -> Classifier:
    """Load a model file and wrap it as a :class:`Classifier`.

    ``example`` (a few inputs) lets a format that does not state its number of classes
    (TorchScript, ONNX) be probed once.
    """
    path = Path(path)
    if path.is_dir():
        raise ModelError(f"model file {path}: is a folder, not a model file")
    if not path.exists():
        raise ModelError(f"model file {path} does not exist")
    if not path.is_file():
        raise ModelError(f"model file {path}: not a regular file (a pipe, socket or device)")
    check_device(device)
    suffix = path.suffix.lower()
    loaders = {".json": _load_xgboost, ".ubj": _load_xgboost, ".txt": _load_lightgbm}
    if suffix == ".onnx":
        return _load_onnx(path, device, example)
    if suffix in loaders:
        return loaders[suffix](path, device)
    if suffix == ".skops":
        return wrap_model(_load_skops(path, trust_pickle), device=device, example=example)
    if suffix in (".pt", ".pth"):
        return _load_torch(path, trust_pickle, device, example)
    if suffix == ".pt2":
        # torch's own deprecation inside its pytree specs, given wherever the program's spec
        # is unpickled or copied (here and in every deepcopy of the module): nothing the
        # user can act on, so not shown (-q means an empty stderr)
        warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)`",
                                category=FutureWarning)
        try:
            program = torch.export.load(str(path))
        except Exception as exc:
            raise ModelError(f"{path}: not a torch.export program "
                             f"({native_reason(exc)})") from exc
        module = program.module()
        batch = static_batch(module)
        if batch is None:
            return _wrap_fitted(module, example, device, exported=True)
        clf = _wrap_fitted(FixedBatch(module, batch), example, device, exported=True)
        if isinstance(getattr(clf, "module", None), FixedBatch):
            fixed = (f"the program's batch is fixed at {batch}: inputs are run "
                     + ("row by row" if batch == 1 else f"{batch} at a time"))
        else:  # read into layers through ONNX, where the reader freed the batch
            fixed = f"the program's batch is fixed at {batch}; its layers take any batch"
        clf.load_note = fixed if not getattr(clf, "load_note", None) else \
            f"{fixed}; {clf.load_note}"
        return clf
    if suffix in PICKLE_SUFFIXES:
        if not trust_pickle:
            raise UntrustedModel(f"{path}: refusing to unpickle a {suffix} file, which can "
                                 "run arbitrary code; {trust} if you trust its source, or "
                                 "save the model with skops (.skops)")
        import joblib

        return wrap_model(joblib.load(path), device=device, example=example)
    raise ModelError(f"{path}: unknown model file type '{suffix}'; "
                     f"expected one of {', '.join(MODEL_SUFFIXES)}")


def _load_xgboost(path: Path, device: str) -> Classifier:
    try:
        import xgboost as xgb
    except ImportError as exc:  # pragma: no cover - optional dependency
        raise ModelError("reading XGBoost models needs `pip install xgboost-cpu`") from exc
    booster = xgb.Booster()
    try:
        booster.load_model(str(path))
    except xgb.core.XGBoostError as exc:
        raise ModelError(f"{path}: not a valid XGBoost model (damaged or truncated? "
                         f"{native_reason(exc)})") from exc
    config = json.loads(booster.save_config())
    objective = config["learner"]["objective"]["name"]
    n_class = int(config["learner"]["learner_model_param"].get("num_class", "0") or 0)
    if objective.startswith("binary:logistic") or objective == "reg:logistic":
        k = 2
    elif objective == "multi:softprob":
        k = n_class
    else:
        raise ModelError(f"{path}: XGBoost objective '{objective}' does not give class "
                         "probabilities; train with binary:logistic or multi:softprob")

    def predict_proba(x: np.ndarray) -> np.ndarray:
        return booster.inplace_predict(x.astype(np.float32))

    return _tree_or_black_box(booster, predict_proba, k, booster.num_features(),
                              f"xgboost:{path.name}", device)


def _load_lightgbm(path: Path, device: str) -> Classifier:
    try:
        import lightgbm as lgb
    except ImportError as exc:  # pragma: no cover - optional dependency
        raise ModelError("reading LightGBM models needs `pip install lightgbm`") from exc
    try:
        booster = lgb.Booster(model_file=str(path))
    except lgb.basic.LightGBMError as exc:
        raise ModelError(f"{path}: not a valid LightGBM model file "
                         f"({native_reason(exc)})") from exc
    objective = str(booster.params.get("objective", booster.dump_model().get("objective", "")))
    if objective.startswith("binary"):
        k = 2
    elif objective.startswith(("multiclass", "softmax", "multiclassova")):
        k = int(booster.dump_model()["num_class"])
    else:
        raise ModelError(f"{path}: LightGBM objective '{objective}' is not a classifier's")

    count = ThreadCount()  # set by a search's thread policy, through the adapter's setter

    def predict_proba(x: np.ndarray) -> np.ndarray:
        # 0: LightGBM's default (OpenMP's count); inside a search, the search's count
        return booster.predict(x, num_threads=count.value or 0)

    return _tree_or_black_box(booster, predict_proba, k, booster.num_feature(),
                              f"lightgbm:{path.name}", device, count)


def _tree_or_black_box(booster, predict_proba, k: int, d: int, name: str,
                       device: str, count: ThreadCount | None = None) -> Classifier:
    """A booster whose trees robustscope can read gets the exact solver; any other (DART,
    categorical splits, ...) is served as a black box (``predict_proba`` reading its thread
    count from ``count``, when it takes one)."""
    try:
        model = wrap_tree_model(booster, device)
        model.name = name
    except ModelError as exc:
        log.info("%s: trees not readable (%s); using it as a black box", name, exc)
        names = feature_names(booster)
        model = ProbaClassifier(named_input(predict_proba, names), k, (d,), name=name,
                                device=device)
        model.feature_names = names
        model.thread_count = count
    model.native = booster
    return model


#: Types that skops does not trust by default but scikit-learn's own classifiers hold, each
#: reviewed: what ``skops.io.get_untrusted_types`` lists for RandomForest, ExtraTrees,
#: DecisionTree, AdaBoost, GradientBoosting and HistGradientBoosting (skops 0.16, scikit-learn
#: 1.9; a Pipeline of StandardScaler + LogisticRegression lists none). The tree types are
#: arrays of nodes; HistGradientBoosting with ``categorical_features`` keeps
#: ``partial(check_array, ...)``, and a partial can only call what is trusted itself.
SKOPS_SKLEARN_TYPES = frozenset({
    "sklearn.tree._tree.Tree",
    "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
    "sklearn.utils.validation.check_array",
    "functools.partial",
})


def _load_skops(path: Path, trust_pickle: bool):
    """A skops file loads when every type skops would not trust is one of scikit-learn's own
    in :data:`SKOPS_SKLEARN_TYPES`; anything else only with ``trust_pickle``."""
    import skops.io as sio

    try:
        untrusted = sio.get_untrusted_types(file=path)
    except Exception as exc:
        raise ModelError(f"{path}: not a valid skops file ({native_reason(exc)})") from exc
    unknown = [t for t in untrusted if t not in SKOPS_SKLEARN_TYPES]
    if unknown and not trust_pickle:
        raise UntrustedModel(f"{path}: the file holds types that are neither trusted by skops "
                             f"nor scikit-learn's own ({', '.join(unknown)}); {{trust}} if "
                             "you trust its source")
    return sio.load(path, trusted=untrusted)


def load_torchscript(path: str | Path, device: str = "cpu") -> torch.jit.ScriptModule:
    """``torch.jit.load`` without torch's notice that TorchScript is deprecated (a file the
    user gives in a format robustscope reads is no reason for a warning on every load)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*torch\.jit\.load.* is deprecated",
                                category=DeprecationWarning)
        warnings.filterwarnings("ignore", message=r".*torch\.jit\.load.* is deprecated",
                                category=FutureWarning)
        return torch.jit.load(str(path), map_location=device)


def _load_torch(path: Path, trust_pickle: bool, device: str, example) -> Classifier:
    try:
        module = load_torchscript(path, device)
    except RuntimeError as exc:
        if not trust_pickle:
            first = str(exc).splitlines()[0]
            raise UntrustedModel(f"{path}: not a TorchScript file ({first}); save it with "
                                 "torch.jit.script / torch.jit.trace, or {trust} to unpickle "
                                 "a full torch.save'd module") from exc
        module = torch.load(str(path), map_location=device, weights_only=False)
    return _wrap_fitted(module, example, device)


def _wrap_fitted(module, example, device: str, exported: bool = False) -> Classifier:
    """``module`` wrapped, probed on ``example``. Where the probe fails, the shape the model
    takes (:func:`robustscope.models.shapes.model_input`) says why in one line
    (:class:`~robustscope.models.shapes.ShapeError`), or how flat rows fit it: then they are
    reshaped, and ``shape_note`` says so (read by :func:`robustscope.runs.columns.
    match_columns`, which reshapes the data). Data the model runs on is never reshaped.
    An exported program is given the data's input shape (``exported``): without it, reading
    the network for the exact solver probed an input of shape ()."""
    have = None if example is None else tuple(np.shape(example)[1:])
    try:
        clf = wrap_model(module, input_shape=have if exported else None, device=device,
                         example=example)
    except ModelError:
        if example is None:
            raise
        shape, note = fit_input(have, model_input(module))  # ShapeError when they disagree
        if shape is None:
            raise  # the data fits as far as the model says: the error is the model's own
        example = np.asarray(example).reshape(len(example), *shape)
        clf = wrap_model(module, input_shape=shape, device=device, example=example)
        clf.shape_note = note
        _as_layers(clf, shape, example)
        return clf
    clf.shape_note = None
    _as_layers(clf, have, example)
    return clf


#: Layers of a TorchScript Sequential (its ``original_name``) and calls of a
#: ``torch.export`` program that the bound propagation and the network MILP read as they
#: are; a module with any other is read into torch layers (:func:`_as_layers`).
_PLAIN_SCRIPT_LAYERS = frozenset({"Linear", "ReLU", "Flatten", "Identity"})
_PLAIN_EXPORT_CALLS = frozenset({"aten.linear.default", "aten.relu.default",
                                 "aten.flatten.using_ints"})


def _plain(module) -> bool:
    """Whether the bound propagation reads ``module`` as it is."""
    if isinstance(module, FixedBatch):
        return False  # read through its ONNX export, where the batch is freed
    if isinstance(module, torch.jit.ScriptModule):
        return getattr(module, "original_name", None) == "Sequential" and all(
            getattr(m, "original_name", type(m).__name__) in _PLAIN_SCRIPT_LAYERS
            for m in module.children())
    if isinstance(module, torch.fx.GraphModule):
        return all(str(n.target) in _PLAIN_EXPORT_CALLS for n in module.graph.nodes
                   if n.op == "call_function")
    return True


def _as_layers(clf: Classifier, shape, example) -> None:
    """A TorchScript module or ``torch.export`` program that the bound propagation cannot
    read as it is (convolutions, batch norms, pooling, residual sums, ...) is read into
    torch layers through its ONNX export (:func:`robustscope.models.onnx_graph.
    torch_via_onnx`, the ONNX reader), checked against the module itself on random inputs;
    ``load_note`` says what was done, or why the module is kept as it is."""
    module = getattr(clf, "module", None)
    if module is None or shape is None or _plain(module):
        return
    from robustscope.models.onnx_graph import max_difference, torch_via_onnx

    kind = "TorchScript module" if isinstance(module, torch.jit.ScriptModule) else \
        "torch.export program"
    shape = tuple(int(s) for s in shape)

    def run(x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return module(torch.as_tensor(x, dtype=clf.dtype, device=clf.device)
                          ).detach().cpu().double().numpy()
    try:
        layers = torch_via_onnx(module, shape, clf.dtype)
        diff, scale = max_difference(layers, run, shape, example)
    except Exception as exc:  # the exporter and the reader raise many kinds
        clf.load_note = (f"the {kind} was not read into layers for certified bounds "
                         f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")
        log.info("%s", clf.load_note)
        return
    if not diff <= ONNX_MATCH_RTOL * (1 + scale):
        clf.load_note = (f"the {kind} read into layers differs from it by {diff:.3g} on random "
                         "inputs; kept as it is (no certified bounds)")
        return
    clf.module = layers.to(clf.device).eval()
    for p in clf.module.parameters():
        p.requires_grad_(False)
    clf.load_note = (f"the {kind} was read into torch layers through its ONNX export (max "
                     f"|logit difference| on random inputs {diff:.2g}), for gradients and "
                     "certified bounds")


#: The converted network is used when its logits are within this of ONNX Runtime's on
#: random inputs, relative to ``1 + max |logit|`` (float32 sums in another order differ by
#: a few ulps of the largest logit).
ONNX_MATCH_RTOL = 1e-4


@dataclass
class OnnxGraph:
    """An ONNX file run by ONNX Runtime: ``run(x)`` maps inputs ``(m, *shape)`` (any
    ``m``: a fixed batch is filled one chunk at a time) to the graph's output ``(m, k)``;
    ``shape`` the per-input shape (``-1`` where the graph leaves a size free),
    ``batch`` the graph's fixed batch (``None`` when free), ``input_name`` its input."""

    path: Path
    run: Callable[[np.ndarray], np.ndarray]
    shape: tuple[int, ...]
    batch: int | None
    input_name: str
    output_name: str
    outputs_probabilities: bool
    per_column: bool
    inputs: list
    count: ThreadCount


def open_onnx(path: str | Path) -> OnnxGraph:
    """The ONNX Runtime session of ``path`` (one per thread count a search sets through
    the adapter's setter), as an :class:`OnnxGraph`."""
    path = Path(path)
    try:
        import onnxruntime as ort
    except ImportError as exc:  # pragma: no cover - optional dependency
        raise ModelError("reading ONNX models needs `pip install onnxruntime`") from exc
    try:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise ModelError(f"{path}: not a valid ONNX model ({native_reason(exc)})") from exc
    # a session's thread pool is fixed when it is made: one per thread count a search's
    # policy sets through the adapter's setter (search/threads.py), made on first use; None
    # is the default session
    sessions = {None: session}
    count = ThreadCount()

    def session_for(threads: int | None):
        if threads not in sessions:
            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            sessions[threads] = ort.InferenceSession(str(path), options,
                                                     providers=["CPUExecutionProvider"])
        return sessions[threads]
    inputs = session.get_inputs()
    inp = inputs[0]
    outputs = session.get_outputs()
    # scikit-learn converters name it "probabilities" / "output_probability"; a network's
    # single float output is taken as logits (softmax keeps its argmax).
    names = [o.name for o in outputs]
    prob_name = next((n for n in names if "prob" in n.lower()), None)
    out_name = prob_name or names[-1]
    input_dtype = np.float64 if "double" in inp.type else np.float32
    shape = tuple(s if isinstance(s, int) else -1 for s in inp.shape[1:])
    batch = inp.shape[0] if inp.shape and isinstance(inp.shape[0], int) else None

    # one input per column (a converted pipeline fitted on a DataFrame): fed by name
    per_column = len(inputs) > 1 and all(i.shape[1:] in ([], [1]) for i in inputs)
    dtypes = [np.float64 if "double" in i.type else np.float32 for i in inputs]

    def feed_of(x: np.ndarray) -> dict:
        if per_column:
            return {i.name: x[:, j:j + 1].astype(t)
                    for j, (i, t) in enumerate(zip(inputs, dtypes, strict=True))}
        feed = x.reshape(x.shape[0], *shape) if shape else x
        return {inp.name: feed.astype(input_dtype)}

    def run_once(x: np.ndarray):
        (out,) = session_for(count.value).run([out_name], feed_of(x))
        if isinstance(out, list):  # ZipMap: a list of {class: probability} (float32)
            keys = sorted(out[0])
            out = np.array([[row[k] for k in keys] for row in out], dtype=np.float32)
        return np.asarray(out).reshape(len(x), -1)

    def run(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        if batch is None or per_column or len(x) == batch:
            return run_once(x)
        # a fixed batch: chunks of that many rows, the last one filled by repeating its
        # last row (batch 1: row by row)
        parts = []
        for start in range(0, len(x), batch):
            chunk = x[start:start + batch]
            filled = np.concatenate([chunk, np.repeat(chunk[-1:], batch - len(chunk), 0)])
            parts.append(run_once(filled)[:len(chunk)])
        return np.concatenate(parts) if parts else run_once(x[:0])

    return OnnxGraph(path, run, shape, batch, inp.name, out_name, prob_name is not None,
                     per_column, inputs, count)


def _load_onnx(path: Path, device: str, example: np.ndarray | None = None) -> Classifier:
    """An ONNX file as a white box where its graph converts
    (:func:`robustscope.models.onnx_graph.onnx_to_torch`) and matches ONNX Runtime on random
    inputs, else as ONNX Runtime's black box; ``load_note`` says which, and how inputs
    were fitted to the graph's shape."""
    graph = open_onnx(path)
    shape, batch, per_column = graph.shape, graph.batch, graph.per_column
    notes: list[str] = []
    reshape_to = None
    if example is not None and not per_column and -1 not in shape:
        have = tuple(np.shape(example)[1:])
        reshape_to = _fit_onnx_shape(have, shape, graph.input_name, batch)
        if reshape_to is not None:
            notes.append(f"rows of shape {'×'.join(map(str, have))} were taken as "
                         f"{'×'.join(map(str, shape))} inputs, the shape of the ONNX graph's "
                         f"input '{graph.input_name}'")
    white = None if per_column or -1 in shape else _converted(path, graph, example)
    if isinstance(white, str):
        log.warning("%s: %s; using ONNX Runtime as a black box (no gradients, no "
                    "certified bounds)", path.name, white)
        notes.append(f"served by ONNX Runtime as a black box ({white})")
        white = None
    if white is not None:
        module, diff = white
        probe = np.zeros((1, *shape), dtype=np.float32)
        k = int(graph.run(probe).shape[1])
        model: Classifier = TorchClassifier(module, k, shape, device=device,
                                            name=f"onnx:{path.name}")
        notes.insert(0, f"ONNX graph converted to torch (max |logit difference| against "
                        f"ONNX Runtime on random inputs {diff:.2g})"
                     + ("; " + "; ".join(module.notes) if module.notes else ""))
        # the reshape's note is the shape note, which the data's reshaping reports
        model.shape_note = notes.pop(1) if reshape_to is not None else None
        model.load_note = "; ".join(notes)
        model.onnx_graph = graph
        return model

    def run(x: np.ndarray) -> np.ndarray:
        out = graph.run(x)
        if not graph.outputs_probabilities:
            out = out.astype(np.float64)
            out = np.exp(out - out.max(axis=1, keepdims=True))
            out = out / out.sum(axis=1, keepdims=True)
        return out

    probe_dim = int(np.prod([s for s in shape if s > 0])) if shape else 1
    if per_column:
        probe_dim = len(graph.inputs)
    try:
        k = run(np.zeros((1, probe_dim))).shape[1]
    except Exception as exc:
        raise ModelError(f"{path}: could not run the ONNX model on a probe input "
                         f"({native_reason(exc)})") from exc
    if batch is not None and not per_column:
        notes.append(f"the graph's batch is fixed at {batch}: inputs are run "
                     + ("row by row" if batch == 1 else f"{batch} at a time"))
    model = ProbaClassifier(run, k, (probe_dim,), name=f"onnx:{path.name}", device=device)
    model.feature_names = [i.name for i in graph.inputs] if per_column else None
    model.thread_count = graph.count
    model.load_note = "; ".join(notes) or None
    model.onnx_graph = graph
    return model


def _fit_onnx_shape(have: tuple[int, ...], shape: tuple[int, ...], name: str,
                    batch: int | None) -> tuple[int, ...] | None:
    """``None`` when inputs of per-input shape ``have`` are already of the graph's
    ``shape``; ``shape`` when they are flat rows of its size, or the same shape but for
    axes of size 1 (``784`` for ``784×1``); else :class:`ShapeError` naming both."""
    have = tuple(int(s) for s in have)
    if have == tuple(shape):
        return None
    same_size = math.prod(have) == math.prod(shape)
    squeezed = [s for s in have if s != 1] == [s for s in shape if s != 1]
    if same_size and (len(have) == 1 or squeezed):
        return tuple(shape)
    fixed = f", batch fixed at {batch}" if batch is not None else ""
    raise ShapeError(have, Takes(tuple(shape), f"the ONNX graph's input '{name}'{fixed}"))


def _converted(path: Path, graph: OnnxGraph, example):
    """``(module, max |difference|)`` of the graph converted to torch, or a one-line reason
    why it is not used (an operator not converted, or outputs that differ from ONNX
    Runtime's)."""
    import onnx

    from robustscope.models.onnx_graph import max_difference, onnx_to_torch

    try:
        module = onnx_to_torch(onnx.load(str(path)))
    except ModelError as exc:  # UnsupportedOnnx names the operator
        return str(exc)
    except Exception as exc:  # a malformed graph the converter did not foresee
        return f"the conversion to torch failed ({type(exc).__name__}: {exc})"
    try:
        diff, scale = max_difference(module, graph.run, graph.shape, example)
    except Exception as exc:
        return f"the converted network does not run ({type(exc).__name__}: {exc})"
    if not diff <= ONNX_MATCH_RTOL * (1 + scale):
        return (f"the converted network's outputs differ from ONNX Runtime's by {diff:.3g} "
                "on random inputs")
    return module.eval(), diff
