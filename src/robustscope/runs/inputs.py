"""What a spec's ``model``, ``data`` and ``features`` blocks resolve to: the model, the
evaluated inputs, the reference data and the feature space (:func:`load_inputs`).

The driver of a run and every worker process (local pool or Ray actor) call
:func:`load_inputs` on the same spec, so they see the same inputs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from robustscope.core.checks import column_order
from robustscope.core.errors import InputError
from robustscope.core.space import FeatureSpace
from robustscope.models.loaders import UntrustedModel, native_reason
from robustscope.runs.columns import load_model_for, match_columns
from robustscope.runs.data import Dataset, load_data
from robustscope.runs.demo import LOGISTIC, TREES, demo_space, train_models
from robustscope.runs.spec import EvaluationSpec


@dataclass
class LoadedInputs:
    """A spec's model and data: ``X`` ``(n, d)`` or ``(n, C, H, W)`` evaluated inputs in
    original units (possibly a read-only memory map), ``y`` ``(n,)`` their labels,
    ``X_reference`` training-like rows for the out-of-distribution reading (or ``None``),
    ``space`` the feature space, ``names`` the feature names (tabular data), ``notes``
    what the run should say about its inputs (``columns``: the column order was assumed)."""

    model: object
    model_name: str
    X: np.ndarray
    y: np.ndarray
    X_reference: np.ndarray | None
    space: FeatureSpace | None
    names: list[str] | None
    data_name: str
    notes: dict[str, str] = field(default_factory=dict)


@functools.lru_cache(maxsize=2)
def _demo_models(seed: int):
    """The demo's data split and fitted models (trained once per process and seed; they are
    never modified afterwards)."""
    return train_models(seed)


def _builtin(spec: EvaluationSpec) -> tuple[object | None, LoadedInputs]:
    data, X_train, X_test, _, y_test, models = _demo_models(spec.seed)
    space = demo_space(data, X_train, X_test)
    key = {"breast-cancer-gbm": TREES, "breast-cancer-logreg": LOGISTIC}
    model = models[key[spec.model.builtin]] if spec.model.builtin else None
    return model, LoadedInputs(model, spec.model.display_name, X_test, y_test, X_train, space,
                               list(data.feature_names), "breast-cancer (test split)")


def load_inputs(spec: EvaluationSpec) -> LoadedInputs:
    """Model, evaluated inputs, reference data and feature space of ``spec`` (paths already
    resolved, see :func:`robustscope.runs.spec.load_spec`)."""
    cache: list = []

    def builtin() -> tuple[object | None, LoadedInputs]:
        if not cache:
            cache.append(_builtin(spec))  # trains the demo models once
        return cache[0]

    reference: Dataset | None = None
    if spec.data.builtin is not None:
        _, inputs = builtin()
    else:
        ds = _load_data(spec)
        X, y, X_ref = ds.X, ds.y, None
        if spec.data.split is not None:
            from sklearn.model_selection import train_test_split

            sp = spec.data.split
            strat = y if sp.stratify else None
            try:
                X_ref, X, _, y = train_test_split(X, y, test_size=sp.test_size,
                                                  random_state=sp.seed, stratify=strat)
            except ValueError as exc:
                raise InputError(f"data.split: cannot split {spec.data.path} ({exc})") from exc
        elif spec.data.reference is not None:
            reference = load_data(spec.data.reference, spec.data.label_column)
            X_ref = reference.X
            if X_ref.shape[1:] != X.shape[1:]:
                raise InputError(f"data.reference: rows of shape {X_ref.shape[1:]} but the "
                                 f"data has {X.shape[1:]}")
        inputs = LoadedInputs(None, spec.model.display_name, X, y, X_ref, None,
                              ds.feature_names, Path(str(spec.data.path)).name)
    if spec.data.limit is not None:
        inputs.X, inputs.y = inputs.X[:spec.data.limit], inputs.y[:spec.data.limit]
    if spec.model.builtin is not None:
        inputs.model = builtin()[0]
    else:
        try:
            inputs.model = load_model_for(spec.model.path, Dataset(inputs.X, inputs.y),
                                          f"data.path {spec.data.path}",
                                          trust_pickle=spec.model.trust_pickle,
                                          device=spec.model.device)
        except UntrustedModel as exc:
            raise InputError(exc.telling("set model.trust_pickle: true in the spec")) from None
    if spec.data.builtin is None:
        _match_columns(spec, inputs, reference)
    if spec.model.path is not None:
        _probe(spec, inputs)
    inputs.space = _space(spec, inputs)
    return inputs


#: Rows tried one at a time when the first probe of the model fails.
PROBE_ROWS = 8


def _probe(spec: EvaluationSpec, inputs: LoadedInputs) -> None:
    """Call the model once on the first two inputs, as the search will call it. Where that
    fails, up to :data:`PROBE_ROWS` inputs spread over the data are tried one at a time: if
    none can be evaluated, the model cannot take these inputs, and the run stops before any
    shard runs, with both shapes named (an :class:`InputError`), rather than failing every
    row; if some can, the others are the model's own failures, which the run marks
    ``failed`` row by row."""
    model = inputs.model
    n = len(inputs.X)

    def evaluate(rows: np.ndarray) -> None:
        model.predict(model.as_tensor(np.asarray(inputs.X[rows])))

    try:
        evaluate(np.arange(min(n, 2)))
        return
    except Exception as exc:
        first = exc
    for i in np.unique(np.linspace(0, n - 1, min(n, PROBE_ROWS)).astype(int)):
        try:
            evaluate(np.array([i]))
            return
        except Exception:
            continue
    takes = getattr(model, "input_shape", None)
    wants = "" if not takes else f"; the model takes N×{'×'.join(map(str, takes))}"
    source = (f"data.path {spec.data.path}" if spec.data.path is not None
              else f"data.builtin {spec.data.builtin}")
    raise InputError(f"model.path {spec.model.path} cannot be evaluated on the inputs of "
                     f"{source}: X has shape {tuple(inputs.X.shape)}"
                     f"{wants} ({native_reason(first)})") from None


def _match_columns(spec: EvaluationSpec, inputs: LoadedInputs,
                   reference: Dataset | None) -> None:
    """Put the data's columns in the model's order, by name
    (:func:`robustscope.runs.columns.match_columns`), and the reference rows' in the same
    order; note it when the order is assumed."""
    before = inputs.names
    ds, note = match_columns(Dataset(inputs.X, inputs.y, before), inputs.model,
                             f"data.path {spec.data.path}")
    inputs.X, inputs.names = ds.X, ds.feature_names
    if note is not None:
        inputs.notes["columns"] = note
    if inputs.X_reference is None or inputs.names is None or inputs.X_reference.ndim != 2:
        return
    # a reference file is matched by its own names; split-off rows have the data's
    ref_names = reference.feature_names if reference is not None else before
    if ref_names is not None:  # (an NPZ reference: the data's layout is assumed)
        order = column_order(ref_names, inputs.names, f"data.reference {spec.data.reference}")
        if order != list(range(len(order))):
            inputs.X_reference = np.asarray(inputs.X_reference)[:, order]
    if inputs.X.ndim > 2 and inputs.X_reference.shape[1] == inputs.X[0].size:
        # flat rows reshaped for the model (match_columns): the reference's alike
        inputs.X_reference = np.asarray(inputs.X_reference).reshape(
            len(inputs.X_reference), *inputs.X.shape[1:])


def _load_data(spec: EvaluationSpec) -> Dataset:
    """The spec's data file; a Parquet file, or a CSV of at least
    :data:`robustscope.runs.datastream.STREAM_BYTES`, is read in chunks into a memory-mapped
    cache in the run folder (``data/``)."""
    return load_data(Path(str(spec.data.path)), spec.data.label_column,
                     cache_dir=Path(spec.outputs.dir) / "data")


def _space(spec: EvaluationSpec, inputs: LoadedInputs) -> FeatureSpace:
    X = inputs.X
    d = int(X[0].size)
    shape = X.shape[1:] if X.ndim > 2 else None
    if spec.features is not None:
        if spec.features.file is not None:
            return FeatureSpace.from_yaml(spec.features.file, d, inputs.names, shape)
        return FeatureSpace.from_dict(spec.features.inline(), d, inputs.names, shape,
                                      source="spec features")
    if inputs.space is not None:
        return inputs.space
    if X.ndim > 2:
        return FeatureSpace.box(X.shape[1:])
    both = X if inputs.X_reference is None else np.vstack([inputs.X_reference, X])
    return FeatureSpace.from_data(both, names=inputs.names)
