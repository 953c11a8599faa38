"""Time the MultiRobustBench leaderboard pipeline on the published data.

Measures, as medians over repeats: parsing defences.json (21 models), scoring all 21 models
(every metric, 181 points each), importing them into a SQLite store on disk, exporting them
back, and the largest deviation from the published leaderboard.csv (all 27 numeric columns).
Both files ship with the package (``robustscope/refdata``), read with importlib.resources.

    PYTHONPATH=src python benchmarks/multiattack_leaderboard.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import tempfile
import time
from contextlib import ExitStack
from importlib import resources
from pathlib import Path

from robustscope.runs.store import open_store
from robustscope.scores.accuracy_grid import read_accuracy_file
from robustscope.scores.multiattack import competitiveness, published_reference
from robustscope.threats.registry import RANKED_ATTACKS

REFDATA = resources.files("robustscope").joinpath("refdata")  # the published figures


def _timed(fn, repeats):
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    with ExitStack() as files:
        defences = files.enter_context(resources.as_file(REFDATA.joinpath("defences.json")))
        published = REFDATA.joinpath("leaderboard.csv").read_text(encoding="utf-8")
        _measure(args.repeats, defences, published)


def _measure(repeats: int, defences: Path, published: str) -> None:
    """Time each step on ``defences`` (accuracy JSON) and compare the scores with the text of
    the published leaderboard CSV; print the section's Markdown."""
    ref = published_reference()
    t_parse, models = _timed(lambda: read_accuracy_file(defences), repeats)
    t_score, reports = _timed(lambda: [
        competitiveness(m.grid, ref, trained_on=m.trained_on, missing="skip", model=m.name)
        for m in models], repeats)

    def import_export():
        with tempfile.TemporaryDirectory() as d, open_store(Path(d) / "r.sqlite") as store:
            t = time.perf_counter()
            store.import_accuracies(defences)
            t_imp = time.perf_counter() - t
            t = time.perf_counter()
            store.export_accuracies(Path(d) / "out.json")
            return t_imp, time.perf_counter() - t

    pairs = [import_export() for _ in range(repeats)]
    t_imp = statistics.median(p[0] for p in pairs)
    t_exp = statistics.median(p[1] for p in pairs)

    rows = {r["defense"]: r for r in csv.DictReader(published.splitlines())}
    worst_dev, n_values = 0.0, 0
    for rep in reports:
        d = rep.to_dict()
        got = {k: d[k] for k in ("clean", "CR_ind_avg", "CR_ind_worst", "SC", "pct_seen",
                                 "CR_in_avg", "CR_out_avg", "CR_in_worst", "CR_out_worst")}
        for a in RANKED_ATTACKS:
            got[f"single_avg_{a}"] = d["single"][a]["avg"]
            got[f"single_worst_{a}"] = d["single"][a]["worst"]
        for k, v in got.items():
            worst_dev = max(worst_dev, abs(v - float(rows[rep.model][k])))
            n_values += 1
    n = len(models)
    print(f"| step | time (median of {repeats}) |\n| --- | --- |")
    print(f"| parse `defences.json` ({n} models) | {1e3 * t_parse:.1f} ms |")
    print(f"| score all {n} models ({reports[1].table.n_points} points each, every metric) | "
          f"{1e3 * t_score:.1f} ms |")
    print(f"| SQLite import on disk | {1e3 * t_imp:.1f} ms |")
    print(f"| JSON export | {1e3 * t_exp:.1f} ms |")
    print(f"\nLargest deviation from the published `leaderboard.csv` over {n_values} values: "
          f"{worst_dev:.4f} (the table rounds to 0.01): "
          f"{'matches to its rounding' if worst_dev <= 0.005 + 1e-9 else 'DIFFERS'}.")


if __name__ == "__main__":
    main()
