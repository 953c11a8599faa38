"""Results store on SQLite and PostgreSQL: schema, runs that never overwrite, radii and grids,
benchmark JSON, concurrent writers.

The PostgreSQL half runs against a real server: the one at ``ROBUSTSCOPE_TEST_POSTGRES_URL``
if set, else a throwaway cluster started from Debian's ``postgresql`` package (see
``pgcluster.py``). Without one those tests are skipped - or fail, when
``ROBUSTSCOPE_REQUIRE_POSTGRES=1`` (as in CI).
"""

import json
import math
import multiprocessing as mp
import os
import sqlite3
import sys
import uuid
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa

from robustscope.core.errors import InputError
from robustscope.core.result import RadiusResult
from robustscope.runs.store import SCHEMA_VERSION, open_store
from robustscope.scores.accuracy_grid import AccuracyGrid, read_accuracy_file
from robustscope.scores.multiattack import competitiveness

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pgcluster import ThrowawayCluster, find_bindir  # noqa: E402
from refdata_helpers import DEFENCES, refdata_json, refdata_path  # noqa: E402

BACKENDS = ["sqlite", "postgresql"]


# -- where the stores live -------------------------------------------------------------------
@pytest.fixture(scope="session")
def pg_url():
    """URL of a PostgreSQL database the tests may create schemas in."""
    required = os.environ.get("ROBUSTSCOPE_REQUIRE_POSTGRES") == "1"

    def unavailable(why: str) -> None:
        if required:
            pytest.fail(f"{why} (and ROBUSTSCOPE_REQUIRE_POSTGRES=1)")
        pytest.skip(why)

    try:
        import psycopg  # noqa: F401
    except ImportError:
        unavailable("PostgreSQL tests: the psycopg driver is not installed "
                    "(pip install 'robustscope[postgres]')")
    given = os.environ.get("ROBUSTSCOPE_TEST_POSTGRES_URL")
    if given:
        yield given
        return
    if find_bindir() is None:
        unavailable("PostgreSQL tests: no server binaries (initdb, pg_ctl) under "
                    "/usr/lib/postgresql/*/bin - apt-get install postgresql, or set "
                    "ROBUSTSCOPE_TEST_POSTGRES_URL")
    with ThrowawayCluster() as pg:
        yield pg.url


def _driver_url(url: str) -> sa.URL:
    u = sa.make_url(url)
    return u.set(drivername="postgresql+psycopg") if "+" not in u.drivername else u


@pytest.fixture(params=BACKENDS)
def new_store(request, tmp_path):
    """Factory of locations of new, empty stores on the parametrised backend: SQLite files,
    or (PostgreSQL) fresh schemas of the test database, each reached by a URL whose
    ``options=-csearch_path=...`` selects it; dropped after the test."""
    made: list[str] = []
    if request.param == "sqlite":
        def make() -> str:
            made.append(str(tmp_path / f"store{len(made)}.sqlite"))
            return made[-1]

        yield make
        return
    base = request.getfixturevalue("pg_url")
    admin = sa.create_engine(_driver_url(base), isolation_level="AUTOCOMMIT")

    def make_pg() -> str:
        schema = f"t_{uuid.uuid4().hex[:16]}"
        with admin.connect() as conn:
            conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
        made.append(schema)
        return sa.make_url(base).update_query_dict(
            {"options": f"-csearch_path={schema}"}).render_as_string(hide_password=False)

    yield make_pg
    with admin.connect() as conn:
        for schema in made:
            conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    admin.dispose()


@contextmanager
def raw(location: str):
    """A plain SQLAlchemy transaction on the database behind a store location."""
    url = _driver_url(location) if "://" in location else "sqlite:///" + location
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            yield conn
    finally:
        engine.dispose()


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


def test_new_store_has_versioned_schema(new_store):
    loc = new_store()
    with open_store(loc) as store:
        assert store.schema_version == SCHEMA_VERSION == 3
    with raw(loc) as con:
        tables = set(sa.inspect(con).get_table_names())
        assert {"schema_version", "models", "threats", "runs", "radii", "accuracies"} <= tables
        con.exec_driver_sql("INSERT INTO schema_version VALUES (99, 'later')")
    with pytest.raises(InputError, match="schema version 99"):
        open_store(loc)


