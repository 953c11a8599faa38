"""Shards of an evaluation: fixed chunks of inputs under one threat, each with its own seed,
and their files.

An evaluation of ``n`` inputs under ``T`` threats splits into ``ceil(n / shard_size) * T``
shards. Shard boundaries depend only on ``shard_size`` (never on the number of workers), and
each shard's seed is derived from ``(run seed, threat, shard index)``, so the same spec gives
the same numbers on any backend and with any number of workers.

Why the shard, not the input, is the unit of determinism: :func:`robustscope.search.engine.radius`
seeds one generator per call and consumes it batch after batch, and the black-box cascade
and the "start from the nearest other input" step draw candidate seeds from the *other*
inputs of the batch (a pool). A radius therefore depends on which inputs share its shard;
fixing the shard (its rows and its seed) fixes the result.

A finished shard is one file, ``shards/<threat>/<index>.npz``: one array per stored column of
:data:`robustscope.core.result.ROW_SCHEMA` (``sample`` = global input indices), the class
values, and ``info`` (JSON: threat, solver, ``max_radius``, ``meta``, seconds, seed and the
failed rows' errors by sample). Searching a shard is :mod:`robustscope.runs.execute`'s job.
"""

from __future__ import annotations

import json
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from robustscope.core.errors import InputError
from robustscope.core.fileio import atomic_write
from robustscope.core.result import STORED_COLUMNS, RadiusResult
from robustscope.search.options import RadiusOptions

#: Folder of the shard files in a run folder.
SHARDS_DIR = "shards"


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
    """How one threat is searched (the same for all of its shards): the threat, whether it is
    an image threat searched on its strength grid ``grid``, and the options of
    :func:`robustscope.radius` (checked; declared in :mod:`robustscope.search.options`), which
    every shard passes on whole, with its own seed. A grid search reads ``solver``,
    ``batch_size`` and ``device`` from them."""

    threat: str
    is_grid: bool
    grid: list[float] | None
    options: RadiusOptions

    def radius_kwargs(self, seed: int) -> dict:
        """Keyword arguments of :func:`robustscope.radius` for a shard with ``seed``."""
        return self.options.kwargs(seed=seed)

    @property
    def solver(self) -> str:
        return self.options.solver

    @property
    def budget(self) -> int | None:
        return self.options.budget

    @property
    def rtol(self) -> float:
        return self.options.rtol

    @property
    def batch_size(self) -> int:
        return self.options.batch_size

    @property
    def max_radius(self) -> float | None:
        return self.options.max_radius

    @property
    def device(self) -> str:
        return self.options.device


@dataclass
class ShardOutput:
    """A finished shard: its result (``sample`` = global input indices; failed rows have
    status ``failed`` and their messages in ``result.errors``) and its wall time in seconds."""

    shard: Shard
    result: RadiusResult
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


# -- shard files -----------------------------------------------------------------------------
def shard_path(root: Path, shard: Shard) -> Path:
    """``root/shards/<threat>/<index>.npz``."""
    return Path(root) / SHARDS_DIR / shard.threat / f"{shard.index:06d}.npz"


def _jsonable(x: object) -> object:
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


def write_shard(root: Path, out: ShardOutput, writer: Callable | None = None) -> Path:
    """Write a shard's file atomically (temporary file, fsync, rename): after a crash the
    file is either whole or absent. ``writer(file, **arrays)`` defaults to ``np.savez``."""
    path = shard_path(root, out.shard)
    path.parent.mkdir(parents=True, exist_ok=True)
    res = out.result
    info = json.dumps({"threat": res.threat, "solver": res.solver,
                       "max_radius": res.max_radius, "meta": res.meta,
                       "seconds": out.seconds, "seed": out.shard.seed,
                       "failed": {str(k): v for k, v in res.errors.items()}},
                      default=_jsonable)
    arrays = {c.name: np.asarray(getattr(res, c.name)) for c in STORED_COLUMNS}
    for c in STORED_COLUMNS:
        if c.dtype == "str":
            arrays[c.name] = arrays[c.name].astype(str)
    if res.classes is not None:
        arrays["classes"] = np.asarray(res.classes)
    arrays["info"] = np.array(info)

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as fh:
            (writer or np.savez)(fh, **arrays)

    atomic_write(path, write, durable=True)
    return path


class ShardDamaged(InputError):
    """A shard file that cannot be read back (cut short, overwritten); ``path`` names it."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"shard file {path} is damaged ({reason})")
        self.path, self.reason = Path(path), reason


#: What a damaged shard file raises while being read.
_DAMAGE = (zipfile.BadZipFile, EOFError, ValueError, KeyError, OSError, json.JSONDecodeError)


def shard_damage(path: Path) -> str | None:
    """Why the shard file at ``path`` cannot be opened (its zip directory is unreadable or
    lacks an array every shard has), or ``None`` when it opens. Reads the directory only,
    not the arrays."""
    try:
        with zipfile.ZipFile(path) as zf:
            names = set(zf.namelist())
    except _DAMAGE as exc:
        return f"{type(exc).__name__}: {exc}"
    missing = sorted({"info.npy", "sample.npy"} - names)
    return f"no {', '.join(missing)} in it" if missing else None


def read_shard(path: Path, light: bool = False) -> tuple[RadiusResult, float]:
    """A shard file back as ``(result, seconds)``; ``light`` skips ``x_adv`` (an empty
    ``(n, 0)`` array instead) to keep memory small. A file that cannot be read raises
    :class:`ShardDamaged` (a missing one :class:`FileNotFoundError`)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            info = json.loads(str(z["info"]))
            arrays = {}
            for c in STORED_COLUMNS:
                if light and c.name == "x_adv":
                    arrays[c.name] = np.zeros((len(z["sample"]), 0))
                    continue
                arrays[c.name] = z[c.name]
            classes = z["classes"] if "classes" in z.files else None
    except FileNotFoundError:
        raise
    except _DAMAGE as exc:
        raise ShardDamaged(path, f"{type(exc).__name__}: {exc}") from exc
    for c in STORED_COLUMNS:
        if c.dtype == "str":
            # one Python string per distinct value, shared by every row (not one per row)
            kinds, inverse = np.unique(arrays[c.name], return_inverse=True)
            arrays[c.name] = kinds.astype(object)[inverse.reshape(-1)]
    res = RadiusResult(**arrays, threat=info["threat"], solver=info["solver"],
                       max_radius=info["max_radius"], classes=classes, meta=info["meta"],
                       errors={int(k): v for k, v in info["failed"].items()})
    return res, float(info["seconds"])
