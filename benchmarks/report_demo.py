"""Time the demo's whole workflow (train, radii of both models, report) and the report alone.

    PYTHONPATH=src python benchmarks/report_demo.py --repeats 3

Prints the median and every run's seconds for: training + radius search (``run_demo``), the
report (``build_demo_report``: scores with 1000 bootstrap resamples, IsolationForest, Proxy-A
distance, 11 figures, HTML), and the two together.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

from robustscope.report.demo_report import build_demo_report
from robustscope.runs.demo import demo_space, run_demo, train_models


def once(out: Path) -> tuple[float, float, int]:
    t0 = time.perf_counter()
    results = run_demo(out, quiet=True)
    t1 = time.perf_counter()
    data, X_train, X_test, _, y_test, _ = train_models()
    space = demo_space(data, X_train, X_test)
    t2 = time.perf_counter()
    path = build_demo_report(results, X_test, y_test, space, out, X_train=X_train)
    t3 = time.perf_counter()
    return t1 - t0, t3 - t2, path.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    demo, report, size = [], [], 0
    for _ in range(args.repeats):
        # the demo's own messages go to stderr: stdout carries the markdown result only
        with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(sys.stderr):
            d, r, size = once(Path(tmp))
        demo.append(d)
        report.append(r)
    total = [a + b for a, b in zip(demo, report, strict=True)]
    print("| step | median | runs |\n| --- | --- | --- |")
    for name, values in (("demo (training + radii)", demo), ("report", report),
                         ("demo + report", total)):
        print(f"| {name} | {statistics.median(values):.1f} s | "
              f"{', '.join(f'{v:.1f}' for v in values)} |")
    print(f"\nThe report file is {size / 1e3:.0f} kB.")

if __name__ == "__main__":
    main()
