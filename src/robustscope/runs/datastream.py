"""Large CSV and Parquet data read in chunks into a memory-mapped cache.

A CSV (pandas, ``chunksize`` rows at a time) or Parquet file (pyarrow ``iter_batches``) is
converted once into a raw float64 file of the features, memory-mapped afterwards, plus the
labels; memory stays at one chunk whatever the number of rows. The cache lives in the run
folder (``data/``), is keyed by the file's path, size and modification time and the label
column, and is written under a temporary name then renamed, so the driver builds it and the
workers (which load the same spec) map the finished file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from robustscope.core.errors import InputError
from robustscope.runs.dataset import Dataset

#: Rows per chunk.
CHUNK_ROWS = 65536
#: Files at least this large are streamed (smaller ones are read whole, as before).
STREAM_BYTES = 64 * 2**20


def _chunks(path: Path) -> Iterator[pd.DataFrame]:
    if path.suffix.lower() == ".parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise InputError(f"{path}: reading Parquet needs pyarrow") from None
        # memory-mapped, without pre-buffering and on one thread: otherwise Arrow reads the
        # whole file into its pool ahead of the batches (measured: the file's size in RAM)
        reader = pq.ParquetFile(path, memory_map=True, pre_buffer=False)
        pool = pa.default_memory_pool()
        for batch in reader.iter_batches(batch_size=CHUNK_ROWS, use_threads=False):
            frame = batch.to_pandas()
            del batch
            pool.release_unused()  # hand freed pages back instead of keeping a cache
            yield frame
        return
    try:
        yield from pd.read_csv(path, chunksize=CHUNK_ROWS)
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot parse as CSV ({exc})") from exc


def load_streamed(path: str | Path, label_column: str, cache_dir: str | Path) -> Dataset:
    """The data of a CSV or Parquet file with ``X`` memory-mapped from the cache in
    ``cache_dir`` (built on first use)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"data file {path} does not exist")
    st = path.stat()
    key = hashlib.sha256(json.dumps([str(path.resolve()), st.st_size, st.st_mtime_ns,
                                     label_column]).encode()).hexdigest()[:16]
    cache = Path(cache_dir) / f"{path.stem}-{key}"
    if not (cache / "meta.json").is_file():
        _build(path, label_column, cache)
    meta = json.loads((cache / "meta.json").read_text())
    n, d = meta["n"], len(meta["features"])
    X = (np.memmap(cache / "X.f64", dtype=np.float64, mode="r", shape=(n, d)) if n * d
         else np.zeros((n, d)))
    y = np.load(cache / "y.npy", allow_pickle=False)
    return Dataset(X, y, meta["features"])


def _build(path: Path, label_column: str, cache: Path) -> None:
    tmp = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    features: list[str] | None = None
    labels = []
    n = 0
    try:
        with open(tmp / "X.f64", "wb") as fh:
            for frame in _chunks(path):
                if label_column not in frame.columns:
                    raise InputError(f"{path}: no label column '{label_column}' (columns: "
                                     f"{', '.join(map(str, frame.columns[:12]))}); pass "
                                     "--label-column")
                feats = frame.drop(columns=[label_column])
                if features is None:
                    features = [str(c) for c in feats.columns]
                    for col in feats.columns:
                        if not pd.api.types.is_numeric_dtype(feats[col]):
                            raise InputError(f"{path}: feature column '{col}' is not numeric "
                                             f"(first value {feats[col].iloc[0]!r})")
                try:
                    block = feats.to_numpy(dtype=np.float64)
                except (TypeError, ValueError) as exc:
                    raise InputError(f"{path}: rows {n}..{n + len(feats) - 1}: a feature is "
                                     f"not numeric ({exc})") from exc
                fh.write(np.ascontiguousarray(block).tobytes())
                labels.append(frame[label_column].to_numpy())
                n += len(frame)
        y = np.concatenate(labels) if labels else np.zeros(0)
        if y.dtype == object:
            raise InputError(f"{path}: label column '{label_column}' must hold numbers")
        np.save(tmp / "y.npy", y, allow_pickle=False)
        (tmp / "meta.json").write_text(json.dumps({"n": n, "features": features or [],
                                                   "source": str(path)}))
        with contextlib.suppress(FileExistsError, OSError):
            tmp.rename(cache)
    finally:
        if tmp.exists():
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
