"""Scale-out and memory of sharded runs (``robustscope run`` with the local backend).

1. Throughput with 1 and 2 workers and the parallel efficiency (speed-up / workers), on
   breast-cancer-like synthetic data (30 features, 2 classes): a logistic regression
   (exact radii) and a gradient-boosted black box (gradient-free cascade). The shard phase
   is timed from the run plan's creation to the last shard's journal line, so model loading
   and the report are left out; the whole run's wall time is given too.
2. Memory against the number of inputs, for an exact linear model (1 worker, in-process) on
   an uncompressed, memory-mapped NPZ, with and without the intrinsic scores (200 bootstrap
   resamples), and on a Parquet file (streamed in batches into the run's memory-mapped
   cache): the run process's peak RSS (ru_maxrss: it counts file-backed pages
   of memory maps, which the kernel can drop), its peak *anonymous* memory (RssAnon, sampled
   every 5 ms) and whether it completes inside a memory cgroup capped at
   ``--memory-budget`` MiB, which charges page cache too and kills the process if it needs
   more (where this machine lets the benchmark create one). The floor is a process that
   only imports robustscope and loads the model.
3. The cost of one shard: median search seconds per shard and per input, and the median
   time to write a shard file, from the shard files.

Every run is a child process (``run_spec_file``) so that its peak memory is its own.

    PYTHONPATH=src python benchmarks/scale.py [--repeats 3]
        [--memory-sizes 100000 1000000] [--memory-budget 512]
        [--memory-formats npz,parquet] [--skip-memory]
        [--skip-throughput]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SRC = str(Path(__file__).resolve().parents[1] / "src")
if SRC not in sys.path:  # run from a checkout without installing robustscope
    sys.path.insert(0, SRC)

SPEC = """\
seed: 0
model: {{path: {model}, trust_pickle: true}}
data: {{path: {data}, label_column: label}}
features: {{default: {{lower: -6.0, upper: 6.0}}}}
threats: [{{name: linf}}]
solver: {{budget: {budget}}}
scores: {{n_bootstrap: {n_bootstrap}, ood: false, pad: false, intrinsic: {intrinsic}}}
outputs: {{dir: {out}, adversarial: true}}
execution: {{shard_size: {shard}, workers: {workers}}}
"""

CHILD = """
import json, resource, sys, threading, time

def anon_mib():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("RssAnon"):
                return int(line.split()[1]) / 1024
    return float("nan")

peak = [0.0]
def sample():
    while True:
        peak[0] = max(peak[0], anon_mib())
        time.sleep(0.005)
