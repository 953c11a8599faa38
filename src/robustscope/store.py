"""Results store: models, runs, threats, per-input radii and accuracy grids in SQLite.

The schema is versioned (table ``schema_version``) and described in ``docs/store.md``. A run
is never overwritten: each :meth:`ResultStore.start_run` creates a new run (new integer id and
a random ``uid``), and per-run rows are unique on ``(run_id, sample)`` and
``(run_id, attack, eps_key)``, so recording the same thing twice into one run is an error.

Typical use::

    with open_store("results.sqlite") as store:
        run = store.start_run("my-model", kind="radius", threat="linf", solver="pgd")
        store.record_radii(run, result)          # a RadiusResult
        store.finish_run(run)
        grid = store.accuracies("my-model")      # latest accuracy grid of a model
"""

from __future__ import annotations

import json
import math
import sqlite3
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from robustscope.errors import InputError
from robustscope.result import STATUSES, RadiusResult
from robustscope.scores.accuracy_grid import (
    AccuracyGrid,
    ModelAccuracies,
    parse_accuracy_document,
    read_accuracy_file,
    write_accuracy_file,
)
from robustscope.threats.grids import CLEAN, benchmark_name, canonical_eps, eps_key

#: Version of the schema this code writes and reads.
SCHEMA_VERSION = 1

#: Kinds of run.
RUN_KINDS = ("radius", "accuracy", "import")
#: Run states.
RUN_STATES = ("running", "finished", "failed")

_SCHEMA = f"""
CREATE TABLE schema_version (
    version     INTEGER NOT NULL,
    applied_at  TEXT NOT NULL
);
CREATE TABLE models (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT NOT NULL UNIQUE,
    details     TEXT NOT NULL DEFAULT '{{}}',
    created_at  TEXT NOT NULL
);
CREATE TABLE threats (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT NOT NULL,
    params      TEXT NOT NULL DEFAULT '{{}}',
    UNIQUE (name, params)
);
CREATE TABLE runs (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    uid         TEXT NOT NULL UNIQUE,
    model_id    INTEGER NOT NULL REFERENCES models(id),
    threat_id   INTEGER REFERENCES threats(id),
    kind        TEXT NOT NULL CHECK (kind IN {RUN_KINDS!r}),
    solver      TEXT,
    config      TEXT NOT NULL DEFAULT '{{}}',
    source      TEXT,
    status      TEXT NOT NULL CHECK (status IN {RUN_STATES!r}),
    started_at  TEXT NOT NULL,
    finished_at TEXT
);
CREATE TABLE radii (
    run_id            INTEGER NOT NULL REFERENCES runs(id),
    sample            INTEGER NOT NULL,
    label             INTEGER NOT NULL,
    prediction        INTEGER NOT NULL,
    adv_prediction    INTEGER,
    radius            REAL NOT NULL,
    lower_bound       REAL NOT NULL,
    status            TEXT NOT NULL CHECK (status IN {STATUSES!r}),
    loss              REAL,
    forward_queries   INTEGER NOT NULL,
    backward_queries  INTEGER NOT NULL,
    seconds           REAL NOT NULL,
    PRIMARY KEY (run_id, sample)
);
CREATE TABLE accuracies (
    run_id      INTEGER NOT NULL REFERENCES runs(id),
    attack      TEXT NOT NULL,
    eps         REAL NOT NULL,
    eps_key     TEXT NOT NULL,
    accuracy    REAL NOT NULL CHECK (accuracy >= 0 AND accuracy <= 100),
    n_inputs    INTEGER,
    PRIMARY KEY (run_id, attack, eps_key)
);
CREATE INDEX runs_model ON runs(model_id);
"""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _json(obj: object, what: str) -> str:
    try:
        return json.dumps(obj if obj is not None else {}, sort_keys=True)
    except TypeError as err:
        raise InputError(f"{what}: must be JSON-serialisable ({err})") from err


def _real(x: float) -> float | None:
    """NaN -> NULL (SQLite cannot hold NaN); +-inf are kept."""
    x = float(x)
    return None if math.isnan(x) else x


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


