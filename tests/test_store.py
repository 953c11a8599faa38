"""Results store: schema, runs that never overwrite, radii and grids, benchmark JSON."""

import json
import math
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from robustscope.errors import InputError
from robustscope.result import RadiusResult
from robustscope.scores.accuracy_grid import AccuracyGrid, read_accuracy_file
from robustscope.scores.multiattack import competitiveness
from robustscope.store import SCHEMA_VERSION, open_store

REF = Path(__file__).resolve().parents[1].parent / "shared" / "reference" / "multirobustbench"
needs_ref = pytest.mark.skipif(not REF.is_dir(), reason="../shared reference not present")


def _result(seed=0, n=5):
    rng = np.random.default_rng(seed)
    radius = rng.uniform(0.01, 0.5, n)
    radius[0], radius[1] = 0.0, np.inf
    status = np.array(["misclassified", "censored"] + ["attacked"] * (n - 2))
    loss = rng.normal(size=n)
    loss[2] = np.nan
    return RadiusResult(
        radius=radius, lower_bound=radius / 2, status=status, x_adv=np.zeros((n, 3)),
        label=rng.integers(0, 3, n), prediction=rng.integers(0, 3, n),
        adv_prediction=rng.integers(0, 3, n), proba=np.zeros((n, 3)), proba_adv=np.zeros((n, 3)),
        loss=loss, forward_queries=rng.integers(1, 100, n), backward_queries=rng.integers(0, 50, n),
        seconds=rng.uniform(0, 1, n), threat="linf", solver="pgd", max_radius=1.0,
        classes=np.array(["cat", "dog", "eel"]), sample=np.arange(10, 10 + n))


def test_new_store_has_versioned_schema(tmp_path):
    path = tmp_path / "r.sqlite"
    with open_store(path) as store:
        assert store.schema_version == SCHEMA_VERSION == 1
    con = sqlite3.connect(path)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"schema_version", "models", "threats", "runs", "radii", "accuracies"} <= tables
    con.execute("INSERT INTO schema_version VALUES (99, 'later')")
    con.commit()
    con.close()
    with pytest.raises(InputError, match="schema version 99"):
        open_store(path)


def test_foreign_files_are_refused(tmp_path):
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    with pytest.raises(InputError, match="not a robustscope store"):
        open_store(other)
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(InputError, match="not a SQLite database"):
        open_store(junk)
    with pytest.raises(InputError, match="folder does not exist"):
        open_store(tmp_path / "nope" / "r.sqlite")


def test_radii_round_trip_and_persist(tmp_path):
    path = tmp_path / "r.sqlite"
    res = _result()
    with open_store(path) as store:
        run = store.start_run("net", kind="radius", threat="linf", threat_params={"p": "inf"},
                              solver="pgd", config={"steps": 10})
        store.record_radii(run, res)
        store.finish_run(run)
    with open_store(path) as store:  # reopened: data persisted
        df = store.radii(run)
        info = store.run(run)
    assert info.status == "finished" and info.threat == "linf" and info.model == "net"
    assert info.config["steps"] == 10 and info.config["classes"] == ["cat", "dog", "eel"]
    np.testing.assert_array_equal(df["sample"], res.sample)
    np.testing.assert_array_equal(df["radius"], res.radius)  # inf and 0 survive
    np.testing.assert_array_equal(df["lower_bound"], res.lower_bound)
    np.testing.assert_array_equal(df["status"], res.status)
    np.testing.assert_array_equal(df["label"], res.label)
    np.testing.assert_array_equal(df["prediction"], res.prediction)
    np.testing.assert_array_equal(df["queries"], res.queries)
    np.testing.assert_array_equal(df["seconds"], res.seconds)
    assert math.isnan(df["loss"][2])
    np.testing.assert_array_equal(np.delete(df["loss"].to_numpy(), 2), np.delete(res.loss, 2))


def test_runs_never_overwrite(tmp_path):
    with open_store(tmp_path / "r.sqlite") as store:
        a = store.start_run("net", threat="linf")
        b = store.start_run("net", threat="linf")
        assert a != b and store.run(a).uid != store.run(b).uid
        store.record_radii(a, _result(0))
        store.record_radii(b, _result(1))
        with pytest.raises(InputError, match=f"run {a}: radii .* already recorded"):
            store.record_radii(a, _result(2))
        np.testing.assert_array_equal(store.radii(a)["radius"], _result(0).radius)
        np.testing.assert_array_equal(store.radii(b)["radius"], _result(1).radius)

        g1 = AccuracyGrid(80.0, {"AutoLinfAttack": {0.005: 70.0}})
        g2 = AccuracyGrid(81.0, {"AutoLinfAttack": {0.005: 71.0}})
        r1 = store.start_run("net", kind="accuracy")
        store.record_accuracies(r1, g1, n_inputs=100)
        with pytest.raises(InputError, match="already recorded"):
            store.record_accuracies(r1, g2)
        r2 = store.start_run("net", kind="accuracy")
        store.record_accuracies(r2, g2)
        assert store.accuracies("net") == g2  # latest
        assert store.accuracies("net", run_id=r1) == g1  # the older one is intact
        r3 = store.start_run("net", kind="accuracy")
        store.record_accuracies(r3, AccuracyGrid(10.0))
        store.finish_run(r3, status="failed")
        assert store.accuracies("net") == g2  # failed runs are not used
        assert [r.id for r in store.runs("net", kind="accuracy")] == [r1, r2, r3]
        assert len(store.runs()) == 5


