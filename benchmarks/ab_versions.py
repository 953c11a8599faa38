"""A/B of two source trees on the thread-sensitive searches of ``benchmarks/threads.py``:
the black-box cascade (XGBoost ``predict_proba`` as a callable, 60 breast-cancer inputs,
1,000 queries each) and the exact tree MILP (the XGBClassifier itself), default
``threads="auto"``, no pinning variable. Runs alternate between the trees (the order flips
every repeat), each in its own process, so both see the same machine; the medians' ratio is
the comparison. Radii are hashed to check both trees give the same numbers.

    python benchmarks/ab_versions.py --a src --b /path/to/other/checkout/src --repeats 5
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time


def child(case: str) -> None:
    import numpy as np
    import xgboost
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split

    import robustscope as rs

    X, y = load_breast_cancer(return_X_y=True)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.3, random_state=0)
    model = xgboost.XGBClassifier(n_estimators=100, max_depth=6, random_state=0).fit(X_tr, y_tr)
    target = model.predict_proba if case == "blackbox" else model
    rs.radius(target, X_te[:2], y_te[:2], budget=50)  # warm-up: lazy imports
    t0 = time.perf_counter()
    res = rs.radius(target, X_te[:60], y_te[:60], budget=1000)
    seconds = time.perf_counter() - t0
    digest = hashlib.sha1(np.round(res.radius, 12).tobytes()).hexdigest()[:10]
    print(json.dumps({"seconds": seconds, "radii": digest, "file": rs.__file__}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", required=True, help="source folder A (its robustscope is imported)")
    ap.add_argument("--b", required=True, help="source folder B")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return
    trees = {"A": os.path.abspath(args.a), "B": os.path.abspath(args.b)}
    seconds = {(t, c): [] for t in trees for c in ("blackbox", "exact")}
    digests: dict = {}
    for rep in range(args.repeats):
        for case in ("blackbox", "exact"):
            order = list(trees.items()) if rep % 2 == 0 else list(trees.items())[::-1]
            for name, src in order:
                env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
                env["PYTHONPATH"] = src
                out = subprocess.run([sys.executable, __file__, "--a", "-", "--b", "-",
                                      "--child", case], env=env, capture_output=True,
                                     text=True, check=True)
                d = json.loads(out.stdout.strip().splitlines()[-1])
                if not d["file"].startswith(src):
                    raise RuntimeError(f"{name} imported {d['file']}, not {src}")
                seconds[name, case].append(d["seconds"])
                digests.setdefault((name, case), set()).add(d["radii"])
                print(f"{name} {case} {d['seconds']:.3f} s load {os.getloadavg()[0]:.2f}",
                      file=sys.stderr, flush=True)
    print(f"A = {trees['A']}, B = {trees['B']}; medians of {args.repeats} runs each\n")
    print("| search | A (s) | B (s) | A / B | same radii |\n| --- | ---: | ---: | ---: | --- |")
    for case in ("blackbox", "exact"):
        a, b = (statistics.median(seconds[t, case]) for t in trees)
        same = digests["A", case] == digests["B", case] and len(digests["A", case]) == 1
        print(f"| {case} | {a:.3f} | {b:.3f} | {a / b:.2f} | {'yes' if same else 'no'} |")


if __name__ == "__main__":
    main()
