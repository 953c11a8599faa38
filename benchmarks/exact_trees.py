"""Benchmark: exact radii of tree ensembles, the fast path against the MILP alone and veritas.

Models (trained on 75% of scikit-learn's breast-cancer data, stratified split, seed 0):
XGBoost (100 trees, depth 6), LightGBM (100 trees, depth 6, 31 leaves), scikit-learn
random forest (50 trees, depth 6). Feature space: ``FeatureSpace.from_data`` on the training
rows (per-column range = scale), bounds widened to hold the inputs. Inputs: the test rows,
resampled with Gaussian noise (0.05 of each column's range, clipped to the bounds) up to
``--n`` rows (``--n-linf`` under Linf, the same rows first), labelled by the model itself (so
that every input is correctly classified).

For every model and threat (Linf / L1 / L2):

- ``fast``: :func:`exact_tree_radius` as shipped (program built once per model and space,
  each input bracketed by the independent-trees bound, beam leaf walks and the leaf search,
  a branch and bound over leaf choices; MILP only where the bracket stays open, over the
  cuts within its counterexample);
- ``reference``: the same solver with ``prune=False`` (the MILP search alone, as before the
  fast path), unless ``--no-reference``.

It reports seconds per input (median, p10, p90, max; one core), statuses, the share of
inputs closed without any MILP, the largest relative difference between the two radii
(must be at most 1e-6) and the number of counterexamples confirmed again by the library's own
``predict_proba`` (all of them must be).

Veritas (``dtai-veritas``; ``VeritasRobustnessSearch``: binary search on the Linf radius,
each step bounded by veritas's best-first search over leaf combinations) needs an unbounded,
unscaled input space and a binary model, so it is compared on Linf with the same models
refitted on range-scaled data (features divided by the training range) and an unbounded
feature space of scale 1: time per input, and whether the exact radius lies inside veritas's
bracket ``[lower, upper]`` (and how wide it is).

Run (one core)::

    PYTHONPATH=src python benchmarks/exact_trees.py --n 24 --n-linf 300
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import sys
import time
from collections import Counter

import lightgbm as lgb
import numpy as np
import xgboost as xgb
from native_stdout import markdown_only
from sklearn.datasets import load_breast_cancer
from sklearn.ensemble import RandomForestClassifier
from sklearn.model_selection import train_test_split

from robustscope.core.space import FeatureSpace
from robustscope.models.trees import check_parsed, wrap_tree_model
from robustscope.search.threads import limited_threads
from robustscope.solvers.exact.trees.driver import exact_tree_radius


def _data():
    X, y = load_breast_cancer(return_X_y=True)
    return train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)


def _models() -> dict:
    return {
        "XGBoost (100 trees, depth 6)": lambda: xgb.XGBClassifier(
            n_estimators=100, max_depth=6, n_jobs=1, random_state=0),
        "LightGBM (100 trees, depth 6, 31 leaves)": lambda: lgb.LGBMClassifier(
            n_estimators=100, max_depth=6, num_leaves=31, n_jobs=1, verbose=-1,
            random_state=0),
        "random forest (50 trees, depth 6)": lambda: RandomForestClassifier(
            n_estimators=50, max_depth=6, random_state=0, n_jobs=1),
    }


def _inputs(Xte: np.ndarray, base: FeatureSpace, n: int, seed: int = 0) -> np.ndarray:
    """The test rows, then noisy resamples of them, ``(n, d)``, inside ``base``'s bounds."""
    rng = np.random.default_rng(seed)
    extra = max(0, n - len(Xte))
    pick = Xte[rng.integers(0, len(Xte), size=extra)]
    noisy = pick + rng.normal(size=pick.shape) * 0.05 * base.scale
    return np.clip(np.vstack([Xte, noisy])[:n], base.lower, base.upper)


def _time(fn, *args, **kw):
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t0


def _confirmed(model, res, labels) -> tuple[int, int]:
    """``(not confirmed, counterexamples)``: how many counterexamples the library's own
    ``predict_proba`` does not place in another class than the input's label."""
    found = np.isfinite(res.radius) & (res.radius > 0)
    x_adv = res.x_adv.numpy()[found]
    pred = np.asarray(model.predict_proba(x_adv)).argmax(axis=1) if found.any() else []
    return int(np.sum(pred == labels[found])), int(found.sum())


