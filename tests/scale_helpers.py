"""Helpers for the sharded-run tests: specs, a model that raises on some rows, table reads,
and the fault drills (a worker process that dies once, a run killed after k shards).

The drills live here, not in the package: worker processes are separate processes, so a
monkeypatch does not reach them, but a model object (pickled into the spec's model file) and
a child process started by the test do.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
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


class SlowBlackBox(BlackBox):
    """A :class:`BlackBox` that sleeps ``delay`` seconds per call (same numbers): a search
    long enough for progress reports to arrive while its shard is in flight."""

    def __init__(self, model, delay: float) -> None:
        super().__init__(model)
        self.delay = delay

    def predict_proba(self, X):
        import time

        time.sleep(self.delay)
        return super().predict_proba(X)


class DiesOnce(BlackBox):
    """A :class:`BlackBox` whose ``predict_proba``, called in any process but the one that
    made it (a worker), creates ``marker`` and exits that process at once with
    ``os._exit(3)`` when ``marker`` does not exist yet: a worker that dies once, then a model
    like any other."""

    def __init__(self, model, marker: Path) -> None:
        super().__init__(model)
        self.marker = str(marker)
        self.driver_pid = os.getpid()

    def predict_proba(self, X):
        if os.getpid() != self.driver_pid:
            try:
                fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.close(fd)
                os._exit(3)
        return super().predict_proba(X)


def _fitted_gbm():
    from sklearn.datasets import load_breast_cancer
    from sklearn.ensemble import GradientBoostingClassifier

    X, y = load_breast_cancer(return_X_y=True)
    gbm = GradientBoostingClassifier(n_estimators=30, max_depth=2, random_state=0)
    return gbm.fit(X[:300], y[:300])


def black_box_file(tmp: Path) -> Path:
    """A small gradient-boosted model on breast-cancer's first 300 rows (deterministic),
    pickled as a :class:`BlackBox`."""
    path = tmp / "bb.pkl"
    if not path.exists():
        path.write_bytes(pickle.dumps(BlackBox(_fitted_gbm())))
    return path


def slow_black_box_file(tmp: Path, delay: float) -> Path:
    """The model of :func:`black_box_file` as a :class:`SlowBlackBox` of ``delay`` s/call."""
    path = tmp / "slow.pkl"
    path.write_bytes(pickle.dumps(SlowBlackBox(_fitted_gbm(), delay)))
    return path


def dies_once_file(tmp: Path, marker: Path) -> Path:
    """The model of :func:`black_box_file` (same numbers), pickled as a :class:`DiesOnce`
    that kills the first worker process calling it (made in this process)."""
    path = tmp / "dies-once.pkl"
    path.write_bytes(pickle.dumps(DiesOnce(_fitted_gbm(), marker)))
    return path


def gbm_spec(tmp: Path, name: str, out: str, limit: int = 24, shard: int = 6,
             workers: int = 1, store: str = "null", model: Path | None = None) -> Path:
    """A spec file ``tmp/<name>.yaml``: the black-box model (or ``model``) on breast-cancer's
    first ``limit`` test inputs, under linf and l2, in shards of ``shard`` inputs."""
    path = tmp / f"{name}.yaml"
    path.write_text(GBM_SPEC.format(model=model or black_box_file(tmp), limit=limit, out=out,
                                    shard=shard, workers=workers, store=store))
    return path


def table(out_dir: Path, threat: str) -> pd.DataFrame:
    """A radius table without the timing column (the only one that may differ)."""
    return pd.read_csv(Path(out_dir) / f"radii_{threat}.csv").drop(columns=["seconds"])


def adversarial(out_dir: Path, threat: str) -> np.ndarray:
    with np.load(Path(out_dir) / f"adv_{threat}.npz") as z:
        return z["X_adv"]


def _killing_progress(shards: int):
    """A silent :class:`~robustscope.runs.progress.RunProgress` that SIGKILLs this process
    once ``shards`` shards are committed (file written, journalled, stored: the run advances
    its progress right after)."""
    from robustscope.runs.progress import RunProgress

    class KillAfter(RunProgress):
        @contextlib.contextmanager
        def stage(self, name: str, total: int) -> Iterator[Callable[[int], None]]:
            left = [shards]
            with super().stage(name, total) as advance:
                def advance_then_die(k: int) -> None:
                    advance(k)
                    left[0] -= 1
                    if left[0] <= 0:
                        os.kill(os.getpid(), signal.SIGKILL)

                yield advance_then_die

    return KillAfter(1, None)


def run_killed_after(spec: str | Path, shards: int) -> None:
    """Run ``spec`` and SIGKILL this process after ``shards`` committed shards (call it in a
    child process: :func:`run_subprocess` with ``kill_after``)."""
    from robustscope.runs.runner import run_spec
    from robustscope.runs.spec import load_spec

    run_spec(load_spec(spec), Path(spec).read_text(), quiet=True,
             progress=_killing_progress(shards))


def run_subprocess(spec: Path, kill_after: int | None = None, wait: float | None = None
                   ) -> subprocess.Popen | int:
    """``run_spec_file(spec)`` in a child process (killed by SIGKILL after ``kill_after``
    committed shards, when given); returns its exit code, or the process itself when ``wait``
    is None (the caller kills it)."""
    if kill_after is None:
        code = ("import sys; from robustscope.runs.runner import run_spec_file; "
                "run_spec_file(sys.argv[1], quiet=True)")
    else:
        code = (f"import sys; from scale_helpers import run_killed_after; "
                f"run_killed_after(sys.argv[1], {int(kill_after)})")
    full = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, TESTS]), "OMP_NUM_THREADS": "1"}
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
