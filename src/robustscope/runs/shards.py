"""Shards of an evaluation: fixed chunks of inputs under one threat, each with its own seed.

An evaluation of ``n`` inputs under ``T`` threats splits into ``ceil(n / shard_size) * T``
shards. Shard boundaries depend only on ``shard_size`` (never on the number of workers), and
each shard's seed is derived from ``(run seed, threat, shard index)``, so the same spec gives
the same numbers on any backend and with any number of workers.

Why the shard, not the input, is the unit of determinism: :func:`robustscope.search.engine.radius`
seeds one generator per call and consumes it batch after batch, and the black-box cascade
and the "start from the nearest other input" step draw candidate seeds from the *other*
inputs of the batch (a pool). A radius therefore depends on which inputs share its shard;
fixing the shard (its rows and its seed) fixes the result.

A shard whose model raises (:class:`~robustscope.core.errors.ModelError`) is bisected until the
failing rows are isolated: those rows get status ``failed`` (with the error), the others keep
their radii (searched within the smaller pieces, so with a smaller pool).
"""

from __future__ import annotations

import math
import os
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from robustscope.core.errors import ModelError
from robustscope.core.fileio import atomic_write
from robustscope.core.result import RadiusResult

#: Status of an input whose model call raised (bisected down to that input).
FAILED = "failed"

#: Environment hook (tests, fault drills): a worker that finds no file at this path creates
#: it and exits at once with ``os._exit(3)`` - a worker that dies once.
EXIT_ONCE_ENV = "ROBUSTSCOPE_WORKER_EXIT_ONCE"


