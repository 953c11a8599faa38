"""CSV and Parquet data read in chunks into a memory-mapped cache."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from robustscope.core.errors import InputError
from robustscope.runs import datastream
from robustscope.runs.data import load_data

SPEC = """\
seed: 0
model: {{builtin: breast-cancer-logreg}}
data: {{path: {data}}}
threats: [{{name: linf}}]
scores: {{n_bootstrap: 0, ood: false, pad: false}}
outputs: {{dir: {out}}}
execution: {{shard_size: 16, workers: 1}}
"""


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(datastream, "CHUNK_ROWS", 7)
    monkeypatch.setattr(datastream, "STREAM_BYTES", 0)


@pytest.fixture
def frame():
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    X, y = data.data[:50], data.target[:50]
    return pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])]).assign(label=y)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_streamed_data_equals_the_whole_read(tmp_path, frame, small_chunks, suffix):
    path = tmp_path / f"d{suffix}"
    frame.to_csv(path, index=False) if suffix == ".csv" else frame.to_parquet(path)
    ds = datastream.load_streamed(path, "label", tmp_path / "cache")
    assert isinstance(ds.X, np.memmap)
    np.testing.assert_array_equal(ds.X, frame.drop(columns=["label"]).to_numpy())
    np.testing.assert_array_equal(ds.y, frame["label"].to_numpy())
    assert ds.feature_names == [f"f{i}" for i in range(30)]
    again = datastream.load_streamed(path, "label", tmp_path / "cache")   # from the cache
    np.testing.assert_array_equal(again.X, ds.X)
    assert len(list((tmp_path / "cache").iterdir())) == 1


def test_streamed_errors_name_the_problem(tmp_path, frame, small_chunks):
    path = tmp_path / "d.csv"
    frame.to_csv(path, index=False)
    with pytest.raises(InputError, match="no label column 'target'"):
        datastream.load_streamed(path, "target", tmp_path / "cache")
    bad = frame.astype({"f3": object})
    bad.loc[20, "f3"] = "oops"
    bad.to_csv(path, index=False)
    with pytest.raises(InputError, match=r"rows 14\.\.20: a feature is not numeric"):
        datastream.load_streamed(path, "label", tmp_path / "cache2")


def test_a_run_on_parquet_equals_a_run_on_csv(tmp_path, frame, small_chunks):
    from robustscope.runs.runner import run_spec_file

    frame.to_csv(tmp_path / "d.csv", index=False)
    frame.to_parquet(tmp_path / "d.parquet")
    tables = []
    for name in ("d.csv", "d.parquet"):
        spec = tmp_path / f"{name}.yaml"
        spec.write_text(SPEC.format(data=name, out=f"out-{name}"))
        run_spec_file(spec, quiet=True)
        tables.append(pd.read_csv(tmp_path / f"out-{name}" / "radii_linf.csv")
                      .drop(columns=["seconds"]))
    pd.testing.assert_frame_equal(*tables)
    whole = load_data(tmp_path / "d.csv")
    assert len(tables[0]) == len(whole.X) == 50
