"""Results store: models, runs, threats, per-input radii and accuracy grids in SQL.

Two backends behind one API (SQLAlchemy Core): a SQLite file (the default: give a path, or
``":memory:"``) and a PostgreSQL server shared by a team or a cluster (give a URL
``postgresql://user:password@host:port/database``; needs the ``postgres`` extra, i.e. the
``psycopg`` driver). The schema is versioned (table ``schema_version``) and described in
``docs/store.md``. A run is never overwritten: each :meth:`ResultStore.start_run` creates a
new run (new integer id and a random ``uid``), and per-run rows are unique on
``(run_id, sample)`` and ``(run_id, attack, eps_key)``, so recording the same thing twice
into one run is an error. Every public call is one transaction, and several processes may
write to one store at once.

Typical use::

    with open_store("results.sqlite") as store:      # or "postgresql://u:pw@db:5432/results"
        run = store.start_run("my-model", kind="radius", threat="linf", solver="pgd")
        store.record_radii(run, result)          # a RadiusResult
        store.finish_run(run)
        grid = store.accuracies("my-model")      # latest accuracy grid of a model
"""

from __future__ import annotations

import json
import math
import uuid
import zlib
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg_sql
from sqlalchemy.dialects import sqlite as sqlite_sql
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import StaticPool

from robustscope.core.errors import InputError
from robustscope.core.result import ROW_SCHEMA, STATUSES, Column, RadiusResult
from robustscope.runs.locations import is_store_url
from robustscope.scores.accuracy_grid import (
    AccuracyGrid,
    ModelAccuracies,
    parse_accuracy_document,
    read_accuracy_file,
    write_accuracy_file,
)
from robustscope.threats.grids import CLEAN, canonical_eps, eps_key
from robustscope.threats.registry import benchmark_name

#: Version of the schema this code writes and reads. Version 2 lets ``radii.status`` hold
#: every status of :data:`robustscope.core.statuses.STATUSES` (version 1 refused
#: ``satisfied`` and ``invalid``); version 3 adds ``radii.converged`` (issue #39; 0, not
#: assessed, on the rows of older stores). An older store is migrated when it is opened.
SCHEMA_VERSION = 3

#: Kinds of run.
RUN_KINDS = ("radius", "accuracy", "import")
#: Run states.
RUN_STATES = ("running", "finished", "failed")

#: Seconds a SQLite writer waits for another process's write lock before giving up.
SQLITE_LOCK_TIMEOUT = 60.0

# -- schema (version 1) ----------------------------------------------------------------------
# Integer ids and counts are 64-bit on PostgreSQL; on SQLite they must stay plain INTEGER
# (only "INTEGER PRIMARY KEY AUTOINCREMENT" gives never-reused ids), which is 64-bit there.
_BIGINT = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_REAL = sa.Double().with_variant(sqlite_sql.REAL(), "sqlite")
_JSON_DEFAULT = sa.text("'{}'")

metadata = sa.MetaData()

schema_version_table = sa.Table(
    "schema_version", metadata,
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("applied_at", sa.Text, nullable=False),
)
models_table = sa.Table(
    "models", metadata,
    sa.Column("id", _BIGINT, primary_key=True, autoincrement=True),
    sa.Column("name", sa.Text, nullable=False, unique=True),
    sa.Column("details", sa.Text, nullable=False, server_default=_JSON_DEFAULT),
    sa.Column("created_at", sa.Text, nullable=False),
    sqlite_autoincrement=True,
)
threats_table = sa.Table(
    "threats", metadata,
    sa.Column("id", _BIGINT, primary_key=True, autoincrement=True),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("params", sa.Text, nullable=False, server_default=_JSON_DEFAULT),
    sa.UniqueConstraint("name", "params"),
    sqlite_autoincrement=True,
)
runs_table = sa.Table(
    "runs", metadata,
    sa.Column("id", _BIGINT, primary_key=True, autoincrement=True),
    sa.Column("uid", sa.Text, nullable=False, unique=True),
    sa.Column("model_id", _BIGINT, sa.ForeignKey("models.id"), nullable=False),
    sa.Column("threat_id", _BIGINT, sa.ForeignKey("threats.id")),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("solver", sa.Text),
    sa.Column("config", sa.Text, nullable=False, server_default=_JSON_DEFAULT),
    sa.Column("source", sa.Text),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("started_at", sa.Text, nullable=False),
    sa.Column("finished_at", sa.Text),
    sa.CheckConstraint(f"kind IN {RUN_KINDS!r}"),
    sa.CheckConstraint(f"status IN {RUN_STATES!r}"),
    sa.Index("runs_model", "model_id"),
    sqlite_autoincrement=True,
)
#: The per-input columns of ``radii``: those of the row schema marked ``store``, in its order.
RADII_COLUMNS: tuple[Column, ...] = tuple(c for c in ROW_SCHEMA if c.store)


