"""Helpers for the sharded-run tests: specs, a model that raises on some rows, table reads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

SRC = str(Path(__file__).resolve().parents[1] / "src")
TESTS = str(Path(__file__).resolve().parent)

GBM_SPEC = """\
seed: 3
model: {{path: {model}, trust_pickle: true}}
data: {{builtin: breast-cancer, limit: {limit}}}
threats:
  - name: linf
    strengths: {{max: 0.5, num: 5}}
  - name: l2
solver: {{budget: 150}}
scores: {{n_bootstrap: 20, ood: false, pad: false}}
outputs: {{dir: {out}, store: {store}, adversarial: true}}
execution: {{shard_size: {shard}, workers: {workers}}}
"""


class BlackBox:
    """Only ``predict_proba`` and ``classes_``: robustscope sees a black box (the
    gradient-free cascade, whose seeds come from a pool of other inputs), not a tree
    ensemble it could solve exactly."""

    def __init__(self, model) -> None:
        self.model = model
        self.classes_ = model.classes_

    def predict_proba(self, X):
        return self.model.predict_proba(np.asarray(X))


def black_box_file(tmp: Path) -> Path:
    """A small gradient-boosted model on breast-cancer's first 300 rows (deterministic),
    pickled as a :class:`BlackBox`."""
    path = tmp / "bb.pkl"
    if not path.exists():
        import pickle

        from sklearn.datasets import load_breast_cancer
        from sklearn.ensemble import GradientBoostingClassifier

        X, y = load_breast_cancer(return_X_y=True)
        gbm = GradientBoostingClassifier(n_estimators=30, max_depth=2, random_state=0)
        path.write_bytes(pickle.dumps(BlackBox(gbm.fit(X[:300], y[:300]))))
    return path


def gbm_spec(tmp: Path, name: str, out: str, limit: int = 24, shard: int = 6,
             workers: int = 1, store: str = "null") -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(GBM_SPEC.format(model=black_box_file(tmp), limit=limit, out=out,
                                    shard=shard, workers=workers, store=store))
    return path


def table(out_dir: Path, threat: str) -> pd.DataFrame:
    """A radius table without the timing column (the only one that may differ)."""
    return pd.read_csv(Path(out_dir) / f"radii_{threat}.csv").drop(columns=["seconds"])


def adversarial(out_dir: Path, threat: str) -> np.ndarray:
    with np.load(Path(out_dir) / f"adv_{threat}.npz") as z:
        return z["X_adv"]


def run_subprocess(spec: Path, env: dict | None = None, wait: float | None = None
                   ) -> subprocess.Popen | int:
    """``run_spec_file(spec)`` in a child process; returns its exit code, or the process
    itself when ``wait`` is None (the caller kills it)."""
    code = ("import sys; from robustscope.runs.runner import run_spec_file; "
            "run_spec_file(sys.argv[1], quiet=True)")
    full = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, TESTS]), "OMP_NUM_THREADS": "1",
            **(env or {})}
    proc = subprocess.Popen([sys.executable, "-c", code, str(spec)], env=full,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if wait is None:
        return proc
    proc.wait(timeout=wait)
    return proc.returncode


class FlakyModel:
    """A fitted scikit-learn classifier whose ``predict_proba`` raises when any row has
    feature 0 above ``threshold`` (a model that cannot handle some inputs)."""

    def __init__(self, model, threshold: float) -> None:
        self.model = model
        self.threshold = threshold
        self.classes_ = model.classes_

    def predict_proba(self, X):
        X = np.asarray(X)
        if (X[:, 0] > self.threshold).any():
            raise ValueError(f"feature 0 above {self.threshold}")
        return self.model.predict_proba(X)