def test_foreign_databases_are_refused(new_store):
    other = new_store()
    with raw(other) as con:
        con.exec_driver_sql("CREATE TABLE t (x INTEGER)")
    with pytest.raises(InputError, match="not a robustscope store"):
        open_store(other)


def test_sqlite_junk_and_missing_folder_are_refused(tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(InputError, match="not a SQLite database"):
        open_store(junk)
    with pytest.raises(InputError, match="folder does not exist"):
        open_store(tmp_path / "nope" / "r.sqlite")
    with pytest.raises(InputError, match="cannot open"):
        open_store(tmp_path)  # a folder, not a file


def test_radii_round_trip_and_persist(new_store):
    path = new_store()
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


def test_runs_never_overwrite(new_store):
    with open_store(new_store()) as store:
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


def test_store_errors_name_the_problem(new_store):
    with open_store(new_store()) as store:
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
        with open_store(new_store()) as empty, pytest.raises(InputError, match="no accuracy"):
            empty.best_reference()


def test_benchmark_json_round_trip(new_store, tmp_path):
    source = read_accuracy_file(refdata_path(DEFENCES))
    with open_store(new_store()) as store:
        ids = store.import_accuracies(refdata_path(DEFENCES))
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
            refdata_json(DEFENCES)["Rebuffi2021Fixing_L2"]
            ["accuracies"]["AutoL1Attack"]["30.0"])
        # one model in the single format; its file stem names it on import
        single = tmp_path / "Jin2020Manifold.json"
        store.export_accuracies(single, models=["Jin2020Manifold"], single=True)
        assert "NoAttack" in json.loads(single.read_text())
        with open_store(new_store()) as fresh:
            fresh.import_accuracies(single)
            assert fresh.accuracies("Jin2020Manifold") == store.accuracies("Jin2020Manifold")
        # importing again adds new runs, never replaces
        store.import_accuracies(refdata_path(DEFENCES))
        assert len(store.runs(kind="import")) == 42


def test_best_reference_from_store(new_store):
    with open_store(new_store()) as store:
        store.import_accuracies(refdata_path(DEFENCES))
        star = store.best_reference()
        models = store.model_accuracies()
    ranked = [m for m in models if m.name != "Croce2022Adversarial_Linf"]
    for m in ranked:
        rep = competitiveness(m.grid, star)
        assert rep.table.ratio.max() <= 100 + 1e-9
    # every point's acc* is attained by some model
    best = np.max([competitiveness(m.grid, star).table.ratio for m in ranked], axis=0)
    np.testing.assert_allclose(best, 100.0)


def test_import_document_and_export_errors(new_store, tmp_path):
    with open_store(new_store()) as store:
        store.import_accuracies({"NoAttack": 50.0, "AutoL2Attack": {"0.125": 40}}, name="x")
        assert store.accuracies("x") == AccuracyGrid(50.0, {"AutoL2Attack": {0.125: 40.0}})
        store.import_accuracies({"NoAttack": 60.0}, name="y")
        with pytest.raises(InputError, match="exactly one model"):
            store.export_accuracies(tmp_path / "two.json", single=True)
        with pytest.raises(InputError, match="model 'zzz': not in store"):
            store.export_accuracies(tmp_path / "z.json", models=["zzz"])


def test_failed_import_leaves_nothing_behind(new_store):
    with open_store(new_store()) as store:
        store.add_model("b", {"Architecture": "X"})
        doc = {"a": {"accuracies": {"NoAttack": 50.0}},
               "b": {"accuracies": {"NoAttack": 60.0}, "details": {"Architecture": "Y"}}}
        with pytest.raises(InputError, match="model 'b': already stored with other details"):
            store.import_accuracies(doc)
        assert [m["name"] for m in store.models()] == ["b"]
        assert store.runs() == []


def test_run_threat_is_checked_and_filled(new_store):
    with open_store(new_store()) as store:
        run = store.start_run("net")
        store.record_radii(run, _result())
        assert store.run(run).threat == "linf"
        other = store.start_run("net", threat="l2")
        with pytest.raises(InputError, match="is a 'l2' run, but the result is for threat 'linf'"):
            store.record_radii(other, _result())
        same = store.start_run("net", threat="AutoLinfAttack")
        store.record_radii(same, _result())