def _radii_type(col: Column) -> sa.types.TypeEngine:
    """SQL type of a row-schema column: class indices INTEGER, other integers 64-bit,
    reals DOUBLE PRECISION (REAL on SQLite), text TEXT."""
    if col.dtype == "str":
        return sa.Text()
    if col.dtype == "float64":
        return _REAL
    return sa.Integer() if col.classes else _BIGINT


#: ``radii`` columns added by schema version 3 (filled with 0 on older rows).
_ADDED_IN_3 = ("converged",)

radii_table = sa.Table(
    "radii", metadata,
    sa.Column("run_id", _BIGINT, sa.ForeignKey("runs.id"), primary_key=True),
    *(sa.Column(c.name, _radii_type(c), primary_key=c.name == "sample",
                nullable=c.nullable,
                server_default=sa.text("0") if c.name in _ADDED_IN_3 else None)
      for c in RADII_COLUMNS),
    sa.CheckConstraint(f"status IN {STATUSES!r}"),
)
accuracies_table = sa.Table(
    "accuracies", metadata,
    sa.Column("run_id", _BIGINT, sa.ForeignKey("runs.id"), primary_key=True),
    sa.Column("attack", sa.Text, primary_key=True),
    sa.Column("eps", _REAL, nullable=False),
    sa.Column("eps_key", sa.Text, primary_key=True),
    sa.Column("accuracy", _REAL, nullable=False),
    sa.Column("n_inputs", _BIGINT),
    sa.CheckConstraint("accuracy >= 0 AND accuracy <= 100"),
)

_r, _m, _t = runs_table.alias("r"), models_table.alias("m"), threats_table.alias("t")
_RUN_SELECT = (sa.select(_r.c.id, _r.c.uid, _m.c.name.label("model"), _t.c.name.label("threat"),
                         _r.c.kind, _r.c.solver, _r.c.config, _r.c.source, _r.c.status,
                         _r.c.started_at, _r.c.finished_at)
               .select_from(_r.join(_m, _m.c.id == _r.c.model_id)
                            .outerjoin(_t, _t.c.id == _r.c.threat_id)))

class StoreUnreachable(InputError):
    """The store's database cannot be opened or connected to (a bad location given, or a
    server that has gone away)."""


#: What a store that cannot be reached (a server gone, a file's folder removed) raises.
STORE_FAILURES: tuple[type[BaseException], ...] = (sa.exc.DBAPIError, StoreUnreachable)

_RADII_INSERT = ("run_id", *(c.name for c in RADII_COLUMNS))
_ACCURACY_INSERT = ("run_id", "attack", "eps", "eps_key", "accuracy", "n_inputs")

# Key of the PostgreSQL advisory lock that serialises creating the schema in a new database.
_PG_INIT_LOCK = zlib.crc32(b"robustscope.runs.store schema")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _json(obj: object, what: str) -> str:
    try:
        return json.dumps(obj if obj is not None else {}, sort_keys=True)
    except TypeError as err:
        raise InputError(f"{what}: must be JSON-serialisable ({err})") from err


def _real(x: float) -> float | None:
    """NaN -> NULL (SQLite cannot hold NaN; kept the same on PostgreSQL); +-inf are kept."""
    x = float(x)
    return None if math.isnan(x) else x


def _reason(err: BaseException) -> str:
    """The driver's message of a SQLAlchemy error, on one line."""
    orig = getattr(err, "orig", None) or err
    return " ".join(str(orig).split())


@dataclass(frozen=True)
class RunInfo:
    """One row of ``runs``, with the model's and threat's names."""

    id: int
    uid: str
    model: str
    threat: str | None
    kind: str
    solver: str | None
    config: dict
    source: str | None
    status: str
    started_at: str
    finished_at: str | None


