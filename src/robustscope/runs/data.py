"""Reading evaluation data, the one loader of every command: CSV or Parquet with a label
column, or NPZ with arrays ``X`` and ``y`` (:func:`load_data`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from robustscope.core.checks import check_finite
from robustscope.core.errors import InputError
from robustscope.runs import datastream
from robustscope.runs.dataset import (
    Dataset,
    check_columns,
    check_rows,
    csv_header,
    parquet_header,
)

#: Data file types :func:`load_data` reads.
DATA_SUFFIXES = (".csv", ".parquet", ".npz")

__all__ = ["DATA_SUFFIXES", "Dataset", "load_data"]


def load_data(path: str | Path, label_column: str = "label",
              cache_dir: str | Path | None = None) -> Dataset:
    """Load a CSV or Parquet file (one column of labels, every other column a numeric
    feature) or an NPZ holding ``X`` and ``y`` (images as N×C×H×W in [0, 1]).

    With ``cache_dir``, a Parquet file or a CSV of at least
    :data:`robustscope.runs.datastream.STREAM_BYTES` is read in chunks into a memory-mapped
    cache there (a run's ``data/`` folder); otherwise the file is read whole. Both paths
    apply the same checks: no repeated column name, a label column, at least one feature
    column and one row, numeric features."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"data file {path} does not exist")
    if path.is_dir():
        raise InputError(f"data file {path} is a folder, not a file")
    if not path.is_file():
        raise InputError(f"data file {path}: not a regular file (a pipe, socket or device)")
    suffix = path.suffix.lower()
    if suffix not in DATA_SUFFIXES:
        raise InputError(f"{path}: unknown data file type '{suffix}'; use "
                         f"{', '.join(DATA_SUFFIXES)}")
    if suffix == ".npz":
        return _load_npz(path)
    columns = csv_header(path) if suffix == ".csv" else parquet_header(path)
    check_columns(path, columns, label_column)
    if cache_dir is not None and (suffix == ".parquet"
                                  or path.stat().st_size >= datastream.STREAM_BYTES):
        ds = datastream.load_streamed(path, label_column, cache_dir)
    else:
        ds = _load_table(path, suffix, label_column)
    check_rows(path, len(ds.y))
    return ds


def _load_table(path: Path, suffix: str, label_column: str) -> Dataset:
    try:
        frame = pd.read_csv(path) if suffix == ".csv" else pd.read_parquet(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot parse as CSV ({exc})") from exc
    except Exception as exc:  # pyarrow's errors for a damaged Parquet file
        if suffix == ".csv":
            raise
        raise InputError(f"{path}: cannot read as Parquet ({exc})") from exc
    check_rows(path, len(frame))
    features = frame.drop(columns=[label_column])
    for col in features.columns:
        if not pd.api.types.is_numeric_dtype(features[col]):
            raise InputError(f"{path}: feature column '{col}' is not numeric "
                             f"(first value {features[col].iloc[0]!r})")
    X, names = features.to_numpy(dtype=np.float64), [str(c) for c in features.columns]
    check_finite(X, str(path), names)  # names the column as the file does, not "feature 0"
    return Dataset(X, frame[label_column].to_numpy(), names)


def _load_npz(path: Path) -> Dataset:
    mapped = _mapped(path)
    if mapped is not None:
        check_rows(path, len(mapped.y))
        return mapped
    try:
        npz = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:  # not a zip of .npy files
        raise InputError(f"{path}: cannot read as NPZ ({exc})") from exc
    with npz:
        missing = {"X", "y"} - set(npz.files)
        if missing:
            raise InputError(f"{path}: NPZ lacks array(s) {sorted(missing)}; it needs X and y")
        try:
            X, y = np.asarray(npz["X"]), np.asarray(npz["y"])
        except ValueError as exc:  # object arrays need pickle, which is never allowed
            raise InputError(f"{path}: cannot read X and y ({exc})") from exc
    if len(X) != len(y):
        raise InputError(f"{path}: X has {len(X)} rows but y has {len(y)}")
    check_rows(path, len(y))
    try:
        X = X.astype(np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{path}: X must hold numbers ({exc})") from exc
    check_image_range(path, X)
    return Dataset(X, y)


#: Rows of an NPZ's images :func:`check_image_range` looks at (a memory-mapped file is not
#: read whole for it).
RANGE_ROWS = 1024


def check_image_range(path: Path, X: np.ndarray) -> None:
    """Raise :class:`InputError` when images (``X`` with 3 or more dimensions) hold values in
    0..255 rather than [0, 1]: 8-bit pixels, saved before dividing by 255."""
    if X.ndim < 3 or len(X) == 0:
        return
    head = np.asarray(X[:RANGE_ROWS])
    finite = head[np.isfinite(head)]
    if finite.size == 0:
        return
    lo, hi = float(finite.min()), float(finite.max())
    if lo >= 0 and 2 <= hi <= 255:  # not a rounding past 1: whole pixel values
        raise InputError(f"{path}: X holds values in [{lo:.4g}, {hi:.4g}], which looks like "
                         "0..255 (8-bit pixels); images must lie in [0, 1]: divide by 255 "
                         "before saving (np.savez(file, X=X / 255, y=y))")


def _mapped(path: Path) -> Dataset | None:
    """An uncompressed NPZ of float64 ``X``: ``X`` memory-mapped (rows read from disk when
    used, so large data sets cost no memory up front); ``None`` otherwise."""
    import zipfile

    from robustscope.runs.npzmap import mmap_npz

    try:
        arrays = mmap_npz(path)
    except (zipfile.BadZipFile, ValueError, OSError):
        return None
    if arrays is None or not {"X", "y"} <= set(arrays) or arrays["X"].dtype != np.float64:
        return None
    X, y = arrays["X"], np.asarray(arrays["y"])
    if len(X) != len(y):
        raise InputError(f"{path}: X has {len(X)} rows but y has {len(y)}")
    check_image_range(path, X)
    return Dataset(X, y)
