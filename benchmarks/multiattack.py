"""Cost of a 20-point robust-accuracy curve per image threat: bisection against the full grid.

A tiny undefended CNN on synthetic 32 x 32 colour images (``robustscope.models.toy``), every
image threat on its default 20-level benchmark grid, solver PGD with ``--steps`` steps and one
restart. For each threat, each of ``--repeats`` runs measures

- seconds per input for the whole 20-point curve, by bisection and by attacking every level;
- attack runs per input (the full grid spends 20 per correctly classified input);
- agreement: share of inputs whose breaking level is the same both ways, the shares where
  bisection finds a lower level (its warm start from a counterexample found higher up
  succeeds where the cold full-grid run failed) or a higher one (the attack is not monotone
  in the strength and bisection skipped the level where it succeeded), and the largest gap
  between the two accuracy curves (percentage points).

Medians over the repeats are printed as a Markdown table (CPU, one thread).

Regenerate:  PYTHONPATH=src python benchmarks/multiattack.py
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time

import numpy as np
import torch

from robustscope.models.toy import RandomTrunk, stripes_dataset, train_tiny_cnn
from robustscope.search.grid import grid_robustness
from robustscope.threats.registry import get_image_threat

THREATS = ["linf", "l2", "l1", "elastic", "stadv", "recolor", "jpeg-linf", "jpeg-l1", "lpips",
           "hue", "saturation", "brightness", "contrast", "affine", "perspective"]


def run(n: int, steps: int, repeats: int, threats: list[str]) -> list[dict]:
    torch.set_num_threads(1)
    model = train_tiny_cnn()
    x, y = stripes_dataset(n, seed=5)
    rows = []
    for name in threats:
        per = []
        for rep in range(repeats):
            threat = get_image_threat(name, features=RandomTrunk()) if name == "lpips" \
                else get_image_threat(name)
            t0 = time.perf_counter()
            bis = grid_robustness(model, x, y, threat, steps=steps, seed=rep)
            t_bis = time.perf_counter() - t0
            t0 = time.perf_counter()
            full = grid_robustness(model, x, y, threat, steps=steps, seed=rep, method="full")
            t_full = time.perf_counter() - t0
            correct = bis.level != -1
            per.append({
                "s_bis": t_bis / n, "s_full": t_full / n,
                "runs_bis": bis.runs[correct].mean(), "runs_full": full.runs[correct].mean(),
                "saved": 1 - bis.runs.sum() / full.runs.sum(),
                "agree": float(np.mean(bis.level == full.level)),
                "lower": float(np.mean(bis.level < full.level)),
                "higher": float(np.mean(bis.level > full.level)),
                "gap": float(100 * np.abs(bis.accuracy - full.accuracy).max()),
                "acc_max": float(100 * bis.accuracy[-1]),
                "acc_max_full": float(100 * full.accuracy[-1]),
            })
        med = {k: statistics.median(p[k] for p in per) for k in per[0]}
        med.update(threat=name, attack=bis.attack_name, clean=100 * bis.clean_accuracy)
        rows.append(med)
        print(f"{name}: done", file=sys.stderr, flush=True)
    return rows


def table(rows: list[dict], n: int, steps: int, repeats: int) -> str:
    head = (f"Tiny CNN, synthetic 32x32 colour images, {n} inputs, PGD {steps} steps, 1 restart, "
            f"20-level benchmark grids; medians over {repeats} runs; CPU "
            f"({platform.processor() or platform.machine()}), 1 thread, torch "
            f"{torch.__version__}. Clean accuracy {rows[0]['clean']:.1f}%.\n\n")
    lines = ["| threat | attack name | s/input bisection | s/input full grid | speed-up | "
             "runs/input bisection | runs/input full | runs saved | same level | "
             "bisection lower / higher | "
             "max curve gap (pp) | acc at top level bis / full (%) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['threat']} | {r['attack']} | {r['s_bis']:.4f} | {r['s_full']:.4f} | "
            f"{r['s_full'] / r['s_bis']:.1f}x | {r['runs_bis']:.2f} | {r['runs_full']:.0f} | "
            f"{100 * r['saved']:.0f}% | {100 * r['agree']:.0f}% | "
            f"{100 * r['lower']:.0f}% / {100 * r['higher']:.0f}% | {r['gap']:.1f} | "
            f"{r['acc_max']:.1f} / {r['acc_max_full']:.1f} |")
    speed = [r["s_full"] / r["s_bis"] for r in rows]
    runs = [r["runs_bis"] for r in rows]
    higher = [r["threat"] for r in rows if r["higher"] > 0]
    tail = (f"\n\nBisection costs {min(runs):.1f}–{max(runs):.1f} attack runs per input instead "
            f"of 20 ({min(speed):.1f}–{max(speed):.1f}x faster). Where the levels differ, a "
            "*lower* level by bisection means its warm start broke an input that a fresh run "
            "at that level did not; a *higher* level (an attack that is not monotone in the "
            "strength) occurred for " + (", ".join(higher) if higher else "no threat") + ".")
    return head + "\n".join(lines) + tail


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threats", default=",".join(THREATS))
    ap.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = ap.parse_args()
    rows = run(args.n, args.steps, args.repeats, args.threats.split(","))
    print(table(rows, args.n, args.steps, args.repeats))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
