"""The result of a radius search: plain arrays per input, with table and file export.

pandas is imported by the table export only, so that reading results' arrays (the scores,
the command line) does not load it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from robustscope.core.ecdf import robust_accuracy
from robustscope.core.errors import InputError
from robustscope.core.fileio import atomic_write
from robustscope.core.statuses import (  # noqa: F401 - re-exported
    ATTACKED,
    CENSORED,
    EXACT,
    FAILED,
    INVALID,
    MISCLASSIFIED,
    SATISFIED,
    STATUSES,
)

# -- the per-input row schema -----------------------------------------------------------------
#: ``Column.table`` values: a leading column of every radius table (the README's columns),
#: a column that follows them, or a column that is not exported to tables.
LEAD, EXTRA, HIDDEN = "lead", "extra", ""


@dataclass(frozen=True)
class Column:
    """One per-input column of a :class:`RadiusResult`: a 1-D array (``per_row=False``) or an
    array with one sub-array per input (``per_row=True``, e.g. ``(n, d)``).

    - ``dtype``: ``"int64"``, ``"float64"`` or ``"str"`` (text: object or fixed-width arrays);
    - ``table``: :data:`LEAD`, :data:`EXTRA` or :data:`HIDDEN` (not in
      :meth:`RadiusResult.to_dataframe`, the CSV/Parquet/JSON files);
    - ``store``: a column of the results store's ``radii`` table;
    - ``classes``: holds class indices, which tables show as the model's class values;
    - ``nullable``: may be missing (NaN) on a searched input (``NULL`` in the store);
    - ``derived``: computed from other columns (a property of the result), never written;
    - ``fill``: the value of a failed row (``None``: the row keeps its own value); tables show
      a failed row's value empty where it equals ``fill``.
    """

    name: str
    dtype: str
    doc: str
    table: str = LEAD
    store: bool = True
    classes: bool = False
    nullable: bool = False
    derived: bool = False
    per_row: bool = False
    fill: object = None


#: THE per-input row schema, in table order: every table, shard file, store row and run
#: assembly is derived from it.
ROW_SCHEMA: tuple[Column, ...] = (
    Column("sample", "int64", "index of the input in the evaluated set"),
    Column("label", "int64", "true class (index; -1 on a failed row whose class is unknown)",
           classes=True, fill=-1),
    Column("prediction", "int64", "predicted class of the clean input (index)",
           classes=True, fill=-1),
    Column("radius", "float64", "size of the verified counterexample in the threat's norm of "
           "the scaled perturbation (x' - x) / scale; inf = censored, 0 = misclassified or "
           "satisfied",
           fill=math.nan),
    Column("lower_bound", "float64", "certified lower bound on the true radius (same units)",
           fill=math.nan),
    Column("status", "str", "exact, attacked, censored, misclassified, satisfied or failed"),
    Column("loss", "float64", "cross-entropy loss of the clean input (nats)", nullable=True,
           fill=math.nan),
    Column("queries", "int64", "forward + backward model passes spent on the input",
           store=False, derived=True, fill=0),
    Column("seconds", "float64", "batch average: wall time of the batch the input was "
           "searched in, divided by the batch's size (s); not a per-input measurement",
           fill=0.0),
    Column("converged", "int64", "1: the radius converged (exact, a closed certified bracket, "
           "or attacks from independent starts failed to beat it by rtol); -1: still moving "
           "when the search reached its ceiling or budget (raise it); 0: not assessed (a "
           "search without convergence rounds or step-down search, or censored)",
           table=EXTRA, derived=True, fill=0),
    Column("forward_queries", "int64", "forward model passes", table=EXTRA, fill=0),
    Column("backward_queries", "int64", "backward (gradient) passes", table=EXTRA, fill=0),
    Column("adv_prediction", "int64", "predicted class of the counterexample (index)",
           table=EXTRA, classes=True, nullable=True, fill=-1),
    Column("x_adv", "float64", "the counterexample, in input units and shape (the input "
           "itself where none was found)", table=HIDDEN, store=False, per_row=True),
    Column("proba", "float64", "class probabilities of the clean input (n, K)",
           table=HIDDEN, store=False, per_row=True, fill=math.nan),
    Column("proba_adv", "float64", "class probabilities of the counterexample (n, K)",
           table=HIDDEN, store=False, per_row=True, fill=math.nan),
)

#: Columns held as arrays by a result (and written to shard files), in schema order.
STORED_COLUMNS: tuple[Column, ...] = tuple(c for c in ROW_SCHEMA if not c.derived)
#: Columns of the radius tables (``to_dataframe``, CSV, Parquet, JSON), in order.
TABLE_COLUMNS: tuple[str, ...] = tuple(c.name for c in ROW_SCHEMA if c.table)
#: The leading columns of every radius table (more follow).
CSV_COLUMNS: list[str] = [c.name for c in ROW_SCHEMA if c.table == LEAD]

#: ``meta`` entries that hold one value per input (a list), joined and subset with the rows
#: (0 on failed rows). Other entries are taken from the first result that searched an input.
#: ``unconstrained_radius`` / ``unconstrained_breaks``: the radius found without the feature
#: space's relations and whether that counterexample breaks one (``radius(...,
#: compare_unconstrained=True)``).
#: ``converged``: the :attr:`RadiusResult.converged` column.
PER_INPUT_META: tuple[str, ...] = ("attack_runs", "unconstrained_radius", "unconstrained_breaks",
                                   "converged")


def join_meta(template: Mapping, parts: Sequence[tuple[Mapping, int]]) -> dict:
    """``template``'s ``meta`` with the :data:`PER_INPUT_META` entries it holds joined over
    ``parts`` (``(meta, number of rows)`` of results over disjoint inputs, in row order; 0 for
    a part that lacks the entry)."""
    meta = dict(template)
    for key in PER_INPUT_META:
        if key in meta:
            meta[key] = [v for m, n in parts for v in (list(m[key]) if key in m else [0] * n)]
    return meta


def _widen(part: np.ndarray, width: tuple[int, ...], col: Column, result: RadiusResult
           ) -> np.ndarray:
    """``part`` (a per-row column of ``result``) with rows of shape ``width``: as it is, or,
    for a result of failed rows only, filled with the column's fill."""
    if part.shape[1:] == width:
        return part
    if col.fill is None or not np.asarray(result.failed).all():
        raise ValueError(f"cannot join results: column {col.name} has rows of shape "
                         f"{part.shape[1:]} and {width}")
    return np.full((len(part), *width), col.fill, dtype=col.dtype)


