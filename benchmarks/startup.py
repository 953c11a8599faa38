"""Time the command line's start-up: ``robustscope --help`` and ``robustscope scores`` on a
small radius table.

Each command runs as a subprocess of the ``robustscope`` console script of the current
environment (the one next to this Python, else the one on ``PATH``), with this process's
environment (so ``PYTHONPATH=src`` times the source tree), once to warm the file cache and
then ``--repeats`` times; the table gives the median, fastest and slowest wall-clock seconds,
and the median CPU seconds (user + system) of the process, which other load on the machine
changes less than the wall clock.
``python -c pass`` is the interpreter's own start-up, the floor under every command. The last
column lists the heavy libraries each command imports (read from ``sys.modules`` after the
command ran in a fresh interpreter). No thread counts are pinned: this is the start-up a user
sees.

    PYTHONPATH=src python benchmarks/startup.py [--repeats 7] [--rows 40]
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: Libraries a command should import only when it needs them (issue 13).
HEAVY = ("torch", "matplotlib", "ray", "sqlalchemy", "sklearn", "scipy", "pandas", "numpy")

#: Runs a command line in this interpreter and prints the heavy libraries it left imported.
_PROBE = """
import sys
from robustscope.cli.app import app
try:
    app(sys.argv[1:], prog_name="robustscope")
except SystemExit as exc:
    if exc.code:
        raise
heavy = {heavy!r}
print("heavy:", *(m for m in heavy if m in sys.modules))
"""


def console_script() -> str:
    """The ``robustscope`` console script of the current environment."""
    beside = Path(sys.executable).parent / "robustscope"
    if beside.is_file():
        return str(beside)
    found = shutil.which("robustscope")
    if found is None:
        sys.exit("no robustscope console script next to this Python or on PATH; install the "
                 "package (pip install -e .)")
    return found


def write_radius_table(path: Path, rows: int) -> None:
    """A small radius table in the ``RadiusResult.to_csv`` layout: exact, attacked,
    censored and misclassified inputs, radius about half the margin of the loss."""
    with open(path, "w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["sample", "label", "prediction", "radius", "lower_bound", "status", "loss",
                      "queries", "seconds"])
        for i in range(rows):
            margin = 0.05 + 6.0 * ((i * 7919) % rows) / rows
            loss, radius, status = math.log1p(math.exp(-margin)), margin / 2, "attacked"
            if i % 5 == 0:
                status = "exact"
            if i < 2:
                radius, status = math.inf, "censored"
            elif i >= rows - 3:
                radius, loss, status = 0.0, 1.2, "misclassified"
            out.writerow([i, i % 2, i % 2, radius, radius / 2, status, loss, 10 * (i + 1),
                          0.01])


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_command(argv: list[str], repeats: int) -> tuple[list[float], list[float]]:
    """Wall-clock and CPU seconds of ``repeats`` runs of ``argv`` (after one untimed run)."""
    wall, cpu = [], []
    for k in range(repeats + 1):
        c, t = _children_cpu(), time.perf_counter()
        done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
        elapsed, used = time.perf_counter() - t, _children_cpu() - c
        if done.returncode != 0:
            sys.exit(f"{' '.join(argv)} exited with {done.returncode}: {done.stderr.strip()}")
        if k:
            wall.append(elapsed)
            cpu.append(used)
    return wall, cpu


def heavy_imports(args: list[str]) -> str:
    """The heavy libraries ``robustscope ARGS`` imports, space-separated."""
    done = subprocess.run([sys.executable, "-c", _PROBE.format(heavy=HEAVY), *args],
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"robustscope {' '.join(args)} failed: {done.stderr.strip()}")
    line = [line for line in done.stdout.splitlines() if line.startswith("heavy:")][-1]
    return line.removeprefix("heavy:").strip()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--rows", type=int, default=40, help="rows of the radius table")
    args = ap.parse_args()
    script = console_script()
    with tempfile.TemporaryDirectory() as folder:
        table = Path(folder) / "radii.csv"
        write_radius_table(table, args.rows)
        cases = [("`python -c pass` (interpreter only)", [sys.executable, "-c", "pass"], None),
                 ("`robustscope --help`", [script, "--help"], ["--help"]),
                 (f"`robustscope scores radii.csv` ({args.rows} rows)",
                  [script, "scores", str(table)], ["scores", str(table)]),
                 (f"`robustscope scores radii.csv --json` ({args.rows} rows)",
                  [script, "scores", str(table), "--json"], ["scores", str(table), "--json"])]
        rows = []
        for label, argv, probe in cases:
            print(f"timing {label} ...", file=sys.stderr, flush=True)
            wall, cpu = time_command(argv, args.repeats)
            imported = "-" if probe is None else (heavy_imports(probe) or "none")
            rows.append((label, statistics.median(wall), min(wall), max(wall),
                         statistics.median(cpu), imported))
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"Seconds of {args.repeats} runs each (after one untimed run) of the "
          f"`{Path(script).name}` console script; {os.cpu_count()} CPUs, load average "
          f"{load} at the end.\n")
    print(f"| command | median (s) | fastest (s) | slowest (s) | median CPU (s) "
          f"| heavy libraries imported (of {', '.join(HEAVY)}) |")
    print("|---|---|---|---|---|---|")
    for label, med, lo, hi, cpu, imported in rows:
        print(f"| {label} | {med:.3f} | {lo:.3f} | {hi:.3f} | {cpu:.3f} | {imported} |")


if __name__ == "__main__":
    main()