def _sqlite_engine(path: str) -> Engine:
    memory = path in (":memory:", "")
    engine = sa.create_engine(
        "sqlite://" if memory else "sqlite:///" + path,
        connect_args={"timeout": SQLITE_LOCK_TIMEOUT},
        poolclass=StaticPool if memory else None,
    )

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record) -> None:
        # The driver must not open transactions by itself: _begin below does it, so that a
        # writing call takes the write lock first (BEGIN IMMEDIATE) and cannot deadlock
        # against another process that read first and wants to write too.
        dbapi_conn.isolation_level = None
        dbapi_conn.execute("PRAGMA foreign_keys = ON")

    @sa.event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql(conn.info.get("robustscope_begin", "BEGIN"))

    return engine


def _open_engine(location: str | Path) -> tuple[Engine, str]:
    """Engine and display name (the path, or the URL with its password hidden)."""
    text = str(location)
    if not is_store_url(text):
        if text != ":memory:" and not Path(text).parent.is_dir():
            raise InputError(f"store path {text}: folder does not exist")
        return _sqlite_engine(text), text
    try:
        url = sa.make_url(text)
    except sa.exc.ArgumentError as err:
        raise InputError(f"store URL {text!r}: cannot be parsed ({err})") from err
    shown = url.render_as_string(hide_password=True)
    backend = url.drivername.split("+")[0]
    if backend == "sqlite":
        path = url.database or ":memory:"
        if path != ":memory:" and not Path(path).parent.is_dir():
            raise InputError(f"store path {path}: folder does not exist")
        return _sqlite_engine(path), path
    if backend not in ("postgresql", "postgres"):
        raise InputError(f"store URL {shown}: unsupported database '{backend}'; give a file "
                         "path (SQLite) or postgresql://user:password@host:port/database")
    if "+" not in url.drivername or backend == "postgres":
        url = url.set(drivername="postgresql+psycopg")
    if not url.database:
        raise InputError(f"store URL {shown}: names no database "
                         "(postgresql://user:password@host:port/DATABASE)")
    try:
        engine = sa.create_engine(url, pool_pre_ping=True, pool_size=1, max_overflow=4)
    except ImportError as err:
        raise InputError(f"store URL {shown}: the PostgreSQL driver is not installed "
                         f"(pip install 'robustscope[postgres]'; {err})") from err
    return engine, shown