def _is_fill(values: np.ndarray, fill: object) -> np.ndarray:
    """Where ``values`` equal ``fill`` (NaN equals NaN)."""
    if isinstance(fill, float) and math.isnan(fill):
        return np.isnan(values.astype(np.float64))
    return values == fill


if TYPE_CHECKING:
    import pandas as pd


@dataclass
class RadiusResult:
    """Per-input radii of robustness under one threat model.

    Arrays have one entry (row) per input, in input order; their columns are declared in
    :data:`ROW_SCHEMA`. ``radius`` and ``lower_bound`` are in the threat's norm of the
    *scaled* perturbation ``(x' - x) / scale``; ``radius`` is ``inf`` for censored inputs and
    0 for misclassified ones. Labels and predictions are class *indices* ``0..K-1``;
    ``classes`` maps them back to the model's labels.

    Rows whose model call raised (sharded runs isolate them) have status ``failed``, the fill
    values of :data:`ROW_SCHEMA` and an error message in ``errors`` (keyed by ``sample``).
    """

    radius: np.ndarray
    lower_bound: np.ndarray
    status: np.ndarray
    x_adv: np.ndarray
    label: np.ndarray
    prediction: np.ndarray
    adv_prediction: np.ndarray
    proba: np.ndarray
    proba_adv: np.ndarray
    loss: np.ndarray
    forward_queries: np.ndarray
    backward_queries: np.ndarray
    seconds: np.ndarray
    threat: str
    solver: str
    max_radius: float
    classes: np.ndarray | None = None
    sample: np.ndarray | None = None
    meta: dict = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.sample is None:
            self.sample = np.arange(len(self.radius))

    def __len__(self) -> int:
        return len(self.radius)

    @property
    def queries(self) -> np.ndarray:
        """Forward + backward passes per input."""
        return self.forward_queries + self.backward_queries

    @property
    def converged(self) -> np.ndarray:
        """``(n,)`` int64 per input: 1 its radius converged (exact, a closed certified
        bracket, or a whole cycle of attacks from independent starts failed to beat it by
        ``rtol``: :mod:`robustscope.search.convergence`; on a black box, the step-down
        search's explorations kept failing: :mod:`robustscope.solvers.attacks.decision.
        step_down`), -1 the search stopped at its ceiling or budget while the radius could
        still fall, 0 not assessed (no convergence rounds or step-down search ran:
        ``converge_ceiling=None``, ``solver="minnorm"`` / ``"pgd"``; censored and failed
        rows)."""
        values = self.meta.get("converged")
        if values is None or len(values) != len(self):
            return np.zeros(len(self), dtype=np.int64)
        return np.asarray(values, dtype=np.int64)

    @property
    def found(self) -> np.ndarray:
        """Inputs with a verified counterexample (every status but ``censored``, ``failed``
        and ``invalid``)."""
        return (self.status != CENSORED) & (self.status != FAILED) & (self.status != INVALID)

    @property
    def failed(self) -> np.ndarray:
        """Inputs whose model call raised (status ``failed``; messages in ``errors``)."""
        return self.status == FAILED

    def robust_accuracy(self, eps: np.ndarray | float) -> np.ndarray:
        """Share of inputs whose radius exceeds each ``eps`` (exact for the solver used,
        since threat sets are nested). Censored inputs count as robust up to ``max_radius``;
        strengths above it are reported as NaN. Inputs with status ``invalid`` (they break
        a relation of the feature space) are left out."""
        keep = self.status != INVALID
        return robust_accuracy(self.radius[keep], self.status[keep], self.max_radius, eps)

    # -- rows ---------------------------------------------------------------------------------
    def _header(self, meta: dict | None = None, errors: dict[int, str] | None = None) -> dict:
        return {"threat": self.threat, "solver": self.solver, "max_radius": self.max_radius,
                "classes": self.classes, "meta": dict(self.meta) if meta is None else meta,
                "errors": dict(self.errors) if errors is None else errors}

    def subset(self, idx: np.ndarray | slice) -> RadiusResult:
        """The rows ``idx`` (a boolean mask, integer positions or a slice), in that order.
        Per-input ``meta`` lists (:data:`PER_INPUT_META`) and ``errors`` follow the rows;
        other ``meta`` entries are kept as they are."""
        # a slice of a memory map stays a view of it (no copy)
        arrays = {c.name: (getattr(self, c.name) if isinstance(idx, slice)
                           else np.asarray(getattr(self, c.name)))[idx] for c in STORED_COLUMNS}
        meta = dict(self.meta)
        for key in PER_INPUT_META:
            if key in meta:
                meta[key] = np.asarray(meta[key])[idx].tolist()
        errors = {}
        if self.errors:
            kept = set(np.asarray(arrays["sample"]).tolist())
            errors = {s: e for s, e in self.errors.items() if s in kept}
        return RadiusResult(**arrays, **self._header(meta, errors))

    @classmethod
    def concatenate(cls, results: Sequence[RadiusResult]) -> RadiusResult:
        """Results over disjoint inputs joined into one, rows sorted by ``sample``.

        Threat, solver, ``max_radius``, classes and ``meta`` come from the first result with a
        searched (not failed) row; :data:`PER_INPUT_META` lists are joined; ``errors``
        are merged. A result made of failed rows only may have per-row arrays of another
        width (e.g. ``proba`` ``(n, 0)`` when no class count was known): its rows are filled.
        """
        if not results:
            raise ValueError("concatenate needs at least one result")
        if len(results) == 1:
            return results[0]
        first = next((r for r in results if (~r.failed).any()), results[0])
        order = np.argsort(np.concatenate([np.asarray(r.sample) for r in results]),
                           kind="stable")
        arrays = {}
        for col in STORED_COLUMNS:
            parts = [np.asarray(getattr(r, col.name)) for r in results]
            if col.per_row:
                width = np.asarray(getattr(first, col.name)).shape[1:]
                parts = [_widen(p, width, col, r) for p, r in zip(parts, results, strict=True)]
            joined = np.concatenate(parts)[order]
            arrays[col.name] = joined.astype(object) if col.dtype == "str" else joined
        meta = join_meta(first.meta, [(r.meta, len(r)) for r in results])
        for key in PER_INPUT_META:
            if key in meta:
                meta[key] = np.asarray(meta[key])[order].tolist()
        errors: dict[int, str] = {}
        for r in results:
            errors.update(r.errors)
        return cls(**arrays, **first._header(meta, errors))

    @classmethod
    def failures(cls, sample: np.ndarray, x: np.ndarray, errors: Mapping[int, str],
                 threat: str, solver: str, max_radius: float, n_classes: int = 0,
                 classes: np.ndarray | None = None, meta: dict | None = None) -> RadiusResult:
        """Failed rows: ``sample`` ``(m,)`` input indices, ``x`` the inputs ``(m, ...)``
        (their ``x_adv``), ``errors`` a message per sample. Every other column holds its
        :data:`ROW_SCHEMA` fill (``proba`` is ``(m, n_classes)`` of NaN). ``meta`` (e.g. that
        of the searched rows beside them) gets 0 totals and 0 per-input entries."""
        m = len(sample)
        arrays: dict[str, np.ndarray] = {}
        for col in STORED_COLUMNS:
            if col.name == "sample":
                arrays[col.name] = np.asarray(sample, dtype=np.int64).copy()
            elif col.name == "status":
                arrays[col.name] = np.full(m, FAILED, dtype=object)
            elif col.name == "x_adv":
                arrays[col.name] = np.asarray(x, dtype=np.float64).copy()
            else:
                shape = (m, n_classes) if col.per_row else (m,)
                arrays[col.name] = np.full(shape, col.fill, dtype=col.dtype)
        meta = dict(meta or {})
        for key in PER_INPUT_META:
            if key in meta:
                meta[key] = [0] * m
        return cls(**arrays, threat=threat, solver=solver, max_radius=max_radius,
                   classes=classes, meta=meta,
                   errors={int(s): str(errors[int(s)]) for s in np.asarray(sample).tolist()})

    def _label_values(self, idx: np.ndarray) -> np.ndarray:
        return idx if self.classes is None else np.asarray(self.classes)[idx]

    def _table_column(self, col: Column, failed: np.ndarray) -> object:
        """One table column: class values for class columns; on failed rows, the values that
        equal the column's fill are empty (NaN, or a nullable integer)."""
        values = np.asarray(getattr(self, col.name))
        hidden = (failed & _is_fill(values, col.fill) if col.fill is not None and failed.any()
                  else None)
        if col.classes:
            safe = values if hidden is None else np.where(hidden, 0, values)
            values = self._label_values(safe)
        if hidden is None or not hidden.any():
            return values
        if values.dtype.kind in "iub":
            import pandas as pd

            return pd.arrays.IntegerArray(values.astype(np.int64), hidden.copy())
        if values.dtype.kind == "f":
            return np.where(hidden, np.nan, values)
        out = values.astype(object)
        out[hidden] = None
        return out

    def to_dataframe(self) -> pd.DataFrame:
        """One row per input, the :data:`TABLE_COLUMNS` of :data:`ROW_SCHEMA`: the CSV columns,
        then forward/backward queries and the counterexample's prediction. Failed rows keep
        their sample, status and (when known) label; their other columns are empty."""
        import pandas as pd

        failed = np.asarray(self.failed)
        return pd.DataFrame({c.name: self._table_column(c, failed)
                             for c in ROW_SCHEMA if c.table})

    @property
    def notes(self) -> list[str]:
        """What the search did where it could not be exact, and why (``meta["notes"]``,
        written by :func:`robustscope.search.notes.solver_notes`; empty when nothing needs
        saying)."""
        return list(self.meta.get("notes") or [])

    def summary(self) -> dict[str, float]:
        """Counts per status and radius statistics over the inputs with a radius."""
        counts = {s: int((self.status == s).sum()) for s in STATUSES}
        broken = self.status != CENSORED
        # radii of the inputs that were searched (not those at 0 before any search)
        r = self.radius[broken & (self.status != MISCLASSIFIED) & (self.status != SATISFIED)]
        return {
            "n": len(self),
            **counts,
            "clean_accuracy": float((self.status != MISCLASSIFIED).mean()) if len(self) else 0.0,
            "median_radius": float(np.median(r)) if len(r) else float("nan"),
            "min_radius": float(r.min()) if len(r) else float("nan"),
            "mean_queries": float(self.queries.mean()) if len(self) else 0.0,
            # radii still moving when the search stopped at its ceiling or budget
            "not_converged": int((self.converged < 0).sum()),
        }

    # -- export -----------------------------------------------------------------------------
    def to_csv(self, path: str | Path) -> None:
        atomic_write(path, lambda p: self.to_dataframe().to_csv(p, index=False))

    def to_parquet(self, path: str | Path) -> None:
        atomic_write(path, lambda p: self.to_dataframe().to_parquet(p, index=False))

    def to_json(self, path: str | Path) -> None:
        records = json.loads(self.to_dataframe().to_json(orient="records"))
        doc = {"threat": self.threat, "solver": self.solver, "max_radius": self.max_radius,
               "meta": self.meta, "inputs": records}
        if self.errors:
            doc["errors"] = {str(k): v for k, v in sorted(self.errors.items())}
        atomic_write(path, lambda p: Path(p).write_text(json.dumps(doc, indent=1)))

    def save(self, path: str | Path) -> None:
        """Write by extension: ``.csv``, ``.parquet`` or ``.json``."""
        suffix = Path(path).suffix.lower()
        writers = {".csv": self.to_csv, ".parquet": self.to_parquet, ".json": self.to_json}
        if suffix not in writers:
            raise InputError(f"output {path}: unknown extension '{suffix}'; "
                             "use .csv, .parquet or .json")
        writers[suffix](path)

    def save_adversarial(self, path: str | Path) -> None:
        """NPZ with ``X_adv`` (same order and shape as the inputs; the input itself where no
        counterexample was found), ``radius`` and ``status``."""
        def write(p: Path) -> None:
            with open(p, "wb") as fh:
                np.savez_compressed(fh, X_adv=self.x_adv, radius=self.radius,
                                    status=self.status.astype(str))
        atomic_write(path, write)
