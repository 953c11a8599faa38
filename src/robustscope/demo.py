"""``robustscope demo``: the main job on a built-in default, in well under a minute.

Trains a gradient-boosted model and a logistic regression on scikit-learn's breast-cancer
data, measures the Linf radius of every test input in range-scaled units (feature ranges
taken per column from the training data), writes one radius CSV per model and prints a
summary of both side by side.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from robustscope.result import RadiusResult
from robustscope.search import radius
from robustscope.space import FeatureSpace

SEED = 0


def train_models(seed: int = SEED):
    """Breast-cancer split (75/25, stratified) and the two fitted models."""
    from sklearn.datasets import load_breast_cancer
    from sklearn.ensemble import GradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import train_test_split
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    data = load_breast_cancer()
    X_train, X_test, y_train, y_test = train_test_split(
        data.data, data.target, test_size=0.25, stratify=data.target, random_state=seed)
    models = {
        "gradient boosting": GradientBoostingClassifier(random_state=seed).fit(X_train, y_train),
        "logistic regression": make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000))
        .fit(X_train, y_train),
    }
    return data, X_train, X_test, y_train, y_test, models


def run_demo(out_dir: Path, quiet: bool = False) -> dict[str, RadiusResult]:
    """Run the demo, write ``<out_dir>/radii_<model>.csv``, return the results."""
    console = Console(quiet=quiet, width=max(Console().width, 130))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    data, X_train, X_test, _, y_test, models = train_models()
    # the test inputs must lie in the space: widen the training ranges to cover them
    lower = np.minimum(X_train.min(axis=0), X_test.min(axis=0))
    upper = np.maximum(X_train.max(axis=0), X_test.max(axis=0))
    space = FeatureSpace.from_arrays(lower, upper, scale=X_train.max(0) - X_train.min(0),
                                     names=list(data.feature_names))
    results: dict[str, RadiusResult] = {}
    table = Table(title="Linf radius of robustness, breast-cancer test set "
                        "(units: share of each feature's training range)")
    for col in ("model", "solver", "clean acc.", "exact", "attacked", "censored",
                "median r", "25% r", "75% r", "queries/input", "seconds"):
        table.add_column(col, justify="right")
    for name, model in models.items():
        t0 = time.perf_counter()
        res = radius(model, X_test, y_test, threat="linf", space=space, seed=SEED)
        elapsed = time.perf_counter() - t0
        results[name] = res
        res.to_csv(out_dir / f"radii_{name.replace(' ', '_')}.csv")
        s = res.summary()
        r = res.radius[(res.status == "exact") | (res.status == "attacked")]
        q = np.percentile(r, [25, 75]) if len(r) else (np.nan, np.nan)
        solver = "exact (linear)" if s["exact"] else "black box: search + PGD"
        table.add_row(name, solver, f"{s['clean_accuracy']:.3f}", str(s["exact"]),
                      str(s["attacked"]), str(s["censored"]), f"{s['median_radius']:.4f}",
                      f"{q[0]:.4f}", f"{q[1]:.4f}", f"{s['mean_queries']:.0f}", f"{elapsed:.1f}")
    console.print(table)
    console.print(f"Radius tables written to {out_dir}/")
    return results
