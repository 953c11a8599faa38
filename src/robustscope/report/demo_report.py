"""The report of ``robustscope demo``: one section per model, all under the same threat."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from robustscope.core.result import RadiusResult
from robustscope.core.space import FeatureSpace
from robustscope.report.html import render_report
from robustscope.scores.evaluation import ReadingOptions, build_evaluation


def build_demo_report(results: dict[str, RadiusResult], X_test: np.ndarray, y_test: np.ndarray,
                      space: FeatureSpace, out_dir: str | Path,
                      X_train: np.ndarray | None = None, seed: int = 0,
                      title: str = "robustscope demo: breast-cancer",
                      name: str = "report.html", started: float | None = None,
                      seconds: dict[str, float] | None = None) -> Path:
    """Write ``<out_dir>/<name>`` for the demo's results and return its path.

    ``results`` maps a model name to its :class:`RadiusResult` over ``X_test`` ``(n, d)``
    (original units, same order); ``X_train`` (optional) is the reference data of the
    out-of-distribution reading, which is left out (with a note) without it. ``started``
    (``time.time()`` when the demo began; default: now) and ``seconds`` (each model's search
    time, s) go into the provenance, whose ``wall_seconds`` is then the demo's measured
    duration up to its readings.
    """
    started = time.time() if started is None else started
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ev = build_evaluation(title, results, X_test, y_test, space, X_reference=X_train,
                          options=ReadingOptions(seed=seed), seconds=seconds,
                          started=started)
    return render_report(ev, out_dir / name)
