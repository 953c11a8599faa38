"""Time the results store on SQLite and on PostgreSQL.

For each backend, as medians over repeats: recording the radii of 10,000 inputs into a new
run (one ``record_radii`` call, one transaction), reading them back (``radii``, a DataFrame),
and a small call round trip (``start_run`` + ``finish_run``, two transactions). Every read is
checked against what was written.

SQLite is a file in a temporary folder (durable: the driver's default synchronous mode).
PostgreSQL is the server at ``--url``, or else a throwaway local cluster from Debian's
``postgresql`` package, started durable (fsync and synchronous commit on) and reached over
TCP on 127.0.0.1.

    PYTHONPATH=src python benchmarks/store_backends.py [--repeats 7]
        [--n 10000] [--url postgresql://user:password@host:port/database]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import numpy as np

from robustscope.core.result import RadiusResult
from robustscope.runs.store import open_store


def make_result(n: int, seed: int = 0) -> RadiusResult:
    """A radius result of ``n`` inputs with every kind of value the store must keep
    (censored = inf, misclassified = 0, NaN losses)."""
    rng = np.random.default_rng(seed)
    radius = rng.uniform(0.01, 0.5, n)
    status = rng.choice(["attacked", "exact", "censored", "misclassified"], n, p=[.7, .1, .1, .1])
    radius[status == "censored"] = np.inf
    radius[status == "misclassified"] = 0.0
    loss = rng.exponential(size=n)
    loss[rng.random(n) < 0.05] = np.nan
    return RadiusResult(
        radius=radius, lower_bound=radius / 2, status=status, x_adv=np.zeros((n, 1)),
        label=rng.integers(0, 10, n), prediction=rng.integers(0, 10, n),
        adv_prediction=rng.integers(0, 10, n), proba=np.zeros((n, 10)),
        proba_adv=np.zeros((n, 10)), loss=loss, forward_queries=rng.integers(1, 1000, n),
        backward_queries=rng.integers(0, 500, n), seconds=rng.uniform(0, 0.1, n),
        threat="linf", solver="pgd", max_radius=1.0, sample=np.arange(n))


def time_backend(location: str, result: RadiusResult, repeats: int) -> dict[str, float]:
    """Median seconds of each operation on the store at ``location``."""
    write, read, small = [], [], []
    with open_store(location) as store:
        for _ in range(repeats):
            run = store.start_run("bench", threat="linf", solver="pgd")
            t = time.perf_counter()
            store.record_radii(run, result)
            write.append(time.perf_counter() - t)
            t = time.perf_counter()
            df = store.radii(run)
            read.append(time.perf_counter() - t)
            np.testing.assert_array_equal(df["radius"].to_numpy(), result.radius)
            np.testing.assert_array_equal(df["status"].to_numpy(), result.status)
            t = time.perf_counter()
            store.finish_run(store.start_run("bench", kind="accuracy"))
            small.append(time.perf_counter() - t)
    return {"write": statistics.median(write), "read": statistics.median(read),
            "small": statistics.median(small)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--n", type=int, default=10_000, help="inputs per run")
    ap.add_argument("--url", help="PostgreSQL server to use instead of a throwaway cluster")
    args = ap.parse_args()
    result = make_result(args.n)
    rows = []
    with ExitStack() as stack:
        folder = stack.enter_context(tempfile.TemporaryDirectory())
        rows.append(("SQLite (file)", time_backend(str(Path(folder) / "r.sqlite"), result,
                                                   args.repeats)))
        url = args.url
        if url is None:
            sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
            from pgcluster import ThrowawayCluster

            url = stack.enter_context(ThrowawayCluster(durable=True)).url
        rows.append(("PostgreSQL (TCP, localhost)", time_backend(url, result, args.repeats)))
    print(f"{args.n:,} inputs per run, medians of {args.repeats} runs.\n")
    print("| backend | record_radii (ms) | inputs/s written | radii() read (ms) "
          "| inputs/s read | start_run + finish_run (ms) |")
    print("|---|---|---|---|---|---|")
    for name, t in rows:
        print(f"| {name} | {1e3 * t['write']:.1f} | {args.n / t['write']:,.0f} | "
              f"{1e3 * t['read']:.1f} | {args.n / t['read']:,.0f} | {1e3 * t['small']:.2f} |")


if __name__ == "__main__":
    main()
