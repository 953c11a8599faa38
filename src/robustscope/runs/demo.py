"""``robustscope demo``: the main job on a built-in default, in about a minute on 2 cores.

Trains gradient-boosted trees (XGBoost; scikit-learn's GradientBoosting where XGBoost is not
installed) and a logistic regression on scikit-learn's breast-cancer data, and measures the
Linf radius of every test input in range-scaled units (feature ranges taken per column from
the training data) three ways: the trees exactly (a MILP over their thresholds), the same
trees as a black box (queries only), and the linear model exactly. It writes one radius CSV
per row of the summary, prints the summary side by side, and writes the HTML report.
"""

from __future__ import annotations

import importlib.util
import re
import time
from pathlib import Path

import numpy as np
from rich.console import Console

from robustscope.core.result import RadiusResult
from robustscope.core.space import FeatureSpace
from robustscope.models.blackbox import ProbaClassifier
from robustscope.report.demo_report import build_demo_report
from robustscope.report.terminal import Col, fitted_table
from robustscope.search.engine import radius

SEED = 0
HAS_XGBOOST = importlib.util.find_spec("xgboost") is not None
TREE_NAME = "XGBoost" if HAS_XGBOOST else "gradient boosting"
#: The demo's rows (also the built-in models of an evaluation spec).
TREES, TREES_BLACK_BOX = f"{TREE_NAME} (exact)", f"{TREE_NAME} (black box)"
LOGISTIC = "logistic regression (exact)"


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
    if HAS_XGBOOST:
        from xgboost import XGBClassifier

        trees = XGBClassifier(n_estimators=100, max_depth=6, random_state=seed,
                              n_jobs=1).fit(X_train, y_train)
    else:
        trees = GradientBoostingClassifier(random_state=seed).fit(X_train, y_train)
    linear = make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000))
    models = {
        TREES: trees,
        # the same trees, seen only through predict_proba: what a black-box audit finds
        TREES_BLACK_BOX: ProbaClassifier(_fast_proba(trees), 2, classes=trees.classes_,
                                         name=TREE_NAME),
        LOGISTIC: linear.fit(X_train, y_train),
    }
    return data, X_train, X_test, y_train, y_test, models


def _fast_proba(model):
    """XGBoost's ``inplace_predict`` skips the DMatrix that ``predict_proba`` builds per call
    (the black box makes thousands of small calls); the answers are the same."""
    booster = getattr(model, "get_booster", None)
    if booster is None:
        return model.predict_proba
    b = booster()
    return lambda x: b.inplace_predict(np.asarray(x, dtype=np.float32))


def _write_figures(res: RadiusResult, name: str, slug: str, out_dir: Path) -> None:
    """The tutorial's two readings as PNG files: flip rate against strength (overall and per
    class) and initial against perturbed score, coloured by radius."""
    from robustscope.report.tabular_figures import (
        flip_rate_figure,
        save_figure,
        score_scatter_figure,
    )

    names = {0: "malignant", 1: "benign"}
    save_figure(flip_rate_figure(res, labels=res.label, status=res.status, class_names=names,
                                 title=f"Flip rate against strength: {name}"),
                out_dir / f"flip_rate_{slug}.png")
    found = np.isin(res.status, ("exact", "attacked"))
    save_figure(score_scatter_figure(res.proba[found], res.proba_adv[found], res.radius[found],
                                     res.prediction[found],
                                     title=f"Initial against perturbed score: {name}"),
                out_dir / f"scores_{slug}.png")


def _solver_label(res: RadiusResult) -> str:
    kind = res.meta.get("exact_solver")
    if kind == "linear":
        return "exact: closed form"
    if kind == "trees":
        return "exact: MILP on the trees"
    return "black box: cube search + HopSkipJump"


def demo_space(data, X_train: np.ndarray, X_test: np.ndarray) -> FeatureSpace:
    """Range-scaled feature space of the demo: scales are the training ranges per column;
    bounds are widened to contain the test inputs too, so that every input is valid."""
    lower = np.minimum(X_train.min(axis=0), X_test.min(axis=0))
    upper = np.maximum(X_train.max(axis=0), X_test.max(axis=0))
    return FeatureSpace.from_arrays(lower, upper, scale=X_train.max(0) - X_train.min(0),
                                    names=list(data.feature_names))


def run_demo(out_dir: Path, quiet: bool = False) -> dict[str, RadiusResult]:
    """Run the demo, write ``<out_dir>/radii_<model>.csv``, return the results. The report's
    provenance gives the demo's measured wall time, from the start (training included) to
    its readings, and each model's search time."""
    started = time.time()
    console = Console(quiet=quiet)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    data, X_train, X_test, _, y_test, models = train_models()
    space = demo_space(data, X_train, X_test)
    results: dict[str, RadiusResult] = {}
    seconds: dict[str, float] = {}
    columns = (Col("model", "left"), Col("solver", "left", 1), Col("clean acc."),
               Col("exact", priority=2), Col("attacked", priority=2), Col("censored"),
               Col("median r"), Col("25% r", priority=3), Col("75% r", priority=3),
               Col("queries/input", priority=4), Col("seconds", priority=5))
    rows = []
    for name, model in models.items():
        t0 = time.perf_counter()
        res = radius(model, X_test, y_test, threat="linf", space=space, seed=SEED)
        elapsed = time.perf_counter() - t0
        results[name], seconds[name] = res, elapsed
        slug = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
        res.to_csv(out_dir / f"radii_{slug}.csv")
        _write_figures(res, name, slug, out_dir)
        s = res.summary()
        r = res.radius[(res.status == "exact") | (res.status == "attacked")]
        q = np.percentile(r, [25, 75]) if len(r) else (np.nan, np.nan)
        solver = _solver_label(res)
        rows.append([name, solver, f"{s['clean_accuracy']:.3f}", str(s["exact"]),
                     str(s["attacked"]), str(s["censored"]), f"{s['median_radius']:.4f}",
                     f"{q[0]:.4f}", f"{q[1]:.4f}", f"{s['mean_queries']:.0f}", f"{elapsed:.1f}"])
    console.print(fitted_table("Linf radius of robustness, breast-cancer test set (units: "
                               "share of each feature's training range)", columns, rows,
                               console))
    console.print(f"Radius tables and figures (flip_rate_*.png, scores_*.png) written to "
                  f"{out_dir}/")
    report = build_demo_report(results, X_test, y_test, space, out_dir, X_train=X_train,
                               seed=SEED, started=started, seconds=seconds)
    Console().print(f"Report: {report}")  # the path, even with --quiet
    return results
