"""The result of a radius search: plain arrays per input, with table and file export.

pandas is imported by the table export only, so that reading results' arrays (the scores,
the command line) does not load it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from robustscope.core.ecdf import robust_accuracy
from robustscope.core.fileio import atomic_write
from robustscope.core.statuses import (  # noqa: F401 - re-exported
    ATTACKED,
    CENSORED,
    EXACT,
    FAILED,
    MISCLASSIFIED,
    STATUSES,
)

if TYPE_CHECKING:
    import pandas as pd

#: Columns of the radius CSV, in order (more may follow).
CSV_COLUMNS = ["sample", "label", "prediction", "radius", "lower_bound", "status", "loss",
               "queries", "seconds"]


@dataclass
class RadiusResult:
    """Per-input radii of robustness under one threat model.

    Arrays have one entry (row) per input, in input order. ``radius`` and ``lower_bound`` are
    in the threat's norm of the *scaled* perturbation ``(x' - x) / scale``; ``radius`` is
    ``inf`` for censored inputs and 0 for misclassified ones. Labels and predictions are class
    *indices* ``0..K-1``; ``classes`` maps them back to the model's labels.
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
    def found(self) -> np.ndarray:
        """Inputs with a verified counterexample (every status but ``censored``)."""
        return self.status != CENSORED

    def robust_accuracy(self, eps: np.ndarray | float) -> np.ndarray:
        """Share of inputs whose radius exceeds each ``eps`` (exact for the solver used,
        since threat sets are nested). Censored inputs count as robust up to ``max_radius``;
        strengths above it are reported as NaN."""
        return robust_accuracy(self.radius, self.status, self.max_radius, eps)

    def _label_values(self, idx: np.ndarray) -> np.ndarray:
        return idx if self.classes is None else self.classes[idx]

    def to_dataframe(self) -> pd.DataFrame:
        """One row per input: the CSV columns, then forward/backward queries and the
        counterexample's prediction."""
        import pandas as pd

        return pd.DataFrame({
            "sample": self.sample,
            "label": self._label_values(self.label),
            "prediction": self._label_values(self.prediction),
            "radius": self.radius,
            "lower_bound": self.lower_bound,
            "status": self.status,
            "loss": self.loss,
            "queries": self.queries,
            "seconds": self.seconds,
            "forward_queries": self.forward_queries,
            "backward_queries": self.backward_queries,
            "adv_prediction": self._label_values(self.adv_prediction),
        })

    def summary(self) -> dict[str, float]:
        """Counts per status and radius statistics over the inputs with a radius."""
        counts = {s: int((self.status == s).sum()) for s in STATUSES}
        broken = self.status != CENSORED
        r = self.radius[broken & (self.status != MISCLASSIFIED)]
        return {
            "n": len(self),
            **counts,
            "clean_accuracy": float((self.status != MISCLASSIFIED).mean()) if len(self) else 0.0,
            "median_radius": float(np.median(r)) if len(r) else float("nan"),
            "min_radius": float(r.min()) if len(r) else float("nan"),
            "mean_queries": float(self.queries.mean()) if len(self) else 0.0,
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
        atomic_write(path, lambda p: Path(p).write_text(json.dumps(doc, indent=1)))

    def save(self, path: str | Path) -> None:
        """Write by extension: ``.csv``, ``.parquet`` or ``.json``."""
        suffix = Path(path).suffix.lower()
        writers = {".csv": self.to_csv, ".parquet": self.to_parquet, ".json": self.to_json}
        if suffix not in writers:
            from robustscope.core.errors import InputError

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