def test_memory_stores_are_private_and_sqlite_urls_work(tmp_path):
    with open_store(":memory:") as a, open_store(":memory:") as b:
        a.start_run("net")
        assert len(a.runs()) == 1 and b.runs() == []
        assert a.backend == "sqlite" and a.path == ":memory:"
    url = f"sqlite:///{tmp_path / 'u.sqlite'}"
    with open_store(url) as store:
        store.start_run("net")
    with open_store(tmp_path / "u.sqlite") as store:  # the same file, by path
        assert [r.model for r in store.runs()] == ["net"]


# The version-1 schema as the first (sqlite3-only) store wrote it: its files must keep working.
_V1_SQLITE = """
CREATE TABLE schema_version (version INTEGER NOT NULL, applied_at TEXT NOT NULL);
CREATE TABLE models (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL UNIQUE,
    details TEXT NOT NULL DEFAULT '{}', created_at TEXT NOT NULL);
CREATE TABLE threats (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL,
    params TEXT NOT NULL DEFAULT '{}', UNIQUE (name, params));
CREATE TABLE runs (id INTEGER PRIMARY KEY AUTOINCREMENT, uid TEXT NOT NULL UNIQUE,
    model_id INTEGER NOT NULL REFERENCES models(id), threat_id INTEGER REFERENCES threats(id),
    kind TEXT NOT NULL CHECK (kind IN ('radius', 'accuracy', 'import')), solver TEXT,
    config TEXT NOT NULL DEFAULT '{}', source TEXT,
    status TEXT NOT NULL CHECK (status IN ('running', 'finished', 'failed')),
    started_at TEXT NOT NULL, finished_at TEXT);
CREATE TABLE radii (run_id INTEGER NOT NULL REFERENCES runs(id), sample INTEGER NOT NULL,
    label INTEGER NOT NULL, prediction INTEGER NOT NULL, adv_prediction INTEGER,
    radius REAL NOT NULL, lower_bound REAL NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('exact', 'attacked', 'censored', 'misclassified')),
    loss REAL, forward_queries INTEGER NOT NULL, backward_queries INTEGER NOT NULL,
    seconds REAL NOT NULL, PRIMARY KEY (run_id, sample));
CREATE TABLE accuracies (run_id INTEGER NOT NULL REFERENCES runs(id), attack TEXT NOT NULL,
    eps REAL NOT NULL, eps_key TEXT NOT NULL,
    accuracy REAL NOT NULL CHECK (accuracy >= 0 AND accuracy <= 100), n_inputs INTEGER,
    PRIMARY KEY (run_id, attack, eps_key));
CREATE INDEX runs_model ON runs(model_id);
INSERT INTO schema_version VALUES (1, '2026-01-01T00:00:00+00:00');
"""


def test_sqlite_files_of_the_first_store_still_open(tmp_path):
    old, new = tmp_path / "old.sqlite", tmp_path / "new.sqlite"
    con = sqlite3.connect(old)
    con.executescript(_V1_SQLITE)
    con.close()
    open_store(new).close()

    def columns(path):
        con = sqlite3.connect(path)
        tables = [r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' "
            "ORDER BY name")]
        # by name: the radii table's columns follow the row schema's order in new files
        out = {t: sorted((c[1], c[2], c[5]) for c in con.execute(f"PRAGMA table_info({t})"))
               for t in tables}
        con.close()
        return out

    with open_store(old) as store:  # migrated to version 3 on opening
        assert store.schema_version == 3
    assert columns(new) == columns(old)  # same tables, columns, types and keys
    with open_store(old) as store:
        run = store.start_run("net", threat="linf")
        store.record_radii(run, _result())
        np.testing.assert_array_equal(store.radii(run)["radius"], _result().radius)
        with pytest.raises(InputError, match="already recorded"):
            store.record_radii(run, _result())


