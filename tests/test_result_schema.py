"""One row schema: the result's arrays, its tables, shard files and the store's radii table all
follow ROW_SCHEMA; results join (concatenate), split (subset) and carry failed rows."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pandas as pd
import pytest

from robustscope.core.result import (
    CSV_COLUMNS,
    FAILED,
    ROW_SCHEMA,
    STORED_COLUMNS,
    TABLE_COLUMNS,
    RadiusResult,
)
from robustscope.runs.shards import Shard, ShardOutput, read_shard, write_shard
from robustscope.runs.store import open_store

#: What the README documents for a radius table, in order.
README_COLUMNS = ["sample", "label", "prediction", "radius", "lower_bound", "status", "loss",
                  "queries", "seconds", "converged", "forward_queries", "backward_queries",
                  "adv_prediction"]


def _result(n: int = 6, seed: int = 0, start: int = 0) -> RadiusResult:
    rng = np.random.default_rng(seed)
    radius = rng.uniform(0.1, 1.0, n)
    status = np.array(["attacked"] * n, dtype=object)
    status[0], radius[0] = "censored", np.inf
    return RadiusResult(
        radius=radius, lower_bound=radius / 4, status=status, x_adv=rng.normal(size=(n, 3)),
        label=rng.integers(0, 3, n), prediction=rng.integers(0, 3, n),
        adv_prediction=rng.integers(0, 3, n), proba=rng.dirichlet(np.ones(3), n),
        proba_adv=rng.dirichlet(np.ones(3), n), loss=rng.uniform(0, 2, n),
        forward_queries=rng.integers(1, 50, n), backward_queries=rng.integers(0, 9, n),
        seconds=rng.uniform(0, 1, n), threat="linf", solver="pgd", max_radius=1.0,
        classes=np.array(["cat", "dog", "eel"]), sample=np.arange(start, start + n),
        meta={"seed": seed, "attack_runs": rng.integers(1, 5, n).tolist()})


def _assert_same(a: RadiusResult, b: RadiusResult) -> None:
    for col in STORED_COLUMNS:
        np.testing.assert_array_equal(np.asarray(getattr(a, col.name)),
                                      np.asarray(getattr(b, col.name)), err_msg=col.name)
    assert (a.threat, a.solver, a.max_radius, a.errors) == (b.threat, b.solver, b.max_radius,
                                                            b.errors)


def test_the_schema_is_the_result_and_the_readme_table():
    arrays = {f.name for f in dataclasses.fields(RadiusResult)} - {
        "threat", "solver", "max_radius", "classes", "meta", "errors"}
    assert {c.name for c in STORED_COLUMNS} == arrays
    assert len({c.name for c in ROW_SCHEMA}) == len(ROW_SCHEMA)
    assert list(TABLE_COLUMNS) == README_COLUMNS
    assert CSV_COLUMNS == README_COLUMNS[:9]
    df = _result().to_dataframe()
    assert list(df.columns) == README_COLUMNS
    assert df["label"].tolist() == _result().classes[_result().label].tolist()
    np.testing.assert_array_equal(df["queries"], _result().queries)


def test_concatenate_and_subset_are_inverse():
    whole = _result(n=9)
    order = np.random.default_rng(1).permutation(9)
    parts = [whole.subset(np.sort(order[:4])), whole.subset(np.sort(order[4:]))]
    joined = RadiusResult.concatenate(parts[::-1])           # any order: sorted by sample
    _assert_same(joined, whole)
    assert joined.meta["attack_runs"] == whole.meta["attack_runs"]
    assert whole.subset(slice(2, 5)).meta["attack_runs"] == whole.meta["attack_runs"][2:5]


def test_failed_rows_join_the_searched_ones_and_show_empty_in_tables():
    searched = _result(n=4, start=0)
    searched.sample = np.array([0, 2, 4, 5])
    failed = RadiusResult.failures(np.array([1, 3]), np.ones((2, 3)), {1: "boom", 3: "bang"},
                                   "linf", "pgd", 1.0)         # no class count known: (2, 0)
    assert failed.proba.shape == (2, 0) and failed.failed.all()
    res = RadiusResult.concatenate([searched, failed])
    assert res.sample.tolist() == list(range(6))
    assert res.errors == {1: "boom", 3: "bang"}
    assert res.failed.tolist() == [False, True, False, True, False, False]
    assert not res.found[res.failed].any()
    assert res.proba.shape == (6, 3) and np.isnan(res.proba[res.failed]).all()
    np.testing.assert_array_equal(res.x_adv[res.failed], np.ones((2, 3)))
    assert res.meta["attack_runs"][1] == 0

    res.label[3] = 1                                          # a failed row whose class is known
    table = pd.read_csv(io.StringIO(res.to_dataframe().to_csv(index=False)))
    assert list(table.columns) == README_COLUMNS
    assert table["status"].tolist()[1] == FAILED
    assert table.loc[[1, 3]].drop(columns=["sample", "status", "label"]).isna().all().all()
    assert pd.isna(table.loc[1, "label"]) and table.loc[3, "label"] == "dog"
    assert table["queries"].dropna().tolist() == res.queries[~res.failed].tolist()
    assert res.subset(res.failed).errors == res.errors
    assert res.subset(~res.failed).errors == {}


def test_shard_files_keep_every_stored_column_and_the_errors(tmp_path):
    searched = _result(n=3, start=10)
    failed = RadiusResult.failures(np.array([13]), np.zeros((1, 3)), {13: "model raised"},
                                   "linf", "pgd", 1.0, n_classes=3, classes=searched.classes,
                                   meta=searched.meta)
    res = RadiusResult.concatenate([searched, failed])
    write_shard(tmp_path, ShardOutput(Shard("linf", 0, 2, 10, 14, seed=5), res, 1.5))
    back, seconds = read_shard(tmp_path / "shards" / "linf" / "000002.npz")
    _assert_same(back, res)
    assert seconds == 1.5 and back.meta == res.meta
    assert back.classes.tolist() == ["cat", "dog", "eel"]
    light, _ = read_shard(tmp_path / "shards" / "linf" / "000002.npz", light=True)
    assert light.x_adv.shape == (4, 0) and light.errors == {13: "model raised"}


def test_the_store_holds_the_schemas_store_columns(tmp_path):
    res = _result(n=5)
    with open_store(tmp_path / "s.sqlite") as store:
        run = store.start_run("net", kind="radius", threat="linf")
        store.record_radii(run, res)
        df = store.radii(run)
    assert list(df.columns) == [c.name for c in ROW_SCHEMA
                                if c.table and (c.store or c.derived)]
    for col in ROW_SCHEMA:
        if col.table:
            np.testing.assert_array_equal(df[col.name], np.asarray(getattr(res, col.name)),
                                          err_msg=col.name)


def test_joining_rows_of_other_widths_is_refused():
    a, b = _result(n=2), _result(n=2, start=2)
    b.proba = np.zeros((2, 4))
    with pytest.raises(ValueError, match="proba"):
        RadiusResult.concatenate([a, b])
