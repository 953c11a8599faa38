"""Busy neighbour: robustscope's own thread use against a pin to one thread, idle and with
another process keeping one core busy.

    python benchmarks/busy_neighbour.py --repeats 3

Five workloads, each timed in a fresh child process (the time of the work itself, imports
and training left out) in four settings: the default environment and ``OMP_NUM_THREADS=1``
(with ``MKL_NUM_THREADS`` and ``OPENBLAS_NUM_THREADS``), each on an idle machine and beside a
process that spins on one core (started and stopped by this script). Targets (issue 13): with
the neighbour, default / pinned <= 1.5; idle, default / pinned <= 1 (up to noise).

Prints a markdown table on stdout (medians over the repeats, ratios of medians measured in
the same run), progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PINS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")

WORKLOADS = {
    "demo": "`robustscope demo` (training and radii of both models, report)",
    "blackbox": "black-box cascade, XGBoost `predict_proba` as a callable, 60 inputs, "
                "1,000 queries each",
    "trees": "exact tree MILP, XGBoost (100 trees, depth 6), 60 inputs, Linf",
    "mlp": "white-box search, digits ReLU MLP 64-128-10, 60 inputs, Linf, default budget",
    "run": "`robustscope run` with 2 workers: built-in breast-cancer GBM, exact MILP, "
           "shards of 20",
}

RUN_SPEC = """\
seed: 0
model: {{builtin: breast-cancer-gbm}}
data: {{builtin: breast-cancer}}
threats: [{{name: linf}}]
scores: {{n_bootstrap: 100, ood: false, pad: false}}
outputs: {{dir: {out}}}
execution: {{shard_size: 20, workers: 2}}
"""


def _breast_cancer():
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split

    X, y = load_breast_cancer(return_X_y=True)
    return train_test_split(X, y, test_size=0.3, random_state=0)


def _xgboost():
    from xgboost import XGBClassifier

    X_train, X_test, y_train, y_test = _breast_cancer()
    model = XGBClassifier(n_estimators=100, max_depth=6, random_state=0)
    model.fit(X_train, y_train)
    return model, X_train, X_test[:60], y_test[:60]


def child(name: str) -> float:
    """Seconds of one workload's work (run in a fresh process)."""
    import numpy as np

    import robustscope as rs

    if name == "demo":
        from robustscope.report.demo_report import build_demo_report
        from robustscope.runs.demo import demo_space, run_demo, train_models

        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            results = run_demo(Path(tmp), quiet=True)
            data, X_train, X_test, _, y_test, _ = train_models()
            build_demo_report(results, X_test, y_test, demo_space(data, X_train, X_test),
                              Path(tmp), X_train=X_train)
            return time.perf_counter() - t0
    if name in ("blackbox", "trees"):
        model, X_train, X, y = _xgboost()
        space = rs.FeatureSpace.from_data(np.vstack([X_train, X]))
        target = model.predict_proba if name == "blackbox" else model
        kwargs = {"budget": 1000} if name == "blackbox" else {}
        t0 = time.perf_counter()
        rs.radius(target, X, y, threat="linf", space=space, **kwargs)
        return time.perf_counter() - t0
    if name == "mlp":
        import torch
        from sklearn.datasets import load_digits

        X, y = load_digits(return_X_y=True)
        X = X / 16.0
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                  torch.nn.Linear(128, 10))
        opt = torch.optim.Adam(net.parameters(), lr=1e-2)
        xt, yt = torch.as_tensor(X[:1500], dtype=torch.float32), torch.as_tensor(y[:1500])
        for _ in range(200):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(xt), yt).backward()
            opt.step()
        t0 = time.perf_counter()
        rs.radius(net, X[1500:1560], y[1500:1560], threat="linf",
                  space=rs.FeatureSpace.box((64,)))
        return time.perf_counter() - t0
    if name == "run":
        from robustscope.runs.runner import run_spec_file

        with tempfile.TemporaryDirectory() as tmp:
            spec = Path(tmp) / "spec.yaml"
            spec.write_text(RUN_SPEC.format(out=Path(tmp) / "out"))
            t0 = time.perf_counter()
            run_spec_file(spec, quiet=True)
            return time.perf_counter() - t0
    raise SystemExit(f"unknown workload {name}")


def time_child(name: str, pinned: bool) -> float:
    env = {k: v for k, v in os.environ.items() if k not in PINS}
    if pinned:
        env.update({k: "1" for k in PINS})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"),
                                                      os.environ.get("PYTHONPATH")]))
    out = subprocess.run([sys.executable, __file__, "--child", name], env=env, cwd=ROOT,
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{name}: child failed\n{out.stderr[-3000:]}")
    return float(json.loads(out.stdout.strip().splitlines()[-1])["seconds"])


class Spinner:
    """A process that keeps one core busy for as long as the block lasts."""

    def __enter__(self) -> Spinner:
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        time.sleep(0.5)
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", default=",".join(WORKLOADS))
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps({"seconds": child(args.child)}))
        return
    names = [n.strip() for n in args.only.split(",")]
    rows, verdicts = [], []
    for name in names:
        times: dict[tuple[bool, bool], list[float]] = {}
        for busy in (False, True):
            # one core kept busy by another process, or nothing else running
            for _ in range(args.repeats):
                for pinned in (False, True):  # alternate, so load drifts hit both alike
                    if busy:
                        with Spinner():
                            t = time_child(name, pinned)
                    else:
                        t = time_child(name, pinned)
                    times.setdefault((busy, pinned), []).append(t)
                    print(f"# {name} busy={busy} pinned={pinned}: {t:.2f} s", file=sys.stderr,
                          flush=True)
        med = {k: statistics.median(v) for k, v in times.items()}
        idle_ratio = med[(False, False)] / med[(False, True)]
        busy_ratio = med[(True, False)] / med[(True, True)]
        rows.append(f"| {WORKLOADS[name]} | {med[(False, False)]:.2f} | {med[(False, True)]:.2f} "
                    f"| {idle_ratio:.2f} | {med[(True, False)]:.2f} | {med[(True, True)]:.2f} "
                    f"| {busy_ratio:.2f} |")
        verdicts.append(
            f"- {name}: busy neighbour {busy_ratio:.2f}x pinned (target <= 1.5: "
            f"{'met' if busy_ratio <= 1.5 else 'MISSED'}); idle {idle_ratio:.2f}x pinned "
            f"(target <= 1, up to noise: {'met' if idle_ratio <= 1.1 else 'MISSED'}).")
    print("| workload | idle, default (s) | idle, pinned (s) | ratio | busy, default (s) "
          "| busy, pinned (s) | ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    print()
    print(f"Medians of {args.repeats} runs; *pinned* = `OMP_NUM_THREADS=1` (and MKL, "
          "OpenBLAS); *busy* = another process spins on one core meanwhile.")
    print()
    print("\n".join(verdicts))


if __name__ == "__main__":
    main()