def main() -> None:
    markdown_only()  # (HiGHS prints to descriptor 1 directly)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=112, help="inputs per model and threat")
    ap.add_argument("--n-linf", type=int, default=None,
                    help="inputs per model under Linf (default: --n); the same rows first")
    ap.add_argument("--time-limit", type=float, default=30.0, help="seconds per input")
    ap.add_argument("--threats", default="linf,l1,l2", help="comma list of linf, l1, l2")
    ap.add_argument("--models", default="all", help="comma list of xgboost, lightgbm, forest")
    ap.add_argument("--no-reference", action="store_true", help="skip the MILP-alone runs")
    ap.add_argument("--veritas-n", type=int, default=100, help="inputs for veritas (0: skip)")
    args = ap.parse_args()

    Xtr, Xte, ytr, _ = _data()
    base = FeatureSpace.from_data(Xtr)
    n_linf = args.n if args.n_linf is None else args.n_linf
    all_rows = _inputs(Xte, base, max(args.n, n_linf))
    space = FeatureSpace.from_arrays(np.minimum(base.lower, all_rows.min(axis=0)),
                                     np.maximum(base.upper, all_rows.max(axis=0)),
                                     scale=base.scale)
    keys = ["xgboost", "lightgbm", "forest"]
    chosen = keys if args.models == "all" else args.models.split(",")
    models = {name: make for key, (name, make) in zip(keys, _models().items(), strict=True)
              if key in chosen}
    threats = args.threats.split(",")
    print(f"{n_linf} inputs per model under Linf, {args.n} under L1 and L2 (breast-cancer "
          f"test rows, then noisy resamples), labels = the model's decisions, range-scaled "
          f"units, time limit "
          f"{args.time_limit:g} s per input, one core "
          f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}), "
          f"{platform.processor() or platform.machine()}. Numbers from a shared machine "
          "unless regenerated on a quiet one.\n")
    print("| model | leaves | threat | path | median ms per input | p10 | p90 | max | "
          "closed without MILP | statuses | counterexamples confirmed by predict_proba | "
          "max rel. diff to reference |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    medians: dict[tuple[str, str], float] = {}
    worst_diff, censoring_differs, compared = 0.0, 0, 0
    for name, make in models.items():
        model = make().fit(Xtr, ytr)
        clf = wrap_tree_model(model)
        agree = check_parsed(model, clf.ensemble, np.vstack([Xtr, all_rows]))
        if agree != 1.0:
            raise SystemExit(f"{name}: parsed ensemble disagrees with predict ({agree:.4f})")
        leaves = sum(len(t.leaves) for t in clf.ensemble.trees)
        all_labels = np.asarray(model.predict_proba(all_rows)).argmax(axis=1)
        for threat in threats:
            n_rows = n_linf if threat == "linf" else args.n
            rows, labels = all_rows[:n_rows], all_labels[:n_rows]
            paths = [("fast", True)] + ([] if args.no_reference else [("reference", False)])
            results = {}
            for path, prune in paths:
                res, wall = _time(exact_tree_radius, clf, rows, labels, space, threat,
                                  time_limit=args.time_limit, prune=prune)
                results[path] = res
                ms = res.seconds * 1000
                bad, total = _confirmed(model, res, labels)
                if bad:
                    raise SystemExit(f"{name} {threat} {path}: {bad} counterexamples not "
                                     "confirmed by predict_proba")
                diff = "—"
                if path == "reference":
                    # compared where both closed the bracket (an input that hit the time
                    # limit on either path holds a bracket, not a radius)
                    a, b = results["fast"], res
                    both = (a.status == "exact") & (b.status == "exact")
                    rel = float(np.max(np.abs(a.radius[both] - b.radius[both])
                                       / np.maximum(b.radius[both], 1e-12), initial=0.0))
                    cens = (a.status == "censored") != (b.status == "censored")
                    worst_diff = max(worst_diff, rel)
                    censoring_differs += int(cens.sum())
                    compared += int(both.sum())
                    diff = (f"{rel:.1e} on {int(both.sum())} exact on both"
                            + (f", censoring differs on {int(cens.sum())}" if cens.any()
                               else ""))
                closed = res.meta.get("closed_without_milp", 0) if prune else 0
                searched = res.meta.get("closed_by_leaf_search", 0) if prune else 0
                counts = Counter(res.status.tolist())
                medians[(name, threat, path)] = float(np.median(ms))
                print(f"| {name} | {leaves} | {threat} | {path} | {np.median(ms):.1f} | "
                      f"{np.percentile(ms, 10):.1f} | {np.percentile(ms, 90):.1f} | "
                      f"{ms.max():.0f} | {closed}/{len(rows)} ({searched} by leaf search) | "
                      + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
                      + f" | {total - bad}/{total} | {diff} |", flush=True)
                print(f"# {name} {threat} {path}: {wall:.1f} s", file=sys.stderr, flush=True)
    _targets(medians, worst_diff, censoring_differs, compared, args.no_reference)
    if args.veritas_n > 0:
        _veritas(Xtr, ytr, Xte, base, models, min(args.veritas_n, len(all_rows)),
                 args.time_limit)


def _targets(medians: dict, worst_diff: float, censoring_differs: int, compared: int,
             no_reference: bool) -> None:
    def get(model_prefix: str, threat: str) -> float | None:
        for (name, th, path), v in medians.items():
            if name.startswith(model_prefix) and th == threat and path == "fast":
                return v
        return None

    lines = ["", "Targets (issue 18; fast path, median per input):"]
    xgb_linf, lgb_linf = get("XGBoost", "linf"), get("LightGBM", "linf")
    if xgb_linf is not None:
        lines.append(f"- XGBoost Linf <= 5 ms: {xgb_linf:.1f} ms: "
                     f"{'met' if xgb_linf <= 5 else 'MISSED'}")
    if lgb_linf is not None:
        lines.append(f"- LightGBM Linf <= 20 ms: {lgb_linf:.1f} ms: "
                     f"{'met' if lgb_linf <= 20 else 'MISSED'}")
    for prefix in ("XGBoost", "LightGBM", "random forest"):
        linf = get(prefix, "linf")
        for threat in ("l1", "l2"):
            v = get(prefix, threat)
            if linf and v is not None:
                lines.append(f"- {prefix} {threat} within 3x of Linf: {v / linf:.1f}x: "
                             f"{'met' if v <= 3 * linf else 'MISSED'}")
    if not no_reference:
        lines.append(f"- same radius as the MILP alone (rel 1e-6) on every input exact on both "
                     f"paths ({compared:,} inputs): largest difference {worst_diff:.1e}: "
                     f"{'met' if worst_diff <= 1e-6 else 'MISSED'}"
                     + (f"; on {censoring_differs} input(s) one path hit the time limit "
                        "before any counterexample (censored) while the other found one"
                        if censoring_differs else ""))
    print("\n".join(lines))


def _veritas(Xtr, ytr, Xte, base, models, n, time_limit) -> None:
    print("\nVeritas, Linf, models refitted on range-scaled features, unbounded space:\n")
    try:
        import veritas
    except ImportError as exc:
        print(f"veritas not run: `import veritas` failed ({exc}); install `dtai-veritas` "
              "(benchmarks/peers/requirements.txt)")
        return
    scale = base.scale
    Xs, rows = Xtr / scale, _inputs(Xte, base, n) / scale
    d = Xs.shape[1]
    space = FeatureSpace.from_arrays(np.full(d, -np.inf), np.full(d, np.inf))
    print("| model | inputs | robustscope ms (median) | veritas ms (median) | exact radius in "
          "veritas's bracket | veritas bracket width rel. (median / max) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, make in models.items():
        model = make().fit(Xs, ytr)
        labels = np.asarray(model.predict_proba(rows)).argmax(axis=1)
        with limited_threads("auto", rows.size):  # the policy radius() applies around it
            ours = exact_tree_radius(model, rows, labels, space, "linf", time_limit=time_limit)
        if not name.startswith(("XGBoost", "LightGBM")):
            # veritas reads a forest's averaged class-1 probability, whose decision is at
            # 0.5, while its robustness search tests the sign of the output
            print(f"| {name} | {len(rows)} | {np.median(ours.seconds) * 1000:.1f} | not run: "
                  "veritas's robustness search decides by the output's sign; a forest's "
                  "output is a probability | — | — |")
            continue
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # its base-score report
                at = veritas.get_addtree(model)
        except Exception as exc:  # a converter veritas lacks: say so
            print(f"| {name} | {len(rows)} | {np.median(ours.seconds) * 1000:.1f} | not run: "
                  f"{type(exc).__name__}: {exc} | — | — |")
            continue
        secs, inside, width = [], 0, []
        for x0, yi, r in zip(rows, labels, ours.radius, strict=True):
            t0 = time.perf_counter()
            search = veritas.VeritasRobustnessSearch(
                x0, 1.0, at if yi == 1 else None, at if yi == 0 else None,
                max_time=time_limit, silent=True)
            _, lo, up = search.search()
            secs.append(time.perf_counter() - t0)
            # veritas's upper end carries its search guard of 1e-4 (a closest example is
            # put 1e-4 inside a box), hence the slack
            inside += int(lo <= r * (1 + 1e-9) and r <= up + 1e-4 + 1e-9)
            width.append((up - lo) / max(r, 1e-12))
        print(f"| {name} | {len(rows)} | {np.median(ours.seconds) * 1000:.1f} | "
              f"{np.median(secs) * 1000:.1f} | {inside}/{len(rows)} | "
              f"{np.median(width):.1e} / {np.max(width):.1e} |", flush=True)


if __name__ == "__main__":
    main()
