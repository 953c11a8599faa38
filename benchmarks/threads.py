"""Thread use of a search (issue 13): before and after robustscope sets its own threads.

1. Small batches. The black-box cascade on an XGBoost ``predict_proba`` (XGBClassifier, 100
   trees of depth 6, breast-cancer; the bound method is passed as a plain callable, so the
   search sees a black box) and the same XGBClassifier passed itself (wrapped: the exact
   tree MILP, whose checks call ``predict_proba`` one row at a time), on ``--n`` test inputs
   at a budget of ``--budget`` queries per input. *Before* is ``threads=None`` (robustscope
   leaves every thread setting alone: what it did before this change), *after* the default
   ``threads="auto"``. Three conditions: the default environment (no ``OMP_NUM_THREADS``),
   the same with a busy neighbour (a process spinning one core, started and stopped here),
   and pinned (``OMP_NUM_THREADS=1``) for comparison.
2. Large batches, where threads pay, to show the policy keeps them: the exact linear radius
   of 10^5 rows of 64 features in one batch, a tiny CNN's forward pass at batch 512 on
   3x32x32 images (``Classifier.logits`` inside the search's thread scope) and, for
   contrast, the same linear radius at the default ``batch_size=512``; each under
   ``threads=None`` (the caller's settings: all cores), ``"auto"`` and ``1``, without and
   with the busy neighbour.

Every measurement of part 1 is a child process (the thread pools are set when a library
loads, and ``OMP_NUM_THREADS`` only counts then), run interleaved: repeat after repeat, each
case and mode in turn; medians of ``--repeats`` runs. Part 2 runs in one child process per
condition, its modes interleaved, medians of ``--large-repeats`` runs. The load average is
printed with every condition: this machine may be shared. Markdown on stdout, progress on
stderr.

    PYTHONPATH=src python benchmarks/threads.py [--repeats 3] [--large-repeats 5]
        [--n 60] [--budget 1000] [--skip-small] [--skip-large]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")
if SRC not in sys.path:  # run from a checkout without installing robustscope
    sys.path.insert(0, SRC)

#: Environment variables that pin thread pools; the default environment has none of them.
PINS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
MODES = {"before": None, "after": "auto"}
SMALL_CASES = {"blackbox": "XGBoost predict_proba, black-box cascade",
               "wrapped": "XGBClassifier itself (exact tree MILP)"}
CONDITIONS = {"idle": "default environment", "busy": "default, busy neighbour",
              "pinned": "OMP_NUM_THREADS=1"}
LARGE_MODES = {"caller": None, "auto": "auto", "one": 1}
LARGE_CASES = {"linear-1e5": "exact linear radius, 10^5 x 64, one batch",
               "cnn-512": "tiny CNN forward, batch 512 of 3x32x32",
               "linear-512": "exact linear radius, 10^5 x 64, batch_size 512"}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- child processes --------------------------------------------------------------------------
def child_small(case: str, mode: str | None, n: int, budget: int) -> dict:
    import numpy as np
    import xgboost
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split

    import robustscope as rs

    X, y = load_breast_cancer(return_X_y=True)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.3, random_state=0)
    model = xgboost.XGBClassifier(n_estimators=100, max_depth=6, random_state=0).fit(X_tr, y_tr)
    target = model.predict_proba if case == "blackbox" else model
    rs.radius(target, X_te[:2], y_te[:2], budget=50, threads=mode)  # warm-up: lazy imports
    t0 = time.perf_counter()
    res = rs.radius(target, X_te[:n], y_te[:n], budget=budget, threads=mode)
    seconds = time.perf_counter() - t0
    digest = hashlib.sha1(np.round(res.radius, 12).tobytes()).hexdigest()[:10]
    return {"seconds": seconds, "radii": digest, "median_radius": float(np.median(res.radius))}


class TinyCNN:
    """conv 3->16, conv 16->32 (stride 2), global average pool, linear 32->10."""

    @staticmethod
    def make():
        import torch

        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))


def child_large(repeats: int) -> dict:
    import numpy as np
    import torch

    import robustscope as rs
    from robustscope.search.threads import limited_threads

    rng = np.random.default_rng(0)
    X = rng.normal(size=(100_000, 64))
    lin = rs.wrap_model((rng.normal(size=(2, 64)), np.zeros(2)))
    y = lin.predict(torch.as_tensor(X)).numpy()
    space = rs.FeatureSpace.from_data(X)
    cnn = rs.wrap_model(TinyCNN.make(), n_classes=10, input_shape=(3, 32, 32))
    images = torch.rand(512, 3, 32, 32, generator=torch.Generator().manual_seed(0))

    def run(case: str, mode) -> float:
        t0 = time.perf_counter()
        if case == "linear-1e5":
            rs.radius(lin, X, y, space=space, batch_size=len(X), threads=mode)
        elif case == "linear-512":
            rs.radius(lin, X, y, space=space, threads=mode)
        else:
            with limited_threads(mode, images.numel()), torch.no_grad():
                cnn.logits(images)
        return time.perf_counter() - t0

    for case in LARGE_CASES:  # warm-up
        for mode in LARGE_MODES.values():
            if case != "linear-512":
                run(case, mode)
    times: dict = {case: {m: [] for m in LARGE_MODES} for case in LARGE_CASES}
    for r in range(repeats):
        for case in LARGE_CASES:
            # the default batch size at the caller's settings is slow; 3 repeats are enough
            if case == "linear-512" and r >= 3:
                continue
            for name, mode in LARGE_MODES.items():
                times[case][name].append(run(case, mode))
        log(f"  large: repeat {r + 1}/{repeats} done")
    return {"times": times, "torch_threads": torch.get_num_threads()}


# -- the parent ---------------------------------------------------------------------------------
def child_env(condition: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in PINS}
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    if condition == "pinned":
        env["OMP_NUM_THREADS"] = "1"
    return env


def run_child(condition: str, payload: dict) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", json.dumps(payload)],
                         env=child_env(condition), capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"child {payload} failed:\n{out.stderr[-3000:]}")
    if out.stderr.strip():
        sys.stderr.write(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def neighbour(busy: bool):
    """A process spinning one core while the block runs (none when ``busy`` is false)."""
    if not busy:
        yield
        return
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        yield
    finally:
        spinner.kill()
        spinner.wait(timeout=30)


def load() -> str:
    return "/".join(f"{v:.1f}" for v in os.getloadavg())


def fmt(seconds: float) -> str:
    return f"{seconds:.3f}" if seconds < 1 else f"{seconds:.2f}" if seconds < 10 else \
        f"{seconds:.1f}"


def measure_small(args) -> list[str]:
    rows = []
    for condition, label in CONDITIONS.items():
        times = {(c, m): [] for c in SMALL_CASES for m in MODES}
        digests = {c: set() for c in SMALL_CASES}
        before_load = load()
        with neighbour(condition == "busy"):
            for r in range(args.repeats):
                for case in SMALL_CASES:
                    for mode_name, mode in MODES.items():
                        out = run_child(condition, {"kind": "small", "case": case, "mode": mode,
                                                    "n": args.n, "budget": args.budget})
                        times[case, mode_name].append(out["seconds"])
                        digests[case].add(out["radii"])
                        log(f"{condition} r{r + 1} {case} {mode_name}: {out['seconds']:.2f} s "
                            f"(load {load()})")
        after_load = load()
        for case, case_label in SMALL_CASES.items():
            before = statistics.median(times[case, "before"])
            after = statistics.median(times[case, "after"])
            rows.append(f"| {case_label} | {label} | {fmt(before)} | {fmt(after)} | "
                        f"{before / after:.1f}x | {'yes' if len(digests[case]) == 1 else 'NO'} "
                        f"| {before_load} → {after_load} |")
    head = [f"Search seconds on {args.n} test inputs at a budget of {args.budget} queries "
            f"per input, medians of {args.repeats} runs, each in its own process. *before*: "
            "`threads=None` (nothing set, as before this change); *after*: the default "
            "`threads=\"auto\"`. *same radii*: every run of both modes gave identical radii.",
            "",
            "| model | environment | before (s) | after (s) | speed-up | same radii "
            "| load average (1/5/15 min) |",
            "| --- | --- | ---: | ---: | ---: | --- | --- |"]
    return head + rows


def measure_large(args) -> list[str]:
    rows = []
    for condition in ("idle", "busy"):
        before_load = load()
        with neighbour(condition == "busy"):
            out = run_child(condition, {"kind": "large", "repeats": args.large_repeats})
        after_load = load()
        for case, label in LARGE_CASES.items():
            med = {m: statistics.median(out["times"][case][m]) for m in LARGE_MODES}
            runs = len(out["times"][case]["caller"])
            rows.append(f"| {label} | {CONDITIONS[condition]} | {runs} | "
                        f"{fmt(med['caller'])} | {fmt(med['auto'])} | {fmt(med['one'])} | "
                        f"{med['auto'] / med['caller']:.2f} | {before_load} → {after_load} |")
    head = ["Large batches: seconds, medians of the runs shown (modes interleaved in one "
            "process per environment). *caller*: `threads=None`, torch and the native pools at "
            "their defaults (all cores); *auto*: the default policy; *1*: `threads=1`. "
            "*auto / caller* below 1 is a gain.",
            "",
            "| work | environment | runs | caller (s) | auto (s) | 1 thread (s) | auto / caller "
            "| load average (1/5/15 min) |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    return head + rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--large-repeats", type=int, default=5)
    parser.add_argument("--n", type=int, default=60)
    parser.add_argument("--budget", type=int, default=1000)
    parser.add_argument("--skip-small", action="store_true")
    parser.add_argument("--skip-large", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        payload = json.loads(args.child)
        if payload["kind"] == "small":
            out = child_small(payload["case"], payload["mode"], payload["n"], payload["budget"])
        else:
            out = child_large(payload["repeats"])
        print(json.dumps(out))
        return

    # a SIGTERM unwinds like an error: the busy neighbour is stopped in its finally block
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    import torch
    import xgboost

    from robustscope.search.threads import SMALL_WORK

    lines = [f"{os.cpu_count()} cores ({platform.machine()}), torch {torch.__version__}, "
             f"xgboost {xgboost.__version__}, Python {platform.python_version()}; "
             f"SMALL_WORK = {SMALL_WORK:,} elements (rows x features).", ""]
    if not args.skip_small:
        lines += measure_small(args) + [""]
    if not args.skip_large:
        lines += measure_large(args) + [""]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
