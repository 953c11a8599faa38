"""Checkpoints of a run folder: the plan, the shard journal, resume decisions.

A run folder being written holds ``plan.json`` (the run's uid; what it is bound to: the spec,
the robustscope version and the content hashes of its model and data files, see
:mod:`robustscope.runs.binding`; the store run ids; ``complete: false``),
``shards/<threat>/<index>.npz`` (one file per finished shard, written atomically) and
``journal.jsonl`` (one line per shard event, appended and fsynced). A shard counts as done
when its file exists, can be opened as a shard file and holds no failed rows; the journal
says whether it has failed rows without reading the file's tables (a file written just
before a crash, with no journal line yet, is read once). A shard file that cannot be opened
(cut short, overwritten) is reported by name, removed and run again. When every shard is
done the run's tables are assembled from the shard files and ``plan.json`` is marked
``complete: true``.

Starting a run on a folder whose plan is incomplete continues it (or ``--resume DIR``)
when its inputs are the ones it was planned with; finished shards are never run again, so a
run killed at any moment and started again gives the same tables as one that never stopped.
A resume whose model, data, feature file, spec or robustscope version differ is refused with
one line naming what changed (``--restart`` starts a new run instead).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from pathlib import Path

from robustscope.core.errors import InputError
from robustscope.core.fileio import atomic_write
from robustscope.runs.binding import input_identity, what_changed
from robustscope.runs.shards import (
    SHARDS_DIR,
    Shard,
    ShardDamaged,
    read_shard,
    shard_damage,
    shard_path,
)

log = logging.getLogger(__name__)

PLAN = "plan.json"
JOURNAL = "journal.jsonl"
SHARDS = SHARDS_DIR

#: Keys of a plan in memory that are not saved: this session resumed the run / replaced a
#: completed one.
TRANSIENT = ("resumed", "replaced")

def _atomic_json(path: Path, doc: dict) -> None:
    atomic_write(path, lambda p: p.write_text(json.dumps(doc, indent=1)), durable=True)


def load_plan(out_dir: Path) -> dict | None:
    path = Path(out_dir) / PLAN
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: cannot read the run plan ({exc}); delete the folder "
                         "or use another --out-dir") from exc


def save_plan(out_dir: Path, plan: dict) -> None:
    doc = {k: v for k, v in plan.items() if k not in TRANSIENT}
    _atomic_json(Path(out_dir) / PLAN, doc)


def open_run(out_dir: Path, spec, n: int, resume: bool | None,
             identity: dict | None = None) -> dict:
    """The plan of the run to execute in ``out_dir``: the incomplete one found there (when
    ``resume`` is not False), else a new one (old shards and journal removed; ``replaced``
    is set in the returned plan when they were a completed run's).

    ``identity``: what the run is bound to (:func:`~robustscope.runs.binding.input_identity`
    of ``spec`` and ``n``, computed here when not given). An incomplete run whose recorded
    identity differs is not continued: an :class:`InputError` names what changed."""
    out_dir = Path(out_dir)
    identity = identity if identity is not None else input_identity(spec, n)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        plan = load_plan(out_dir)
        incomplete = plan is not None and not plan.get("complete", False)
        plan_was_complete = plan is not None and bool(plan.get("complete", False))
        if resume and not incomplete:
            raise InputError(f"--resume {out_dir}: no incomplete run there "
                             f"({'it is complete' if plan else 'no ' + PLAN})")
        if incomplete and resume is not False:
            changed = what_changed(plan.get("inputs"), identity)
            if changed is not None:
                raise InputError(f"{out_dir} holds an incomplete run that cannot be resumed: "
                                 f"{changed}; resume it with its own inputs, start it afresh "
                                 "with --restart, or use another --out-dir")
            plan["resumed"] = True
            return plan
        for name in (SHARDS, JOURNAL, "run.json"):
            path = out_dir / name
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
        plan = {"robustscope_plan": 2, "uid": uuid.uuid4().hex, "inputs": identity, "n": n,
                "shard_size": spec.execution.shard_size, "seed": spec.seed,
                "threats": [t.name for t in spec.threats], "created": time.time(),
                "complete": False}
        save_plan(out_dir, plan)
        if plan_was_complete:
            plan["replaced"] = True
    except OSError as exc:
        raise InputError(f"cannot prepare the run folder {out_dir} ({exc})") from exc
    return plan


def mark_complete(out_dir: Path, plan: dict) -> None:
    plan["complete"] = True
    save_plan(out_dir, plan)


def read_journal(out_dir: Path) -> dict[str, dict]:
    """The journal's last entry per shard key (a line cut by a crash is skipped). Read
    from the file on every call: nothing is kept between calls (or between runs in one
    process), so what the journal says is what is on disk now."""
    entries: dict[str, dict] = {}
    path = Path(out_dir) / JOURNAL
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                doc = json.loads(line)
            except json.JSONDecodeError:  # a line cut by a crash
                continue
            entries[doc["shard"]] = doc
    return entries


def pending(out_dir: Path, shards: list[Shard]) -> list[Shard]:
    """The shards of ``shards`` that are not done (:func:`shard_done`), in order; the
    journal is read once."""
    entries = read_journal(out_dir)
    return [s for s in shards if not shard_done(out_dir, s, entries)]


def shard_done(out_dir: Path, shard: Shard, entries: dict[str, dict] | None = None) -> bool:
    """The shard's file exists, opens as a shard file, and has no failed rows (those are
    retried). A file that does not open is removed (with a warning naming it): the shard
    runs again. ``entries``: the journal as :func:`read_journal` gives it (read here when not
    given)."""
    path = shard_path(out_dir, shard)
    if not path.is_file():
        return False
    damage = shard_damage(path)
    if damage is None:
        if entries is None:
            entries = read_journal(out_dir)
        entry = entries.get(shard.key)
        if entry is not None and entry.get("status") == "done":
            return entry.get("failed_rows", 0) == 0
        try:
            result, _ = read_shard(path, light=True)
        except ShardDamaged as exc:
            damage = exc.reason
        else:
            return not result.failed.any()
    log.warning("shard file %s is damaged (%s): it is removed and its rows run again", path,
                damage)
    path.unlink(missing_ok=True)
    return False


def record(out_dir: Path, shard: Shard, status: str, **extra: object) -> None:
    """Append one line to the journal and fsync it."""
    doc = {"shard": shard.key, "threat": shard.threat, "index": shard.index,
           "rows": [shard.start, shard.stop], "status": status, "time": time.time(), **extra}
    with open(Path(out_dir) / JOURNAL, "a") as fh:
        fh.write(json.dumps(doc) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