def test_store_errors_name_the_problem(tmp_path):
    with open_store(":memory:") as store:
        run = store.start_run("net", kind="accuracy")
        with pytest.raises(InputError, match="is a 'accuracy' run"):
            store.record_radii(run, _result())
        with pytest.raises(InputError, match="run 999: not in store"):
            store.run(999)
        with pytest.raises(InputError, match="model 'ghost': not in store"):
            store.accuracies("ghost")
        with pytest.raises(InputError, match="model 'net': no accuracy grid"):
            store.accuracies("net")
        with pytest.raises(InputError, match="kind"):
            store.start_run("net", kind="other")
        store.add_model("m", {"Architecture": "A"})
        assert store.add_model("m", {"Architecture": "A"}) == store.add_model("m")
        with pytest.raises(InputError, match="model 'm': already stored with other details"):
            store.add_model("m", {"Architecture": "B"})
        other = store.start_run("m", kind="accuracy")
        store.record_accuracies(other, AccuracyGrid(50.0))
        with pytest.raises(InputError, match="not a run of model 'net'"):
            store.accuracies("net", run_id=other)
        with open_store(":memory:") as empty, pytest.raises(InputError, match="no accuracy"):
            empty.best_reference()


@needs_ref
def test_benchmark_json_round_trip(tmp_path):
    source = read_accuracy_file(REF / "defences.json")
    with open_store(tmp_path / "r.sqlite") as store:
        ids = store.import_accuracies(REF / "defences.json")
        assert len(ids) == 21 and len(set(ids)) == 21
        out = tmp_path / "export.json"
        store.export_accuracies(out)
        again = read_accuracy_file(out)
        assert [m.name for m in again] == [m.name for m in source]
        for a, b in zip(source, again, strict=True):
            assert a.grid == b.grid and a.details == b.details
        # the exported document has the benchmark's shape and keys
        doc = json.loads(out.read_text())
        assert doc["Rebuffi2021Fixing_L2"]["accuracies"]["AutoL1Attack"]["30.0"] == pytest.approx(
            json.loads((REF / "defences.json").read_text())["Rebuffi2021Fixing_L2"]
            ["accuracies"]["AutoL1Attack"]["30.0"])
        # one model in the single format; its file stem names it on import
        single = tmp_path / "Jin2020Manifold.json"
        store.export_accuracies(single, models=["Jin2020Manifold"], single=True)
        assert "NoAttack" in json.loads(single.read_text())
        with open_store(":memory:") as fresh:
            fresh.import_accuracies(single)
            assert fresh.accuracies("Jin2020Manifold") == store.accuracies("Jin2020Manifold")
        # importing again adds new runs, never replaces
        store.import_accuracies(REF / "defences.json")
        assert len(store.runs(kind="import")) == 42


@needs_ref
def test_best_reference_from_store(tmp_path):
    with open_store(":memory:") as store:
        store.import_accuracies(REF / "defences.json")
        star = store.best_reference()
        models = store.model_accuracies()
    ranked = [m for m in models if m.name != "Croce2022Adversarial_Linf"]
    for m in ranked:
        rep = competitiveness(m.grid, star)
        assert rep.table.ratio.max() <= 100 + 1e-9
    # every point's acc* is attained by some model
    best = np.max([competitiveness(m.grid, star).table.ratio for m in ranked], axis=0)
    np.testing.assert_allclose(best, 100.0)


def test_import_document_and_export_errors(tmp_path):
    with open_store(":memory:") as store:
        store.import_accuracies({"NoAttack": 50.0, "AutoL2Attack": {"0.125": 40}}, name="x")
        assert store.accuracies("x") == AccuracyGrid(50.0, {"AutoL2Attack": {0.125: 40.0}})
        store.import_accuracies({"NoAttack": 60.0}, name="y")
        with pytest.raises(InputError, match="exactly one model"):
            store.export_accuracies(tmp_path / "two.json", single=True)
        with pytest.raises(InputError, match="model 'zzz': not in store"):
            store.export_accuracies(tmp_path / "z.json", models=["zzz"])


def test_failed_import_leaves_nothing_behind():
    with open_store(":memory:") as store:
        store.add_model("b", {"Architecture": "X"})
        doc = {"a": {"accuracies": {"NoAttack": 50.0}},
               "b": {"accuracies": {"NoAttack": 60.0}, "details": {"Architecture": "Y"}}}
        with pytest.raises(InputError, match="model 'b': already stored with other details"):
            store.import_accuracies(doc)
        assert [m["name"] for m in store.models()] == ["b"]
        assert store.runs() == []


def test_run_threat_is_checked_and_filled():
    with open_store(":memory:") as store:
        run = store.start_run("net")
        store.record_radii(run, _result())
        assert store.run(run).threat == "linf"
        other = store.start_run("net", threat="l2")
        with pytest.raises(InputError, match="is a 'l2' run, but the result is for threat 'linf'"):
            store.record_radii(other, _result())
        same = store.start_run("net", threat="AutoLinfAttack")
        store.record_radii(same, _result())
