"""Matching a data file's columns to the model's features, by name where anything knows the
names (:func:`match_columns`).

A model fitted on a DataFrame stores its column names (XGBoost, LightGBM, scikit-learn's
``feature_names_in_``, an ONNX model with one input per column; see
:mod:`robustscope.models.names`). Data read from a CSV or Parquet file has names too: its
columns are then put in the model's order, and a column the model needs that the file lacks
(or one the model does not know) stops the command, named. Where either side has no names,
the columns can only be taken in the order they come, and the caller says so.

Names are matched as given first. A name the model holds that no column spells literally is
then looked for as the model's library spells names (:data:`SPELLINGS`): LightGBM writes a
space as ``_`` (``score 7`` is stored as ``score_7``) and refuses ``"``, ``,``, ``:``, ``[``,
``]``, ``{``, ``}`` (so its user had to rename ``a,b``, most often to ``a_b``); XGBoost keeps
names as given but refuses ``[``, ``]`` and ``<``; scikit-learn's ``feature_names_in_`` keeps
them as given. A column matched that way is said in the note.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numpy as np

from robustscope.core.checks import column_order
from robustscope.core.errors import InputError
from robustscope.models.loaders import load_model
from robustscope.models.names import feature_names
from robustscope.models.shapes import ShapeError
from robustscope.runs.dataset import Dataset

#: What a command says when the column order could not be checked.
ORDER_ASSUMED = ("column order assumed: {why}, so the data's columns were taken in their "
                 "order as the model's features")

#: How each library stores (or makes its user rewrite) a column's name, tried in this order
#: where a model's name matches no column literally: (what to say, the rule). LightGBM's
#: space rule is its C++ ``Dataset::set_feature_names`` (lightgbm 4.x); the others are the
#: characters each library refuses in a name, written as ``_``.
SPELLINGS: dict[str, tuple[tuple[str, Callable[[str], str]], ...]] = {
    "lightgbm": (
        ("LightGBM stores a space as '_'", lambda n: n.replace(" ", "_")),
        ("LightGBM refuses \" , : [ ] { } in a name; taken as '_'",
         lambda n: re.sub(r'[ ",:\[\]{}]', "_", n)),
    ),
    "xgboost": (
        ("XGBoost refuses [ ] < in a name; taken as '_'", lambda n: re.sub(r"[\[\]<]", "_", n)),
    ),
}


def _library(model: object) -> str:
    """The top-level package of the model ``model`` wraps (``lightgbm``, ``xgboost``...)."""
    native = getattr(model, "native", None)
    return type(native if native is not None else model).__module__.split(".")[0]


def respell(have: Sequence[str], names: Sequence[str],
            library: str) -> tuple[list[str], list[str]]:
    """``have`` (the data's column names) with each column that no model name spells
    literally renamed to the one model name a rule of ``library`` (:data:`SPELLINGS`) maps it
    to, and what was matched so (``'score 7' as score_7 (LightGBM stores a space as '_')``).
    Two columns that rules map to one name are both left as they are."""
    out = [str(c) for c in have]
    known = {str(n) for n in names}
    missing = {str(n) for n in names} - set(out)
    found: dict[int, tuple[str, str]] = {}  # column -> (model name, why)
    for i, c in enumerate(out):
        if c in known:
            continue
        for why, rule in SPELLINGS.get(library, ()):
            if rule(c) in missing:
                found[i] = (rule(c), why)
                break
    targets = [t for t, _ in found.values()]
    said: list[str] = []
    for i, (target, why) in found.items():
        if targets.count(target) == 1:
            said.append(f"'{out[i]}' as {target} ({why})")
            out[i] = target
    return out, said


def load_model_for(path, ds: Dataset, what: str, **options) -> object:
    """:func:`~robustscope.models.loaders.load_model` on ``path``, probed with ``ds``'s first
    inputs; inputs of a shape the model cannot take stop it with one line naming both
    shapes (``--data d.csv: X has shape (100, 64); the model takes N×1×8×8 (...)``)."""
    try:
        return load_model(path, example=ds.X[:2], **options)
    except ShapeError as exc:
        raise InputError(f"{what}: X has shape {tuple(ds.X.shape)}; the model takes "
                         f"{exc.takes.text()} ({exc.takes.source}){exc.hint}") from None


def match_columns(ds: Dataset, model: object, what: str = "data") -> tuple[Dataset, str | None]:
    """:func:`match_names`, then flat rows reshaped to the shape the model takes where its
    loader found they fit (``model.shape_note``, :func:`load_model_for`); the note says both,
    and what the loader did to read the file (``model.load_note``: an ONNX graph converted to
    torch or served as a black box)."""
    ds, note = match_names(ds, model, what)
    shape_note = getattr(model, "shape_note", None)
    shape = getattr(model, "input_shape", None)
    if shape_note and shape and tuple(ds.X.shape[1:]) != tuple(shape):
        X = np.asarray(ds.X).reshape(len(ds.X), *shape)
        ds = Dataset(X, ds.y, ds.feature_names)
        note = shape_note if note is None else f"{note}; {shape_note}"
    load_note = getattr(model, "load_note", None)  # how the loader read the file (ONNX)
    if load_note:
        note = load_note if note is None else f"{note}; {load_note}"
    return ds, note


def match_names(ds: Dataset, model: object, what: str = "data") -> tuple[Dataset, str | None]:
    """``ds`` with its feature columns in the order of ``model``'s feature names, and a note
    for the summary: what was done when the order was not checked by name, or which columns
    matched a name only as the model's library spells it (``None`` when every name matched
    literally, or for images, whose layout is not a column order). The data keeps its own
    names (messages name columns as the file spells them).

    Raises :class:`~robustscope.core.errors.InputError` when the data lacks a column the
    model was fitted on or has one the model does not know (``what`` names the data)."""
    if ds.X.ndim != 2:
        return ds, None
    names = feature_names(model)
    if names is None or ds.feature_names is None:
        why = ("the model stores no feature names" if names is None
               else "the data file has no column names")
        return ds, ORDER_ASSUMED.format(why=why)
    have, said = respell(ds.feature_names, names, _library(model))
    try:
        order = column_order(have, names, what)
    except InputError as exc:
        if said:
            raise InputError(f"{exc} (matched as the model's library spells names: "
                             f"{'; '.join(said)})") from None
        raise
    note = ("columns matched by name as the model's library spells them: " + "; ".join(said)
            if said else None)
    if order == list(range(len(order))):
        return ds, note
    X = np.asarray(ds.X)[:, order]
    return Dataset(X, ds.y, [ds.feature_names[i] for i in order]), note
