"""Matching a data file's columns to the model's features, by name where anything knows the
names (:func:`match_columns`).

A model fitted on a DataFrame stores its column names (XGBoost, LightGBM, scikit-learn's
``feature_names_in_``, an ONNX model with one input per column; see
:mod:`robustscope.models.names`). Data read from a CSV or Parquet file has names too: its
columns are then put in the model's order, and a column the model needs that the file lacks
(or one the model does not know) stops the command, named. Where either side has no names,
the columns can only be taken in the order they come, and the caller says so.
"""

from __future__ import annotations

import numpy as np

from robustscope.core.checks import column_order
from robustscope.models.names import feature_names
from robustscope.runs.dataset import Dataset

#: What a command says when the column order could not be checked.
ORDER_ASSUMED = ("column order assumed: {why}, so the data's columns were taken in their "
                 "order as the model's features")


def match_columns(ds: Dataset, model: object, what: str = "data") -> tuple[Dataset, str | None]:
    """``ds`` with its feature columns in the order of ``model``'s feature names, and a note
    for the summary: what was done when the order was not checked by name (``None`` when it
    was, or for images, whose layout is not a column order).

    Raises :class:`~robustscope.core.errors.InputError` when the data lacks a column the
    model was fitted on or has one the model does not know (``what`` names the data)."""
    if ds.X.ndim != 2:
        return ds, None
    names = feature_names(model)
    if names is None or ds.feature_names is None:
        why = ("the model stores no feature names" if names is None
               else "the data file has no column names")
        return ds, ORDER_ASSUMED.format(why=why)
    order = column_order(ds.feature_names, names, what)
    if order == list(range(len(order))):
        return ds, None
    X = np.asarray(ds.X)[:, order]
    return Dataset(X, ds.y, [ds.feature_names[i] for i in order]), None
