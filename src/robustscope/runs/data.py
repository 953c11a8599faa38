"""Reading evaluation data: CSV with a label column, or NPZ with arrays ``X`` and ``y``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from robustscope.core.errors import InputError


@dataclass
class Dataset:
    """Inputs ``X`` (n, d) or (n, C, H, W), labels ``y`` (n,), feature names (tabular)."""

    X: np.ndarray
    y: np.ndarray
    feature_names: list[str] | None = None


def load_data(path: str | Path, label_column: str = "label") -> Dataset:
    """Load a CSV (one column of labels, every other column a numeric feature) or an NPZ
    holding ``X`` and ``y`` (images as N×C×H×W in [0, 1])."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"data file {path} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        try:
            frame = pd.read_csv(path)
        except (pd.errors.ParserError, UnicodeDecodeError) as exc:
            raise InputError(f"{path}: cannot parse as CSV ({exc})") from exc
        if label_column not in frame.columns:
            raise InputError(f"{path}: no label column '{label_column}' (columns: "
                             f"{', '.join(map(str, frame.columns[:12]))}); pass --label-column")
        features = frame.drop(columns=[label_column])
        for col in features.columns:
            if not pd.api.types.is_numeric_dtype(features[col]):
                raise InputError(f"{path}: feature column '{col}' is not numeric "
                                 f"(first value {features[col].iloc[0]!r})")
        return Dataset(features.to_numpy(dtype=np.float64), frame[label_column].to_numpy(),
                       [str(c) for c in features.columns])
    if suffix == ".npz":
        mapped = _mapped(path)
        if mapped is not None:
            return mapped
        with np.load(path, allow_pickle=False) as npz:
            missing = {"X", "y"} - set(npz.files)
            if missing:
                raise InputError(f"{path}: NPZ lacks array(s) {sorted(missing)}; it needs X and y")
            X, y = np.asarray(npz["X"]), np.asarray(npz["y"])
        if len(X) != len(y):
            raise InputError(f"{path}: X has {len(X)} rows but y has {len(y)}")
        return Dataset(X.astype(np.float64), y)
    raise InputError(f"{path}: unknown data file type '{suffix}'; use .csv or .npz")


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
    return Dataset(X, y)