def _concurrent_writer(location, wid, n_runs, barrier, out):
    """One of several processes writing into one store at once (see the test below)."""
    try:
        barrier.wait(60)
        with open_store(location) as store:  # all writers may create the schema at once
            done = []
            for i in range(n_runs):
                # same model and same new threat in every writer: both race to create them
                run = store.start_run("shared", threat="linf", threat_params={"i": i},
                                      config={"writer": wid})
                store.record_radii(run, _result(seed=100 * wid + i, n=40))
                store.finish_run(run)
                acc = store.start_run(f"m{i}", kind="accuracy", details={"Architecture": "A"})
                store.record_accuracies(acc, AccuracyGrid(float(10 * wid + i)))
                done.append((run, acc, 100 * wid + i, float(10 * wid + i)))
        out.put((wid, done, None))
    except BaseException as err:  # noqa: BLE001 - reported to the parent
        out.put((wid, None, repr(err)))


def test_concurrent_writers_from_several_processes(new_store):
    loc = new_store()
    writers, n_runs = 3, 12
    ctx = mp.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    barrier, out = ctx.Barrier(writers), ctx.Queue()
    procs = [ctx.Process(target=_concurrent_writer, args=(loc, w, n_runs, barrier, out))
             for w in range(writers)]
    for p in procs:
        p.start()
    reports = [out.get(timeout=240) for _ in procs]
    for p in procs:
        p.join(60)
    errors = [r[2] for r in reports if r[2] is not None]
    assert not errors, errors
    done = [d for r in reports for d in r[1]]
    with open_store(loc) as store:
        runs = store.runs()
        assert len(runs) == len({r.id for r in runs}) == 2 * writers * n_runs
        assert len({r.uid for r in runs}) == len(runs)
        names = [m["name"] for m in store.models()]
        assert sorted(names) == sorted(["shared"] + [f"m{i}" for i in range(n_runs)])
        for run, acc, seed, clean in done:
            info = store.run(run)
            assert info.status == "finished" and info.threat == "linf"
            assert info.config["writer"] == seed // 100
            np.testing.assert_array_equal(store.radii(run)["radius"], _result(seed, 40).radius)
            assert store.accuracies(f"m{seed % 100}", run_id=acc) == AccuracyGrid(clean)


@pytest.mark.parametrize("new_store", ["postgresql"], indirect=True)
def test_postgres_urls(new_store):
    loc = new_store()
    password = sa.make_url(loc).password
    with open_store(loc) as store:
        assert store.backend == "postgresql"
        if password:
            assert password not in store.path and "***" in store.path
        run = store.start_run("net")
        with pytest.raises(InputError, match=f"run {run + 1000}: not in store postgresql://"):
            store.run(run + 1000)
    # the postgres:// spelling is accepted too
    alias = "postgres://" + loc.split("://", 1)[1]
    with open_store(alias) as store:
        assert [r.id for r in store.runs()] == [run]
    # a server that does not answer: a clear error that hides the password
    dead = sa.make_url(loc).set(port=1, host="127.0.0.1").render_as_string(hide_password=False)
    with pytest.raises(InputError, match="cannot connect") as err:
        open_store(dead)
    if password:
        assert password not in str(err.value)


def test_unsupported_urls_are_refused():
    with pytest.raises(InputError, match="unsupported database 'mysql'"):
        open_store("mysql://u:secret@host/db")
    with pytest.raises(InputError, match="names no database"):
        open_store("postgresql://u:secret@127.0.0.1:1")
    with pytest.raises(InputError, match="folder does not exist"):
        open_store("sqlite:////no/such/folder/r.sqlite")


def _satisfied_result(n=4):
    """A result whose first input has status ``satisfied`` (added after schema version 1)."""
    res = _result(n=n)
    res.status[0] = "satisfied"
    return res