class ResultStore:
    """A results database (SQLite file, or ``":memory:"``). See ``docs/store.md``."""

    def __init__(self, path: str | Path = "results.sqlite") -> None:
        self.path = str(path)
        if self.path != ":memory:" and not Path(self.path).parent.is_dir():
            raise InputError(f"store path {self.path}: folder does not exist")
        try:
            self._db = sqlite3.connect(self.path, timeout=30.0)
        except sqlite3.Error as err:
            raise InputError(f"store path {self.path}: cannot open ({err})") from err
        self._db.execute("PRAGMA foreign_keys = ON")
        self._depth = 0
        self._init_schema()

    # -- life cycle ------------------------------------------------------------------------
    def _init_schema(self) -> None:
        try:
            tables = {r[0] for r in self._db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as err:
            self._db.close()
            raise InputError(f"store {self.path}: not a SQLite database ({err})") from err
        if not tables:
            with self._tx():
                self._db.executescript(_SCHEMA)
                self._db.execute("INSERT INTO schema_version VALUES (?, ?)",
                                 (SCHEMA_VERSION, _now()))
            return
        if "schema_version" not in tables:
            self._db.close()
            raise InputError(f"store {self.path}: a SQLite file that is not a robustscope "
                             "store (no schema_version table)")
        version = self.schema_version
        if version != SCHEMA_VERSION:
            self._db.close()
            raise InputError(f"store {self.path}: schema version {version}, this robustscope "
                             f"reads version {SCHEMA_VERSION}")

    @contextmanager
    def _tx(self) -> Iterator[None]:
        """A transaction; nested uses join the outermost one, which commits (or rolls back
        on error) once - so a multi-model import is all-or-nothing and one disk sync."""
        self._depth += 1
        try:
            yield
        except BaseException:
            self._depth -= 1
            if self._depth == 0:
                self._db.rollback()
            raise
        self._depth -= 1
        if self._depth == 0:
            self._db.commit()

    @property
    def schema_version(self) -> int:
        """The highest schema version applied to this database."""
        row = self._db.execute("SELECT MAX(version) FROM schema_version").fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def close(self) -> None:
        self._db.close()

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
        row = self._db.execute("SELECT id, details FROM models WHERE name = ?",
                               (name,)).fetchone()
        if row is not None:
            if details and json.loads(row[1]) != json.loads(_json(details, "details")):
                if json.loads(row[1]):
                    raise InputError(f"model '{name}': already stored with other details")
                with self._tx():
                    self._db.execute("UPDATE models SET details = ? WHERE id = ?",
                                     (_json(details, "details"), row[0]))
            return int(row[0])
        with self._tx():
            cur = self._db.execute(
                "INSERT INTO models (name, details, created_at) VALUES (?, ?, ?)",
                (name, _json(dict(details or {}), f"model '{name}' details"), _now()))
        return int(cur.lastrowid)

    def _model_id(self, model: str | int) -> int:
        if isinstance(model, (int, np.integer)):
            row = self._db.execute("SELECT id FROM models WHERE id = ?", (int(model),)).fetchone()
        else:
            row = self._db.execute("SELECT id FROM models WHERE name = ?", (model,)).fetchone()
        if row is None:
            raise InputError(f"model {model!r}: not in store {self.path}")
        return int(row[0])

    def models(self) -> list[dict]:
        """Stored models as dicts ``{"id", "name", "details", "created_at"}``, by id."""
        rows = self._db.execute("SELECT id, name, details, created_at FROM models ORDER BY id")
        return [{"id": r[0], "name": r[1], "details": json.loads(r[2]), "created_at": r[3]}
                for r in rows]

    def add_threat(self, name: str, params: Mapping | None = None) -> int:
        """Id of threat ``(name, params)``, created if new."""
        if not isinstance(name, str) or not name:
            raise InputError(f"threat name: expected a non-empty string, got {name!r}")
        p = _json(dict(params or {}), f"threat '{name}' params")
        row = self._db.execute("SELECT id FROM threats WHERE name = ? AND params = ?",
                               (name, p)).fetchone()
        if row is not None:
            return int(row[0])
        with self._tx():
            cur = self._db.execute("INSERT INTO threats (name, params) VALUES (?, ?)", (name, p))
        return int(cur.lastrowid)

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
        model_id = self.add_model(model, details)
        threat_id = self.add_threat(threat, threat_params) if threat is not None else None
        with self._tx():
            cur = self._db.execute(
                "INSERT INTO runs (uid, model_id, threat_id, kind, solver, config, source, "
                "status, started_at) VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?)",
                (uuid.uuid4().hex, model_id, threat_id, kind, solver,
                 _json(dict(config or {}), "run config"), source, _now()))
        return int(cur.lastrowid)

    def finish_run(self, run_id: int, status: str = "finished") -> None:
        """Mark a run ``finished`` (or ``failed``) and stamp its end time."""
        if status not in ("finished", "failed"):
            raise InputError(f"status: expected 'finished' or 'failed', got {status!r}")
        self.run(run_id)
        with self._tx():
            self._db.execute("UPDATE runs SET status = ?, finished_at = ? WHERE id = ?",
                             (status, _now(), int(run_id)))

    _RUN_SELECT = ("SELECT r.id, r.uid, m.name, t.name, r.kind, r.solver, r.config, r.source, "
                   "r.status, r.started_at, r.finished_at FROM runs r "
                   "JOIN models m ON m.id = r.model_id LEFT JOIN threats t ON t.id = r.threat_id")

    @staticmethod
    def _run_info(row: tuple) -> RunInfo:
        return RunInfo(row[0], row[1], row[2], row[3], row[4], row[5], json.loads(row[6]),
                       row[7], row[8], row[9], row[10])

    def run(self, run_id: int) -> RunInfo:
        """One run by id."""
        row = self._db.execute(self._RUN_SELECT + " WHERE r.id = ?", (int(run_id),)).fetchone()
        if row is None:
            raise InputError(f"run {run_id}: not in store {self.path}")
        return self._run_info(row)

    def runs(self, model: str | None = None, kind: str | None = None) -> list[RunInfo]:
        """Runs, oldest first, optionally of one model and/or kind."""
        where, args = [], []
        if model is not None:
            where.append("r.model_id = ?")
            args.append(self._model_id(model))
        if kind is not None:
            where.append("r.kind = ?")
            args.append(kind)
        sql = self._RUN_SELECT + (" WHERE " + " AND ".join(where) if where else "")
        return [self._run_info(r) for r in self._db.execute(sql + " ORDER BY r.id", args)]

    def _open_run(self, run_id: int, kinds: tuple[str, ...]) -> RunInfo:
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
        info = self._open_run(run_id, ("radius",))
        if info.threat is not None and benchmark_name(info.threat) != benchmark_name(
                str(result.threat)):
            raise InputError(f"run {run_id}: is a '{info.threat}' run, but the result is for "
                             f"threat '{result.threat}'")
        n = len(result)
        rows = []
        for i in range(n):
            status = str(result.status[i])
            if status not in STATUSES:
                raise InputError(f"result row {i}: unknown status {status!r}")
            rows.append((
                int(run_id), int(result.sample[i]), int(result.label[i]),
                int(result.prediction[i]),
                None if result.adv_prediction is None else int(result.adv_prediction[i]),
                float(result.radius[i]), float(result.lower_bound[i]), status,
                _real(result.loss[i]), int(result.forward_queries[i]),
                int(result.backward_queries[i]), float(result.seconds[i])))
        config = dict(info.config)
        config.setdefault("threat", result.threat)
        config.setdefault("solver", result.solver)
        config.setdefault("max_radius", float(result.max_radius))
        if result.classes is not None:
            config.setdefault("classes", np.asarray(result.classes).tolist())
        try:
            with self._tx():
                if info.threat is None:
                    self._db.execute("UPDATE runs SET threat_id = ? WHERE id = ?",
                                     (self.add_threat(str(result.threat)), int(run_id)))
                self._db.executemany("INSERT INTO radii VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", rows)
                self._db.execute("UPDATE runs SET config = ? WHERE id = ?",
                                 (_json(config, "run config"), int(run_id)))
        except sqlite3.IntegrityError as err:
            raise InputError(f"run {run_id}: radii for some of these samples are already "
                             f"recorded; start a new run instead ({err})") from err

    def radii(self, run_id: int) -> pd.DataFrame:
        """The stored inputs of a radius run, by sample: columns ``sample, label,
        prediction, adv_prediction, radius, lower_bound, status, loss, queries,
        forward_queries, backward_queries, seconds`` (label/prediction as class indices;
        missing losses as NaN)."""
        self._open_run(run_id, ("radius",))
        df = pd.read_sql_query(
            "SELECT sample, label, prediction, adv_prediction, radius, lower_bound, status, "
            "loss, forward_queries, backward_queries, seconds FROM radii WHERE run_id = ? "
            "ORDER BY sample", self._db, params=(int(run_id),))
        df["loss"] = df["loss"].astype(np.float64)
        df.insert(8, "queries", df["forward_queries"] + df["backward_queries"])
        return df

    # -- accuracy grids --------------------------------------------------------------------
    def record_accuracies(self, run_id: int, grid: AccuracyGrid,
                          n_inputs: int | None = None) -> None:
        """Store an accuracy grid (percent) under ``run_id`` (an ``accuracy`` or ``import``
        run); ``n_inputs`` = test inputs behind each accuracy, if known."""
        self._open_run(run_id, ("accuracy", "import"))
        rows = [(int(run_id), CLEAN, 0.0, "", float(grid.clean), n_inputs)]
        for attack, curve in grid.attacks.items():
            for eps, acc in curve.items():
                e = canonical_eps(eps)
                rows.append((int(run_id), attack, e, eps_key(e), float(acc), n_inputs))
        try:
            with self._tx():
                self._db.executemany("INSERT INTO accuracies VALUES (?,?,?,?,?,?)", rows)
        except sqlite3.IntegrityError as err:
            raise InputError(f"run {run_id}: accuracies already recorded or invalid; start a "
                             f"new run instead ({err})") from err

    def _grid(self, run_id: int) -> AccuracyGrid:
        clean = None
        attacks: dict[str, dict[float, float]] = {}
        for attack, eps, acc in self._db.execute(
                "SELECT attack, eps, accuracy FROM accuracies WHERE run_id = ? "
                "ORDER BY attack, eps", (int(run_id),)):
            if attack == CLEAN:
                clean = acc
            else:
                attacks.setdefault(attack, {})[float(eps)] = float(acc)
        if clean is None:
            raise InputError(f"run {run_id}: no accuracy grid recorded")
        return AccuracyGrid(float(clean), attacks)

    def _latest_accuracy_run(self, model_id: int) -> int | None:
        row = self._db.execute(
            "SELECT MAX(r.id) FROM runs r WHERE r.model_id = ? AND r.status != 'failed' AND "
            "EXISTS (SELECT 1 FROM accuracies a WHERE a.run_id = r.id)", (model_id,)).fetchone()
        return None if row[0] is None else int(row[0])

    def accuracies(self, model: str, run_id: int | None = None) -> AccuracyGrid:
        """A model's accuracy grid: that of ``run_id``, or of its latest (not failed) run
        that holds one."""
        model_id = self._model_id(model)
        if run_id is None:
            run_id = self._latest_accuracy_run(model_id)
            if run_id is None:
                raise InputError(f"model '{model}': no accuracy grid in store {self.path}")
        else:
            row = self._db.execute("SELECT model_id FROM runs WHERE id = ?",
                                   (int(run_id),)).fetchone()
            if row is None or row[0] != model_id:
                raise InputError(f"run {run_id}: not a run of model '{model}'")
        return self._grid(run_id)

    def model_accuracies(self, models: Iterable[str] | None = None) -> list[ModelAccuracies]:
        """Latest accuracy grid and details of each model that has one (all models by
        default; naming a model without a grid is an error)."""
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
            run_id = self._latest_accuracy_run(m["id"])
            if run_id is None:
                if models is not None:
                    raise InputError(f"model '{m['name']}': no accuracy grid in store")
                continue
            out.append(ModelAccuracies(m["name"], self._grid(run_id), m["details"]))
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
        with self._tx():
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


def open_store(path: str | Path = "results.sqlite") -> ResultStore:
    """Open (creating if needed) the results store at ``path`` (``":memory:"`` for a
    throw-away one)."""
    return ResultStore(path)
