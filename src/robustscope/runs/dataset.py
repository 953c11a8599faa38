"""The evaluation data as every loader returns it, and the checks every loader applies.

:class:`Dataset` is what :func:`robustscope.runs.data.load_data` returns for CSV, Parquet and
NPZ files, read whole or streamed (:mod:`robustscope.runs.datastream`); the column and row
checks below are the same on every path, so that a file is accepted or refused with the same
message whichever command reads it.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from robustscope.core.errors import InputError


@dataclass
class Dataset:
    """Inputs ``X`` (n, d) or (n, C, H, W), labels ``y`` (n,), feature names (tabular)."""

    X: np.ndarray
    y: np.ndarray
    feature_names: list[str] | None = None


def csv_header(path: Path) -> list[str]:
    """The column names on the first line of a CSV file, as written (pandas renames a
    repeated name ``a`` to ``a.1``; this does not). Raises :class:`InputError` for an empty
    file or one that is not text."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            header = next(csv.reader(fh), None)
    except (csv.Error, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot parse as CSV ({exc})") from exc
    if not header or not any(cell.strip() for cell in header):
        raise InputError(f"{path}: the file is empty (it needs a header line with the column "
                         "names and one line per input)")
    return [cell.strip() for cell in header]


def parquet_header(path: Path) -> list[str]:
    """The column names of a Parquet file's schema, as stored."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(f"{path}: reading Parquet needs pyarrow") from None
    try:
        schema = pq.read_schema(path)
    except Exception as exc:  # pyarrow's errors (ArrowInvalid, OSError) for a bad file
        raise InputError(f"{path}: cannot read as Parquet ({exc})") from exc
    return [str(n) for n in schema.names]


def check_columns(path: Path, columns: Sequence[str], label_column: str) -> None:
    """Raise :class:`InputError` when a column name appears more than once, the label
    column is missing, or no column is left for the features."""
    seen: set[str] = set()
    dup = [c for c in columns if c in seen or seen.add(c)]
    if dup:
        raise InputError(f"{path}: column name(s) {', '.join(repr(c) for c in dict.fromkeys(dup))} "
                         "appear more than once; every column needs its own name")
    if label_column not in columns:
        raise InputError(f"{path}: no label column '{label_column}' (columns: "
                         f"{', '.join(map(str, list(columns)[:12]))}); pass --label-column")
    if len(columns) < 2:
        raise InputError(f"{path}: no feature columns (only the label column "
                         f"'{label_column}')")


def check_rows(path: Path, n: int) -> None:
    """Raise :class:`InputError` when the file holds no input."""
    if n == 0:
        what = "X and y have no rows" if path.suffix.lower() == ".npz" else "only a header"
        raise InputError(f"{path}: no rows ({what}); the data needs at least one input")