def _make_version_1(loc: str) -> None:
    """Turn a new store at ``loc`` into one as schema version 1 left it: the radii status
    check without ``satisfied``, one schema_version row (1), radii of the four old statuses."""
    if "://" not in loc:  # SQLite: the file exactly as version 1 wrote it
        con = sqlite3.connect(loc)
        con.executescript(_V1_SQLITE)
        con.executescript("""
            INSERT INTO models (name, created_at) VALUES ('old', '2026-01-01');
            INSERT INTO runs (uid, model_id, kind, status, started_at)
                VALUES ('u1', 1, 'radius', 'finished', '2026-01-01');
            INSERT INTO radii VALUES (1, 0, 0, 1, NULL, 0.0, 0.0, 'misclassified', NULL, 1, 0,
                                      0.1);
            INSERT INTO radii VALUES (1, 1, 1, 1, 0, 0.5, 0.25, 'attacked', 0.3, 9, 2, 0.2);
        """)
        con.close()
        return
    open_store(loc).close()
    with raw(loc) as con:
        con.exec_driver_sql("ALTER TABLE radii DROP CONSTRAINT radii_status_check")
        con.exec_driver_sql("ALTER TABLE radii ADD CONSTRAINT radii_status_check CHECK "
                            "(status IN ('exact', 'attacked', 'censored', 'misclassified'))")
        con.exec_driver_sql("DELETE FROM schema_version")
        con.exec_driver_sql("INSERT INTO schema_version VALUES (1, '2026-01-01')")
    with raw(loc) as con:  # the old check refuses the new status, as stores of version 1 did
        con.exec_driver_sql("INSERT INTO models (name, created_at) VALUES ('old', 'x')")
        con.exec_driver_sql("INSERT INTO runs (uid, model_id, kind, status, started_at) "
                            "VALUES ('u1', 1, 'radius', 'finished', 'x')")
        con.exec_driver_sql("INSERT INTO radii (run_id, sample, label, prediction, radius, "
                            "lower_bound, status, forward_queries, backward_queries, seconds) "
                            "VALUES (1, 0, 0, 1, 0.0, 0.0, 'misclassified', 1, 0, 0.1), "
                            "(1, 1, 1, 1, 0.5, 0.25, 'attacked', 9, 2, 0.2)")
    with pytest.raises(sa.exc.IntegrityError), raw(loc) as con:
        con.exec_driver_sql("UPDATE radii SET status = 'satisfied' WHERE sample = 0")


def test_version_1_store_is_migrated_and_takes_satisfied_rows(new_store):
    loc = new_store()
    _make_version_1(loc)
    with open_store(loc) as store:
        assert store.schema_version == SCHEMA_VERSION == 3
        old = store.radii(1)  # the old rows kept, values unchanged
        assert old["status"].tolist() == ["misclassified", "attacked"]
        assert old["converged"].tolist() == [0, 0]  # not assessed before version 3
        np.testing.assert_array_equal(old["radius"], [0.0, 0.5])
        assert old["queries"].tolist() == [1, 11]
        run = store.start_run("net", threat="linf")
        store.record_radii(run, _satisfied_result())
        assert store.radii(run)["status"].tolist() == ["satisfied", "censored", "attacked",
                                                      "attacked"]
        with pytest.raises(InputError, match="unknown status"):  # still checked
            bad = _result(n=3)
            bad.status[0] = "nonsense"
            store.record_radii(store.start_run("net", threat="linf"), bad)
    with raw(loc) as con:  # a status outside STATUSES is still refused by the database
        with pytest.raises(sa.exc.IntegrityError):
            con.exec_driver_sql("UPDATE radii SET status = 'nonsense' WHERE sample = 0")
    with open_store(loc) as store:  # opening again: nothing more to migrate
        assert store.schema_version == 3
    with raw(loc) as con:
        versions = [r[0] for r in con.exec_driver_sql("SELECT version FROM schema_version "
                                                       "ORDER BY version")]
    assert versions == [1, 2, 3]


def test_version_2_store_gains_the_converged_column(new_store):
    loc = new_store()
    with open_store(loc) as store:
        run = store.start_run("net", threat="linf")
        store.record_radii(run, _result())
    with raw(loc) as con:  # the store as version 2 left it: no converged column
        con.exec_driver_sql("ALTER TABLE radii DROP COLUMN converged")
        con.exec_driver_sql("UPDATE schema_version SET version = 2")
    with open_store(loc) as store:
        assert store.schema_version == 3
        old = store.radii(run)
        assert old["converged"].tolist() == [0] * len(_result())
        np.testing.assert_array_equal(old["radius"], _result().radius)
        res = _result()
        res.meta["converged"] = [1, -1, 0, 1, -1]
        again = store.start_run("net", threat="linf")
        store.record_radii(again, res)
        assert store.radii(again)["converged"].tolist() == res.meta["converged"]