threading.Thread(target=sample, daemon=True).start()
t0 = time.time()
from robustscope.runs.runner import run_spec_file
out = run_spec_file(sys.argv[1], quiet=True)
peak[0] = max(peak[0], anon_mib())
print(json.dumps({"wall": time.time() - t0, "peak_anon_mb": peak[0],
                  "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

FLOOR = """
import json, pickle, resource, sys
import robustscope.runs.runner, robustscope.search.engine
from robustscope.models.loaders import load_model
load_model(sys.argv[1], trust_pickle=True)
with open("/proc/self/status") as fh:
    anon = next(int(x.split()[1]) / 1024 for x in fh if x.startswith("RssAnon"))
print(json.dumps({"maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "anon_mb": anon}))
"""


class MemoryCap:
    """A memory cgroup (v1 ``memory.limit_in_bytes`` or v2 ``memory.max``) below this
    process's own, holding the child processes started with :meth:`enter` as their
    ``preexec_fn``; the kernel charges them anonymous memory *and* page cache, reclaims the
    cache under the cap and kills them if anonymous memory alone exceeds it. ``None`` from
    :meth:`create` where no writable cgroup exists (the benchmark then says the cap was not
    enforced)."""

    def __init__(self, path: Path, v2: bool) -> None:
        self.path, self.v2 = path, v2

    @classmethod
    def create(cls, limit_mib: int) -> MemoryCap | None:
        try:
            lines = Path("/proc/self/cgroup").read_text().splitlines()
        except OSError:
            return None
        for line in lines:
            _, controllers, rel = line.split(":", 2)
            v2 = controllers == ""
            if not v2 and "memory" not in controllers.split(","):
                continue
            root = Path("/sys/fs/cgroup") if v2 else Path("/sys/fs/cgroup/memory")
            path = root / rel.lstrip("/") / f"robustscope-bench-{os.getpid()}"
            try:
                path.mkdir(exist_ok=True)
                limit = str(limit_mib * 2**20)
                (path / ("memory.max" if v2 else "memory.limit_in_bytes")).write_text(limit)
            except OSError:
                continue
            return cls(path, v2)
        return None

    def enter(self) -> None:
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def failures(self) -> int:
        """Times the cgroup hit its cap (v1 ``memory.failcnt``; v2 ``memory.events`` max)."""
        if self.v2:
            events = dict(x.split() for x in (self.path / "memory.events").read_text()
                          .splitlines())
            return int(events.get("max", 0))
        return int((self.path / "memory.failcnt").read_text())

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.path.rmdir()


def make_data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Breast-cancer-like: 30 standardised features, 2 classes, 10 informative directions."""
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=n, n_features=30, n_informative=10, n_redundant=10,
                               class_sep=1.0, random_state=seed)
    return np.clip(X, -6, 6).astype(np.float64), y.astype(np.int64)


def write_model(path: Path, kind: str) -> None:
    from sklearn.ensemble import GradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression

    X, y = make_data(2000, seed=1)
    model = (LogisticRegression(max_iter=1000) if kind == "logreg"
             else GradientBoostingClassifier(n_estimators=50, max_depth=3, random_state=0))
    path.write_bytes(pickle.dumps(model.fit(X, y)))


def child(code: str, *args: str, cap: MemoryCap | None = None) -> dict:
    env = {**os.environ, "PYTHONPATH": SRC}
    proc = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                          text=True, check=False, preexec_fn=None if cap is None else cap.enter)
    if proc.returncode != 0:
        killed = " (killed: over the memory cap)" if proc.returncode in (-9, 137) else ""
        raise RuntimeError(f"exit {proc.returncode}{killed}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(tmp: Path, name: str, model: Path, data: Path, workers: int, shard: int,
        budget: int, intrinsic: bool = True, cap: MemoryCap | None = None,
        n_bootstrap: int = 0) -> dict:
    out = tmp / f"out-{name}"
    spec = tmp / f"{name}.yaml"
    spec.write_text(SPEC.format(model=model, data=data, out=out, workers=workers, shard=shard,
                                budget=budget, intrinsic=str(intrinsic).lower(),
                                n_bootstrap=n_bootstrap))
    res = child(CHILD, str(spec), cap=cap)
    plan = json.loads((out / "plan.json").read_text())
    lines = [json.loads(x) for x in (out / "journal.jsonl").read_text().splitlines()]
    res["shard_phase"] = max(x["time"] for x in lines) - plan["created"]
    # steady state: inputs finished after the first shard, over the time after it (leaves
    # out starting the workers and loading the model in each)
    lines.sort(key=lambda x: x["time"])
    later = sum(x["rows"][1] - x["rows"][0] for x in lines[1:])
    res["steady"] = later / max(lines[-1]["time"] - lines[0]["time"], 1e-9)
    res["out"] = out
    return res


def shard_costs(out: Path) -> dict:
    """Median search seconds per shard, and the median times to write one shard file again
    and to append one journal line (what the driver does per finished shard)."""
    from robustscope.runs import journal
    from robustscope.runs.shards import Shard, ShardOutput, read_shard, write_shard

    files = sorted((out / "shards").rglob("0*.npz"))
    secs, writes, sizes, lines = [], [], [], []
    for path in files:
        res, sec = read_shard(path)
        secs.append(sec)
        sizes.append(len(res))
        shard = Shard("t", 0, 0, 0, len(res), 0)
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            write_shard(Path(d), ShardOutput(shard, res, sec))
            writes.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            journal.record(Path(d), shard, "done", failed_rows=0)
            lines.append(time.perf_counter() - t0)
    return {"shards": len(files), "median_shard_s": statistics.median(secs),
            "median_per_input_ms": 1000 * statistics.median(
                [s / n for s, n in zip(secs, sizes, strict=True)]),
            "median_write_ms": 1000 * statistics.median(writes),
            "median_journal_ms": 1000 * statistics.median(lines),
            "shard_file_kb": statistics.median(p.stat().st_size for p in files) / 1024}


def throughput(tmp: Path, repeats: int) -> None:
    cases = [("logistic regression, exact", "logreg", 200_000, 8192, 1000),
             ("GBM black box, 500 queries/input", "gbm", 240, 20, 500)]
    print("| model | inputs | shard size | workers | shard phase s (median) | inputs/s | "
          "steady inputs/s | speed-up (steady) | efficiency (steady) | whole run s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    costs, efficiency = {}, {}
    for label, kind, n, shard, budget in cases:
        model = tmp / f"{kind}.pkl"
        write_model(model, kind)
        X, y = make_data(n, seed=2)
        data = tmp / f"{kind}-{n}.npz"
        np.savez(data, X=X, y=y)
        base = None
        for workers in (1, 2):
            runs = [run(tmp, f"{kind}-w{workers}-{r}", model, data, workers, shard, budget)
                    for r in range(repeats)]
            phase = statistics.median(r["shard_phase"] for r in runs)
            steady = statistics.median(r["steady"] for r in runs)
            wall = statistics.median(r["wall"] for r in runs)
            base = base or steady
            speed = steady / base
            efficiency[label] = speed / workers
            print(f"| {label} | {n:,} | {shard} | {workers} | {phase:.2f} | {n / phase:,.0f} | "
                  f"{steady:,.0f} | {speed:.2f} | {speed / workers:.0%} | {wall:.1f} |",
                  flush=True)
        costs[label] = (shard, shard_costs(runs[-1]["out"]))
    print("\nCost of a shard (from the last run's shard files):\n")
    print("| model | shard size | shards | search per shard (median) | per input | "
          "writing one shard file | one journal line | file size |")
    print("|---|---|---|---|---|---|---|---|")
    for label, (shard, c) in costs.items():
        print(f"| {label} | {shard:,} | {c['shards']} | {c['median_shard_s']:.3f} s | "
              f"{c['median_per_input_ms']:.3f} ms | {c['median_write_ms']:.1f} ms | "
              f"{c['median_journal_ms']:.1f} ms | {c['shard_file_kb']:,.0f} KiB |")
    print("\nPlan for a multi-node cluster, from these costs (details in docs/scaling.md): "
          "size shards for about 30 s of search each, so that the per-shard overhead "
          "(scheduling, sending the result, one file write, one journal line) and each "
          "worker's start-up vanish:\n")
    for label, (_, c) in costs.items():
        size = 30 / max(c["median_per_input_ms"] / 1000, 1e-9)
        driver = (c["median_write_ms"] + c["median_journal_ms"]) / 1000
        print(f"- {label}: about {size:,.0f} inputs per shard "
              f"({c['median_per_input_ms']:.3f} ms per input); the driver spends about "
              f"{1000 * driver:.1f} ms writing and journalling a shard of the size measured "
              f"here, so one driver keeps about {30 / driver:,.0f} such workers busy (a "
              "results store adds one transaction per shard: see its section).")
    print("\nParallel efficiency with 2 workers (steady state): " + "; ".join(
        f"{label} {e:.0%}" for label, e in efficiency.items()) + ". The whole shard phase "
        "also pays for starting the worker processes (each imports torch and loads the "
        "model), which dominates runs of a few seconds like these.")


def write_data(path: Path, X: np.ndarray, y: np.ndarray) -> None:
    """An uncompressed NPZ (memory-mapped by the run) or a Parquet file (streamed in batches
    into the run's memory-mapped cache), with the labels in column ``label``."""
    if path.suffix == ".npz":
        np.savez(path, X=X, y=y)
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = {f"f{j}": X[:, j] for j in range(X.shape[1])}
    pq.write_table(pa.table({**columns, "label": y}), path, row_group_size=65536)


def memory(tmp: Path, sizes: list[int], budget_mib: int, formats: list[str]) -> None:
    model = tmp / "logreg.pkl"
    write_model(model, "logreg")
    floor = child(FLOOR, str(model))
    print(f"\nimport floor (robustscope + model loaded): peak RSS {floor['maxrss_mb']:.0f} MiB, "
          f"anonymous {floor['anon_mb']:.0f} MiB\n")
    print(f"| inputs | data | scores | data file MiB | peak RSS MiB | peak anonymous MiB | "
          f"anonymous above floor MiB | under a {budget_mib} MiB cgroup cap | shard phase s | "
          f"whole run s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    done: dict[tuple[int, str, bool], bool] = {}
    cases = [("npz", False), ("npz", True), ("parquet", False)]
    for n in sizes:
        X, y = make_data(n, seed=3)
        files = {}
        for fmt in formats:
            files[fmt] = tmp / f"mem-{n}.{fmt}"
            write_data(files[fmt], X, y)
        del X, y
        for fmt, intrinsic in cases:
            if fmt not in files:
                continue
            data = files[fmt]
            scores = "R_nu, 200 bootstrap" if intrinsic else "curves"
            cap = MemoryCap.create(budget_mib)
            try:
                r = run(tmp, f"mem-{n}-{fmt}-{intrinsic}", model, data, 1, 8192, 1000,
                        intrinsic=intrinsic, cap=cap, n_bootstrap=200 if intrinsic else 0)
                verdict = ("not enforced (no writable memory cgroup)" if cap is None else
                           f"completed ({cap.failures()} reclaims at the cap)")
            except RuntimeError as exc:
                print(f"| {n:,} | {fmt} | {scores} | | | | | FAILED: "
                      f"{str(exc).splitlines()[0][:80]} | | |", flush=True)
                continue
            finally:
                if cap is not None:
                    cap.remove()
            print(f"| {n:,} | {fmt} | {scores} | {data.stat().st_size / 2**20:.0f} | "
                  f"{r['maxrss_mb']:.0f} | {r['peak_anon_mb']:.0f} | "
                  f"{r['peak_anon_mb'] - floor['anon_mb']:.0f} | {verdict} | "
                  f"{r['shard_phase']:.1f} | {r['wall']:.1f} |", flush=True)
            shutil.rmtree(r["out"], ignore_errors=True)
            done[(n, fmt, intrinsic)] = cap is not None
        for f in files.values():
            f.unlink()
    top = max(sizes)
    wanted = [(top, fmt, i) for fmt, i in cases if fmt in formats]
    print(f"\nBudget: {top:,} inputs within {budget_mib} MiB (cgroup cap, page cache "
          f"included), for " + ", ".join(f"{f}{' + scores' if i else ''}" for _, f, i in wanted)
          + ": " + ("met" if all(done.get(k) for k in wanted)
                    else "not verified here (no writable memory cgroup, or a run failed; see "
                         "the table)") + ".")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--memory-sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--memory-budget", type=int, default=512,
                    help="MiB: the cgroup cap the memory runs must complete under")
    ap.add_argument("--memory-formats", default="npz,parquet",
                    help="data files for the memory runs: npz (memory-mapped), parquet "
                         "(streamed into the run's cache)")
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--skip-throughput", action="store_true")
    args = ap.parse_args()
    print(f"Cores available: {len(os.sched_getaffinity(0))}; load average "
          f"{os.getloadavg()[0]:.1f} at the start; medians of {args.repeats} runs.\n")
    with tempfile.TemporaryDirectory() as d:
        if not args.skip_throughput:
            throughput(Path(d), args.repeats)
        if not args.skip_memory:
            memory(Path(d), args.memory_sizes, args.memory_budget,
                   args.memory_formats.split(","))


if __name__ == "__main__":
    main()