@dataclass(frozen=True)
class Shard:
    """Rows ``start:stop`` of the inputs under threat number ``threat_index``."""

    threat: str
    threat_index: int
    index: int
    start: int
    stop: int
    seed: int

    @property
    def key(self) -> str:
        return f"{self.threat}/{self.index:06d}"

    def __len__(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class ThreatJob:
    """How one threat is searched (the same for all of its shards)."""

    threat: str
    is_grid: bool
    solver: str
    budget: int | None
    rtol: float
    batch_size: int
    max_radius: float | None
    grid: list[float] | None
    device: str


@dataclass
class ShardOutput:
    """A finished shard: its result (``sample`` = global input indices) and failed rows."""

    shard: Shard
    result: RadiusResult
    failed: dict[int, str] = field(default_factory=dict)  # global row -> error message
    seconds: float = 0.0


def shard_seed(seed: int, threat: str, index: int) -> int:
    """A 63-bit seed from ``(run seed, threat, shard index)`` (stable across processes and
    platforms: CRC-32 of the threat name, NumPy's SeedSequence)."""
    ss = np.random.SeedSequence([int(seed) & 0xFFFFFFFF, zlib.crc32(threat.encode()),
                                 int(index)])
    return int(ss.generate_state(1, dtype=np.uint64)[0]) >> 1


def plan_shards(n: int, threats: list[str], shard_size: int, seed: int) -> list[Shard]:
    """Every shard of ``n`` inputs under ``threats``, threat by threat, in input order."""
    if shard_size < 1:
        raise ValueError(f"shard_size must be >= 1, got {shard_size}")
    out = []
    for t_index, threat in enumerate(threats):
        for index, start in enumerate(range(0, n, shard_size)):
            out.append(Shard(threat, t_index, index, start, min(n, start + shard_size),
                             shard_seed(seed, threat, index)))
    return out


# -- running a shard -------------------------------------------------------------------------
def _maybe_exit_once() -> None:
    path = os.environ.get(EXIT_ONCE_ENV)
    if path:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.close(fd)
        os._exit(3)


def run_shard(inputs, job: ThreatJob, shard: Shard) -> ShardOutput:
    """Search the radius of rows ``shard.start:shard.stop`` of ``inputs`` (a
    :class:`robustscope.runs.runner.LoadedInputs`). A :class:`ModelError` bisects the rows until the
    failing ones are isolated; any other error propagates (the whole shard fails)."""
    _maybe_exit_once()
    t0 = time.perf_counter()
    rows = np.arange(shard.start, shard.stop)
    pieces = _search_rows(lambda r: _search(inputs, job, shard.seed, r), rows)
    failed: dict[int, str] = {}
    parts = []
    for piece_rows, res in pieces:
        if isinstance(res, ModelError):
            failed[int(piece_rows[0])] = str(res)
            continue
        parts.append(res)
    template = parts[0] if parts else None
    result = _assemble(inputs, job, rows, parts, failed, template)
    return ShardOutput(shard, result, failed, time.perf_counter() - t0)


def _search_rows(fn: Callable[[np.ndarray], RadiusResult], rows: np.ndarray
                 ) -> list[tuple[np.ndarray, RadiusResult | ModelError]]:
    try:
        return [(rows, fn(rows))]
    except ModelError as exc:
        if len(rows) == 1:
            return [(rows, exc)]
        mid = len(rows) // 2
        return _search_rows(fn, rows[:mid]) + _search_rows(fn, rows[mid:])


def _search(inputs, job: ThreatJob, seed: int, rows: np.ndarray) -> RadiusResult:
    """One radius search over ``rows`` (global indices) with ``seed``."""
    # a copy: the data may be a read-only memory map, which torch will not wrap
    X = np.array(inputs.X[rows[0]:rows[-1] + 1])
    y = np.array(inputs.y[rows[0]:rows[-1] + 1])
    if job.is_grid:
        from robustscope.runs.runner import LoadedInputs, grid_threat_result

        sub = LoadedInputs(inputs.model, inputs.model_name, X, y, None, inputs.space,
                           inputs.names, inputs.data_name)
        res = grid_threat_result(sub, job.threat, job.grid, seed, job.batch_size, job.device,
                                 f"threat {job.threat}")
    else:
        from robustscope.search.engine import radius

        res = radius(inputs.model, X, y, threat=job.threat, space=inputs.space,
                     solver=job.solver, max_radius=job.max_radius, budget=job.budget,
                     rtol=job.rtol, seed=seed, device=job.device, batch_size=job.batch_size)
    res.sample = rows.copy()
    return res


_ROW_FIELDS = ("radius", "lower_bound", "status", "x_adv", "label", "prediction",
               "adv_prediction", "proba", "proba_adv", "loss", "forward_queries",
               "backward_queries", "seconds", "sample")
#: meta entries that are per-run totals (summed over shards) or per-input lists (joined)
_SUMMED_META = ("forward_total", "backward_total")
_JOINED_META = ("attack_runs",)


def _failed_rows(inputs, rows: np.ndarray, k: int, like: RadiusResult | None) -> dict:
    n = len(rows)
    X = np.asarray(inputs.X[rows[0]:rows[-1] + 1], dtype=np.float64)[rows - rows[0]]
    return {
        "radius": np.full(n, np.nan), "lower_bound": np.full(n, np.nan),
        "status": np.array([FAILED] * n, dtype=object), "x_adv": X,
        "label": np.full(n, -1, dtype=np.int64), "prediction": np.full(n, -1, dtype=np.int64),
        "adv_prediction": np.full(n, -1, dtype=np.int64), "proba": np.full((n, k), np.nan),
        "proba_adv": np.full((n, k), np.nan), "loss": np.full(n, np.nan),
        "forward_queries": np.zeros(n, dtype=np.int64),
        "backward_queries": np.zeros(n, dtype=np.int64), "seconds": np.zeros(n),
        "sample": rows.copy(),
    }


def _assemble(inputs, job: ThreatJob, rows: np.ndarray, parts: list[RadiusResult],
              failed: dict[int, str], template: RadiusResult | None) -> RadiusResult:
    """One RadiusResult over ``rows`` from the searched pieces and the failed rows."""
    if not failed:
        return parts[0] if len(parts) == 1 else concat_results(parts)
    k = template.proba.shape[1] if template is not None else 2
    frows = np.array(sorted(failed), dtype=np.int64)
    fail = RadiusResult(**_failed_rows(inputs, frows, k, template),
                        threat=job.threat, solver=job.solver,
                        max_radius=(template.max_radius if template is not None
                                    else float(job.max_radius or math.nan)),
                        classes=None if template is None else template.classes,
                        meta={} if template is None else dict(template.meta))
    for key in _SUMMED_META:
        if key in fail.meta:
            fail.meta[key] = 0
    if _JOINED_META[0] in fail.meta:
        fail.meta[_JOINED_META[0]] = [0] * len(frows)
    return concat_results([*parts, fail])


def concat_results(parts: list[RadiusResult]) -> RadiusResult:
    """Results over disjoint rows joined and sorted by ``sample``; per-run query totals in
    ``meta`` are summed, per-input lists joined."""
    if len(parts) == 1:
        return parts[0]
    order = np.argsort(np.concatenate([p.sample for p in parts]), kind="stable")
    arrays = {}
    for name in _ROW_FIELDS:
        arrays[name] = np.concatenate([np.asarray(getattr(p, name)) for p in parts])[order]
    arrays["status"] = arrays["status"].astype(object)
    first = next((p for p in parts if (p.status != FAILED).any()), parts[0])
    meta = dict(first.meta)
    for key in _SUMMED_META:
        if key in meta:
            meta[key] = int(sum(p.meta.get(key, 0) for p in parts))
    for key in _JOINED_META:
        if key in meta:
            joined = np.concatenate([np.asarray(p.meta.get(key, [0] * len(p)))
                                     for p in parts])[order]
            meta[key] = joined.tolist()
    return RadiusResult(**arrays, threat=first.threat, solver=first.solver,
                        max_radius=first.max_radius, classes=first.classes, meta=meta)


# -- shard files -----------------------------------------------------------------------------
def shard_path(root: Path, shard: Shard) -> Path:
    return Path(root) / "shards" / shard.threat / f"{shard.index:06d}.npz"


def write_shard(root: Path, out: ShardOutput, writer: Callable | None = None) -> Path:
    """Write a shard's file atomically (temporary file, fsync, rename): after a crash the
    file is either whole or absent."""
    path = shard_path(root, out.shard)
    path.parent.mkdir(parents=True, exist_ok=True)
    res = out.result
    import json

    meta = json.dumps({"threat": res.threat, "solver": res.solver,
                       "max_radius": res.max_radius, "meta": res.meta,
                       "seconds": out.seconds, "seed": out.shard.seed,
                       "failed": {str(k): v for k, v in out.failed.items()}},
                      default=_jsonable)
    arrays = {name: np.asarray(getattr(res, name)) for name in _ROW_FIELDS}
    arrays["status"] = arrays["status"].astype(str)
    if res.classes is not None:
        arrays["classes"] = np.asarray(res.classes)
    arrays["info"] = np.array(meta)
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as fh:
            (writer or np.savez)(fh, **arrays)

    atomic_write(path, write, durable=True)
    return path


def _jsonable(x: object) -> object:
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


def read_shard(path: Path, light: bool = False) -> tuple[RadiusResult, dict[int, str], float]:
    """A shard file back as ``(result, failed rows, seconds)``; ``light`` skips ``x_adv``
    (an empty ``(n, 0)`` array instead) to keep memory small."""
    import json

    with np.load(path, allow_pickle=False) as z:
        info = json.loads(str(z["info"]))
        arrays = {}
        for name in _ROW_FIELDS:
            if light and name == "x_adv":
                arrays[name] = np.zeros((len(z["radius"]), 0))
                continue
            arrays[name] = z[name]
        classes = z["classes"] if "classes" in z.files else None
    # one Python string per distinct status, shared by every row (not one per row)
    kinds, inverse = np.unique(arrays["status"], return_inverse=True)
    arrays["status"] = kinds.astype(object)[inverse.reshape(-1)]
    res = RadiusResult(**arrays, threat=info["threat"], solver=info["solver"],
                       max_radius=info["max_radius"], classes=classes, meta=info["meta"])
    return res, {int(k): v for k, v in info["failed"].items()}, float(info["seconds"])