class ResultStore:
    """A results database: a SQLite file (or ``":memory:"``), or a PostgreSQL database given
    by URL. See ``docs/store.md``."""

    def __init__(self, location: str | Path = "results.sqlite") -> None:
        self._engine, self.path = _open_engine(location)
        #: ``"sqlite"`` or ``"postgresql"``.
        self.backend = self._engine.dialect.name
        self._conn: Connection | None = None
        self._writing = False
        try:
            self._init_schema()
        except BaseException:
            self._engine.dispose()
            raise

    # -- life cycle ------------------------------------------------------------------------
    @property
    def _kind_of_db(self) -> str:
        return "a SQLite file" if self.backend == "sqlite" else "a PostgreSQL database"

    def _tables(self, conn: Connection) -> set[str]:
        return set(sa.inspect(conn).get_table_names())

    def _init_schema(self) -> None:
        try:
            with self._tx() as conn:
                tables = self._tables(conn)
            if not tables:
                with self._tx(write=True) as conn:
                    if self.backend == "postgresql":
                        # Two processes opening one new database at once: one creates.
                        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_PG_INIT_LOCK)))
                    tables = self._tables(conn)  # re-read under the write lock
                    if not tables:
                        metadata.create_all(conn)
                        conn.execute(sa.insert(schema_version_table).values(
                            version=SCHEMA_VERSION, applied_at=_now()))
                        return
        except sa.exc.OperationalError as err:
            raise InputError(f"store {self.path}: cannot open ({_reason(err)})") from err
        except sa.exc.DatabaseError as err:
            if self.backend == "sqlite":
                raise InputError(f"store {self.path}: not a SQLite database "
                                 f"({_reason(err)})") from err
            raise
        if "schema_version" not in tables:
            raise InputError(f"store {self.path}: {self._kind_of_db} that is not a "
                             "robustscope store (no schema_version table)")
        version = self.schema_version
        if version == 1:
            self._migrate_from_1()
            version = self.schema_version
        if version == 2:
            self._migrate_from_2()
            version = self.schema_version
        if version != SCHEMA_VERSION:
            raise InputError(f"store {self.path}: schema version {version}, this robustscope "
                             f"reads version {SCHEMA_VERSION}")

    def _migrate_from_1(self) -> None:
        """Version 1 -> 2: the status check of ``radii`` takes the statuses of today's
        :data:`STATUSES` (``satisfied`` and ``invalid`` were added after version 1). One
        transaction under the write lock; a process that finds the store already migrated does
        nothing."""
        try:
            with self._tx(write=True) as conn:
                if self.backend == "postgresql":  # several openers: one migrates
                    conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_PG_INIT_LOCK)))
                if self.schema_version != 1:
                    return
                if self.backend == "postgresql":
                    for check in sa.inspect(conn).get_check_constraints("radii"):
                        if "status" in check["sqltext"]:
                            conn.exec_driver_sql(
                                f'ALTER TABLE radii DROP CONSTRAINT "{check["name"]}"')
                    conn.exec_driver_sql("ALTER TABLE radii ADD CONSTRAINT radii_status_check "
                                         f"CHECK (status IN {STATUSES!r})")
                else:  # SQLite cannot change a constraint: the table is rebuilt
                    names = ", ".join(n for n in _RADII_INSERT if n not in _ADDED_IN_3)
                    conn.exec_driver_sql("ALTER TABLE radii RENAME TO radii_v1")
                    radii_table.create(conn)
                    conn.exec_driver_sql(f"INSERT INTO radii ({names}) SELECT {names} "
                                         "FROM radii_v1")
                    conn.exec_driver_sql("DROP TABLE radii_v1")
                conn.execute(sa.insert(schema_version_table).values(version=2,
                                                                    applied_at=_now()))
        except sa.exc.OperationalError as err:
            raise InputError(f"store {self.path}: schema version 1 needs an upgrade to "
                             f"version {SCHEMA_VERSION}, which failed ({_reason(err)})") from err

    def _migrate_from_2(self) -> None:
        """Version 2 -> 3: ``radii`` gains the ``converged`` column (issue #39), 0 (not
        assessed) on the rows already stored. One transaction under the write lock; a process
        that finds the store already migrated does nothing."""
        try:
            with self._tx(write=True) as conn:
                if self.backend == "postgresql":  # several openers: one migrates
                    conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_PG_INIT_LOCK)))
                if self.schema_version != 2:
                    return
                have = {c["name"] for c in sa.inspect(conn).get_columns("radii")}
                for name in _ADDED_IN_3:
                    if name not in have:
                        conn.exec_driver_sql(f"ALTER TABLE radii ADD COLUMN {name} BIGINT "
                                             "NOT NULL DEFAULT 0")
                conn.execute(sa.insert(schema_version_table).values(version=3,
                                                                    applied_at=_now()))
        except sa.exc.OperationalError as err:
            raise InputError(f"store {self.path}: schema version 2 needs an upgrade to "
                             f"version {SCHEMA_VERSION}, which failed ({_reason(err)})") from err

    @contextmanager
    def _tx(self, write: bool = False) -> Iterator[Connection]:
        """One transaction. Nested uses join the outermost one, which commits (or rolls
        back on error) once - so a multi-model import is all-or-nothing and one disk sync.
        ``write=True`` takes SQLite's write lock at the start (other writers wait for it);
        on PostgreSQL, writers lock the rows they read-then-update (``FOR UPDATE``)."""
        if self._conn is not None:
            if write and not self._writing:
                raise RuntimeError("internal: a writing call inside a read-only transaction")
            yield self._conn
            return
        try:
            conn = self._engine.connect()
        except sa.exc.OperationalError as err:
            verb = "open" if self.backend == "sqlite" else "connect"
            raise StoreUnreachable(f"store {self.path}: cannot {verb} ({_reason(err)})"
                                   ) from err
        try:
            conn.info["robustscope_begin"] = "BEGIN IMMEDIATE" if write else "BEGIN"
            with conn.begin():
                self._conn, self._writing = conn, write
                try:
                    yield conn
                finally:
                    self._conn, self._writing = None, False
        finally:
            conn.close()

    def _insert(self, table: sa.Table) -> sa.Insert:
        """A dialect-specific INSERT (it has ``on_conflict_do_nothing``)."""
        return (pg_sql.insert(table) if self.backend == "postgresql"
                else sqlite_sql.insert(table))

    @property
    def schema_version(self) -> int:
        """The highest schema version applied to this database."""
        with self._tx() as conn:
            v = conn.execute(sa.select(sa.func.max(schema_version_table.c.version))).scalar()
        return int(v) if v is not None else 0

    def close(self) -> None:
        """Release the database connection(s)."""
        self._engine.dispose()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- models and threats ----------------------------------------------------------------
    def add_model(self, name: str, details: Mapping | None = None) -> int:
        """Id of model ``name``, created if new. Giving ``details`` that differ from the
        stored ones is an error (a model's description is not silently replaced)."""
        if not isinstance(name, str) or not name:
            raise InputError(f"model name: expected a non-empty string, got {name!r}")
        new = _json(dict(details or {}), f"model '{name}' details")
        m = models_table.c
        locate = sa.select(m.id, m.details).where(m.name == name).with_for_update()
        with self._tx(write=True) as conn:
            row = conn.execute(locate).first()
            if row is None:
                # Another process may create the same model meanwhile: then use its row.
                conn.execute(self._insert(models_table).values(
                    name=name, details=new, created_at=_now()).on_conflict_do_nothing(
                    index_elements=["name"]))
                row = conn.execute(locate).one()
            if details and json.loads(row.details) != json.loads(new):
                if json.loads(row.details):
                    raise InputError(f"model '{name}': already stored with other details")
                conn.execute(sa.update(models_table).where(m.id == row.id).values(details=new))
        return int(row.id)

    def _model_id(self, model: str | int) -> int:
        m = models_table.c
        key = m.id == int(model) if isinstance(model, (int, np.integer)) else m.name == model
        with self._tx() as conn:
            row = conn.execute(sa.select(m.id).where(key)).first()
        if row is None:
            raise InputError(f"model {model!r}: not in store {self.path}")
        return int(row.id)

    def models(self) -> list[dict]:
        """Stored models as dicts ``{"id", "name", "details", "created_at"}``, by id."""
        m = models_table.c
        with self._tx() as conn:
            rows = conn.execute(sa.select(m.id, m.name, m.details, m.created_at)
                                .order_by(m.id)).all()
        return [{"id": int(r.id), "name": r.name, "details": json.loads(r.details),
                 "created_at": r.created_at} for r in rows]

    def add_threat(self, name: str, params: Mapping | None = None) -> int:
        """Id of threat ``(name, params)``, created if new."""
        if not isinstance(name, str) or not name:
            raise InputError(f"threat name: expected a non-empty string, got {name!r}")
        p = _json(dict(params or {}), f"threat '{name}' params")
        t = threats_table.c
        locate = sa.select(t.id).where(t.name == name, t.params == p)
        with self._tx(write=True) as conn:
            found = conn.execute(locate).scalar()
            if found is None:
                conn.execute(self._insert(threats_table).values(name=name, params=p)
                             .on_conflict_do_nothing(index_elements=["name", "params"]))
                found = conn.execute(locate).scalar_one()
        return int(found)

    # -- runs ------------------------------------------------------------------------------
    def start_run(self, model: str, kind: str = "radius", threat: str | None = None,
                  threat_params: Mapping | None = None, solver: str | None = None,
                  config: Mapping | None = None, source: str | None = None,
                  details: Mapping | None = None) -> int:
        """Open a new run (always a new id) for ``model`` (created if new) and return its id.
        ``kind``: ``radius`` (per-input radii), ``accuracy`` (an accuracy grid) or ``import``
        (an accuracy grid read from a file, ``source``)."""
        if kind not in RUN_KINDS:
            raise InputError(f"kind: expected one of {', '.join(RUN_KINDS)}, got {kind!r}")
        cfg = _json(dict(config or {}), "run config")
        with self._tx(write=True) as conn:
            model_id = self.add_model(model, details)
            threat_id = self.add_threat(threat, threat_params) if threat is not None else None
            res = conn.execute(sa.insert(runs_table).values(
                uid=uuid.uuid4().hex, model_id=model_id, threat_id=threat_id, kind=kind,
                solver=solver, config=cfg, source=source, status="running",
                started_at=_now()))
            return int(res.inserted_primary_key[0])

    def finish_run(self, run_id: int, status: str = "finished",
                   config: Mapping | None = None) -> None:
        """Mark a run ``finished`` (or ``failed``) and stamp its end time; ``config`` entries
        (known only at the end, e.g. query totals) are merged into the run's config."""
        if status not in ("finished", "failed"):
            raise InputError(f"status: expected 'finished' or 'failed', got {status!r}")
        with self._tx(write=True) as conn:
            info = self.run(run_id)
            values: dict = {"status": status, "finished_at": _now()}
            if config:
                values["config"] = _json({**info.config, **dict(config)}, "run config")
            conn.execute(sa.update(runs_table).where(runs_table.c.id == int(run_id))
                         .values(**values))

    @staticmethod
    def _run_info(row: sa.Row) -> RunInfo:
        return RunInfo(int(row.id), row.uid, row.model, row.threat, row.kind, row.solver,
                       json.loads(row.config), row.source, row.status, row.started_at,
                       row.finished_at)

    def run(self, run_id: int) -> RunInfo:
        """One run by id."""
        with self._tx() as conn:
            row = conn.execute(_RUN_SELECT.where(_r.c.id == int(run_id))).first()
        if row is None:
            raise InputError(f"run {run_id}: not in store {self.path}")
        return self._run_info(row)

    def runs(self, model: str | None = None, kind: str | None = None) -> list[RunInfo]:
        """Runs, oldest first, optionally of one model and/or kind."""
        q = _RUN_SELECT
        with self._tx() as conn:
            if model is not None:
                q = q.where(_r.c.model_id == self._model_id(model))
            if kind is not None:
                q = q.where(_r.c.kind == kind)
            rows = conn.execute(q.order_by(_r.c.id)).all()
        return [self._run_info(r) for r in rows]

    def _open_run(self, conn: Connection, run_id: int, kinds: tuple[str, ...],
                  lock: bool = False) -> RunInfo:
        if lock:  # writers of one run take turns: its config is read, then rewritten
            conn.execute(sa.select(runs_table.c.id).where(runs_table.c.id == int(run_id))
                         .with_for_update())
        info = self.run(run_id)
        if info.kind not in kinds:
            raise InputError(f"run {run_id}: is a '{info.kind}' run; expected {' or '.join(kinds)}")
        return info

    # -- per-input radii -------------------------------------------------------------------
    def record_radii(self, run_id: int, result: RadiusResult) -> None:
        """Store every input of ``result`` under ``run_id`` (a ``radius`` run). Labels and
        predictions are stored as class indices; ``result.classes`` goes into the run's
        config. The run takes the result's threat if it had none; a different threat, or
        recording an input twice into one run, is an error."""
        with self._tx(write=True) as conn:
            info = self._open_run(conn, run_id, ("radius",), lock=True)
            if info.threat is not None and benchmark_name(info.threat) != benchmark_name(
                    str(result.threat)):
                raise InputError(f"run {run_id}: is a '{info.threat}' run, but the result is "
                                 f"for threat '{result.threat}'")
            rows = self._radii_rows(int(run_id), result)
            config = dict(info.config)
            config.setdefault("threat", result.threat)
            config.setdefault("solver", result.solver)
            config.setdefault("max_radius", float(result.max_radius))
            if result.classes is not None:
                config.setdefault("classes", np.asarray(result.classes).tolist())
            values: dict = {"config": _json(config, "run config")}
            if info.threat is None:
                values["threat_id"] = self.add_threat(str(result.threat))
            try:
                self._insert_radii(conn, rows)
            except sa.exc.IntegrityError as err:
                raise InputError(f"run {run_id}: radii for some of these samples are already "
                                 f"recorded; start a new run instead ({_reason(err)})") from err
            conn.execute(sa.update(runs_table).where(runs_table.c.id == int(run_id))
                         .values(**values))

    def _insert_radii(self, conn: Connection, rows: list[tuple]) -> None:
        """Insert radii rows (tuples in ``_RADII_INSERT`` order) the fastest way each driver
        has: SQLite's executemany, PostgreSQL's COPY (about 3x faster than a batched
        INSERT for 10,000 rows); a duplicate raises SQLAlchemy's IntegrityError."""
        if not rows:
            return
        if self._engine.dialect.driver == "psycopg":
            names = ", ".join(_RADII_INSERT)
            import psycopg

            cursor = conn.connection.driver_connection.cursor()
            try:
                with cursor.copy(f"COPY radii ({names}) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
            except psycopg.IntegrityError as err:
                raise sa.exc.IntegrityError("COPY radii", None, err) from err
            finally:
                cursor.close()
        else:
            self._insert_many(conn, "radii", _RADII_INSERT, rows)

    def _insert_many(self, conn: Connection, table: str, columns: tuple[str, ...],
                     rows: list[tuple]) -> None:
        """``INSERT`` of many rows through the driver's executemany: SQLAlchemy's own
        per-row parameter handling costs more than the database for thousands of rows."""
        mark = "?" if self._engine.dialect.paramstyle == "qmark" else "%s"
        conn.exec_driver_sql(f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
                             f"({', '.join([mark] * len(columns))})", rows)

    @staticmethod
    def _radii_rows(run_id: int, result: RadiusResult) -> list[tuple]:
        """One tuple per input of ``result``, in ``_RADII_INSERT`` order."""
        n = len(result)
        columns: list[list] = [[run_id] * n]
        for col in RADII_COLUMNS:
            values = getattr(result, col.name)
            if values is None:  # an optional column the result does not have
                columns.append([None] * n)
            elif col.dtype == "str":
                text = [str(v) for v in values]
                if col.name == "status":
                    for i, s in enumerate(text):
                        if s not in STATUSES:
                            raise InputError(f"result row {i}: unknown status {s!r}")
                columns.append(text)
            elif col.dtype == "float64":
                reals = np.asarray(values, dtype=np.float64).tolist()
                columns.append([_real(v) for v in reals] if col.nullable else reals)
            else:
                columns.append(np.asarray(values).astype(np.int64).tolist())
        return list(zip(*columns, strict=True))

    def radii(self, run_id: int) -> pd.DataFrame:
        """The stored inputs of a radius run, by sample: the columns of a radius table
        (:meth:`RadiusResult.to_dataframe`, in its order), with class indices for labels and
        predictions and missing losses as NaN."""
        names = [c.name for c in RADII_COLUMNS]
        mark = "?" if self.backend == "sqlite" else "%s"
        sql = (f"SELECT {', '.join(names)} FROM radii WHERE run_id = {mark} "
               "ORDER BY sample")
        with self._tx() as conn:
            self._open_run(conn, run_id, ("radius",))
            # straight from the driver's cursor: no SQLAlchemy Row objects for 10^4+ rows
            cursor = conn.connection.driver_connection.cursor()
            try:
                cursor.execute(sql, (int(run_id),))
                rows = cursor.fetchall()
            finally:
                cursor.close()
        df = pd.DataFrame.from_records(rows, columns=names)
        for col in RADII_COLUMNS:
            if col.nullable and col.dtype == "float64":  # NULL -> NaN
                df[col.name] = df[col.name].astype(np.float64)
        # derived columns (queries) computed the way the result computes them
        df["queries"] = df["forward_queries"] + df["backward_queries"]
        return df[[c.name for c in ROW_SCHEMA if c.table and (c.store or c.derived)]]

    # -- accuracy grids --------------------------------------------------------------------
    def record_accuracies(self, run_id: int, grid: AccuracyGrid,
                          n_inputs: int | None = None) -> None:
        """Store an accuracy grid (percent) under ``run_id`` (an ``accuracy`` or ``import``
        run); ``n_inputs`` = test inputs behind each accuracy, if known."""
        n = None if n_inputs is None else int(n_inputs)
        rows = [(int(run_id), CLEAN, 0.0, "", float(grid.clean), n)]
        for attack, curve in grid.attacks.items():
            for eps, acc in curve.items():
                e = canonical_eps(eps)
                rows.append((int(run_id), attack, e, eps_key(e), float(acc), n))
        with self._tx(write=True) as conn:
            self._open_run(conn, run_id, ("accuracy", "import"), lock=True)
            try:
                self._insert_many(conn, "accuracies", _ACCURACY_INSERT, rows)
            except sa.exc.IntegrityError as err:
                raise InputError(f"run {run_id}: accuracies already recorded or invalid; "
                                 f"start a new run instead ({_reason(err)})") from err

    def _grid(self, conn: Connection, run_id: int) -> AccuracyGrid:
        a = accuracies_table.c
        clean = None
        attacks: dict[str, dict[float, float]] = {}
        for attack, eps, acc in conn.execute(
                sa.select(a.attack, a.eps, a.accuracy).where(a.run_id == int(run_id))
                .order_by(a.attack, a.eps)):
            if attack == CLEAN:
                clean = acc
            else:
                attacks.setdefault(attack, {})[float(eps)] = float(acc)
        if clean is None:
            raise InputError(f"run {run_id}: no accuracy grid recorded")
        return AccuracyGrid(float(clean), attacks)

    @staticmethod
    def _latest_accuracy_run(conn: Connection, model_id: int) -> int | None:
        r, a = runs_table.c, accuracies_table.c
        has_grid = sa.exists(sa.select(a.run_id).where(a.run_id == r.id))
        found = conn.execute(sa.select(sa.func.max(r.id)).where(
            r.model_id == model_id, r.status != "failed", has_grid)).scalar()
        return None if found is None else int(found)

    def accuracies(self, model: str, run_id: int | None = None) -> AccuracyGrid:
        """A model's accuracy grid: that of ``run_id``, or of its latest (not failed) run
        that holds one."""
        with self._tx() as conn:
            model_id = self._model_id(model)
            if run_id is None:
                run_id = self._latest_accuracy_run(conn, model_id)
                if run_id is None:
                    raise InputError(f"model '{model}': no accuracy grid in store {self.path}")
            else:
                owner = conn.execute(sa.select(runs_table.c.model_id)
                                     .where(runs_table.c.id == int(run_id))).scalar()
                if owner is None or int(owner) != model_id:
                    raise InputError(f"run {run_id}: not a run of model '{model}'")
            return self._grid(conn, run_id)

    def model_accuracies(self, models: Iterable[str] | None = None) -> list[ModelAccuracies]:
        """Latest accuracy grid and details of each model that has one (all models by
        default; naming a model without a grid is an error)."""
        with self._tx() as conn:
            stored = self.models()
            if models is not None:
                wanted = list(models)
                by_name = {m["name"]: m for m in stored}
                for name in wanted:
                    if name not in by_name:
                        raise InputError(f"model '{name}': not in store {self.path}")
                stored = [by_name[n] for n in wanted]
            out = []
            for m in stored:
                run_id = self._latest_accuracy_run(conn, m["id"])
                if run_id is None:
                    if models is not None:
                        raise InputError(f"model '{m['name']}': no accuracy grid in store")
                    continue
                out.append(ModelAccuracies(m["name"], self._grid(conn, run_id), m["details"]))
        return out

    def best_reference(self) -> AccuracyGrid:
        """acc*(P) as the best accuracy at each point over the stored models' latest grids."""
        from robustscope.scores.multiattack import best_reference

        grids = [m.grid for m in self.model_accuracies()]
        if not grids:
            raise InputError(f"store {self.path}: no accuracy grids to take a reference from")
        return best_reference(grids)

    # -- benchmark JSON --------------------------------------------------------------------
    def import_accuracies(self, source: str | Path | Mapping, name: str | None = None
                          ) -> list[int]:
        """Import a benchmark accuracy JSON (file path or parsed document; one model - named
        ``name`` or the file stem - or the multi-model format). Each model gets a new
        ``import`` run; returns the run ids."""
        if isinstance(source, Mapping):
            models = parse_accuracy_document(source, name or "model", "accuracies document")
            label = "document"
        else:
            models = read_accuracy_file(source)
            if name is not None and len(models) == 1:
                models[0].name = name
            label = str(source)
        run_ids = []
        with self._tx(write=True):
            for m in models:
                run_id = self.start_run(m.name, kind="import", source=label, details=m.details)
                self.record_accuracies(run_id, m.grid)
                self.finish_run(run_id)
                run_ids.append(run_id)
        return run_ids

    def export_accuracies(self, path: str | Path, models: Iterable[str] | None = None,
                          single: bool = False) -> None:
        """Write the latest grid of each (or the named) model as benchmark JSON: the
        multi-model format, or the bare grid with ``single=True`` and one model."""
        write_accuracy_file(path, self.model_accuracies(models), single=single)


def open_store(location: str | Path = "results.sqlite") -> ResultStore:
    """Open (creating the schema if the database is empty) the results store at
    ``location``: a SQLite file path (``":memory:"`` for a throw-away one), a
    ``sqlite:///path`` URL, or a PostgreSQL URL
    ``postgresql://user:password@host:port/database``."""
    return ResultStore(location)
