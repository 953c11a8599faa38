"""Benchmark: exact Linf radius of tree ensembles on breast-cancer (seconds per input).

Models: XGBoost (100 trees, depth 6) and LightGBM (100 trees, depth 6, 31 leaves), trained on
75% of scikit-learn's breast-cancer data (stratified split, seed 0). Feature space:
``FeatureSpace.from_data`` on the training rows (per-column range = scale); bounds widened to
hold the test rows, so every test input is valid. Threat: Linf in range-scaled units.
Inputs: the first ``--n`` test rows with their true labels (misclassified rows get radius 0
and are left out of the timing).

Run (one core)::

    PYTHONPATH=src python benchmarks/exact_trees.py --runs 3

Prints a markdown section: per configuration, seconds per input (median over inputs, then
median over runs; 10th / 90th percentile and max of the pooled per-input times), status
counts, and the largest relative disagreement of the radii with the first configuration.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections import Counter

import lightgbm as lgb
import numpy as np
import xgboost as xgb  # noqa: E402
from sklearn.datasets import load_breast_cancer  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

from robustscope.core.space import FeatureSpace  # noqa: E402
from robustscope.models.trees import check_parsed, wrap_tree_model  # noqa: E402
from robustscope.solvers.exact_trees import exact_tree_radius  # noqa: E402

CONFIGS = [("highspy", "bisect"), ("highspy", "optimize"), ("scipy", "bisect")]


def _data():
    X, y = load_breast_cancer(return_X_y=True)
    return train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)


def _models():
    return {
        "XGBoost (100 trees, depth 6)": xgb.XGBClassifier(
            n_estimators=100, max_depth=6, n_jobs=1, random_state=0),
        "LightGBM (100 trees, depth 6, 31 leaves)": lgb.LGBMClassifier(
            n_estimators=100, max_depth=6, num_leaves=31, n_jobs=1, verbose=-1,
            random_state=0),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100, help="test inputs")
    ap.add_argument("--runs", type=int, default=3, help="repeats of each configuration")
    ap.add_argument("--time-limit", type=float, default=10.0, help="seconds per input")
    ap.add_argument("--threats", default="linf", help="comma list of linf, l1, l2")
    ap.add_argument("--configs", default="all",
                    help="comma list of backend:search, e.g. highspy:bisect (default all)")
    args = ap.parse_args()
    configs = CONFIGS if args.configs == "all" else [
        tuple(c.split(":")) for c in args.configs.split(",")]

    Xtr, Xte, ytr, yte = _data()
    rows, labels = Xte[: args.n], yte[: args.n]
    base = FeatureSpace.from_data(Xtr)
    space = FeatureSpace.from_arrays(np.minimum(base.lower, rows.min(axis=0)),
                                     np.maximum(base.upper, rows.max(axis=0)),
                                     scale=base.scale)
    threats = args.threats.split(",")
    lines = [f"{len(rows)} test inputs, true labels, range-scaled units, time limit "
             f"{args.time_limit:g} s per input, {args.runs} runs per configuration, "
             f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, "
             f"{platform.processor() or platform.machine()}.", "",
             "| model | leaves | threat | backend / search | median s per input | p10 | p90 "
             "| max | statuses | max rel. diff of radius |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, model in _models().items():
        model.fit(Xtr, ytr)
        clf = wrap_tree_model(model)
        agree = check_parsed(model, clf.ensemble, np.vstack([Xtr, Xte]))
        if agree != 1.0:
            raise SystemExit(f"{name}: parsed ensemble disagrees with predict ({agree:.4f})")
        leaves = sum(len(t.leaves) for t in clf.ensemble.trees)
        for threat in threats:
            _bench(name, clf, leaves, rows, labels, space, threat, configs, args, lines)
    linf = [(row.split(" | ")[0].strip("| "), float(row.split(" | ")[4]))
            for row in lines if row.startswith("| ") and " | linf | " in row]
    if linf:
        worst = max(linf, key=lambda x: x[1])
        lines += ["", f"Target (exact Linf radius in at most 1 s per input, median): slowest "
                      f"configuration {worst[1]:.3f} s ({worst[0]}): "
                      f"{'met' if worst[1] <= 1.0 else 'MISSED'}."]
    print("\n".join(lines))


def _bench(name, clf, leaves, rows, labels, space, threat, configs, args, lines) -> None:
    reference = None
    # the search mode only matters for Linf (L1 / L2 always minimise the norm)
    runs = configs if threat == "linf" else list(dict.fromkeys((b, "optimize")
                                                              for b, _ in configs))
    for backend, search in runs:
        medians, pooled, result = [], [], None
        for _ in range(args.runs):
            t0 = time.perf_counter()
            result = exact_tree_radius(clf, rows, labels, space, threat,
                                       time_limit=args.time_limit, backend=backend,
                                       linf_search=search)
            wall = time.perf_counter() - t0
            timed = result.seconds[result.status != "misclassified"]
            medians.append(float(np.median(timed)))
            pooled.append(timed)
            print(f"# {name} {threat} {backend}/{search}: run {wall:.1f} s, median "
                  f"{medians[-1]:.3f} s", file=sys.stderr, flush=True)
        allt = np.concatenate(pooled)
        counts = Counter(result.status.tolist())
        if reference is None:
            reference, diff = result.radius, 0.0
        else:
            ok = np.isfinite(reference) & np.isfinite(result.radius) & (reference > 0)
            diff = float(np.max(np.abs(result.radius[ok] - reference[ok]) / reference[ok]))
        lines.append(
            f"| {name} | {leaves} | {threat} | {backend} / {search} | "
            f"{np.median(medians):.3f} | {np.percentile(allt, 10):.3f} | "
            f"{np.percentile(allt, 90):.3f} | {allt.max():.3f} | "
            + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
            + f" | {diff:.1e} |")


if __name__ == "__main__":
    main()
