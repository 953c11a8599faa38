"""Baseline of issue #39: robustscope's default radius search on the zoo's held-out networks
against a reference radius.

For each network x threat (Linf, L2, L1) on the first ``--n`` correctly classified test
inputs:

* default: ``rs.radius(net, X, y, threat=t, space=rs.FeatureSpace.box(d))``;
* reference: per input, the smallest of (a) ``rs.radius(..., budget=10 x the default's median
  passes, seed=1)`` and (b) for Linf / L2, the plain PGD baseline of ``pgd.py`` (5 random
  restarts, 20 steps, doubling then 10 bisection steps on eps; every counterexample verified
  on the network in float32 and float64). The default itself is not part of the reference,
  so a ratio below 1 means the default beat both.

Reported per network x threat: median and p90 of default / reference over the inputs the
reference breaks (a censored default counts as inf), how many of those the default left
censored, and the median passes (forward + backward rows per input) of the default.

Results are kept per (network, recipe hash, threat, n) in ``.cache/baseline.json`` so that an
interrupted run resumes; ``--fresh`` measures again. Writes ``BASELINE.md``::

    PYTHONPATH=src nice -n 19 python benchmarks/zoo/baseline.py [--n 10] [--networks A B]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "zoo"

import robustscope as rs  # noqa: E402

from . import networks as Z  # noqa: E402
from .pgd import pgd_radius  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = Z.CACHE / "baseline.json"
THREATS = ("linf", "l2", "l1")


def _radii(res) -> np.ndarray:
    return np.where(res.status == "censored", np.inf, np.asarray(res.radius, dtype=float))


def _passes(res) -> np.ndarray:
    return np.asarray(res.forward_queries, float) + np.asarray(res.backward_queries, float)


def measure(case, threat: str) -> dict:
    net, X, y = case.module, case.X, case.y
    space = rs.FeatureSpace.box(case.space.n_features if X.ndim == 2 else X.shape[1:])
    t0 = time.perf_counter()
    default = rs.radius(net, X, y, threat=threat, space=space)
    t_default = time.perf_counter() - t0
    r_def, p_def = _radii(default), _passes(default)
    budget = int(10 * np.median(p_def))
    t0 = time.perf_counter()
    strong = rs.radius(net, X, y, threat=threat, space=space, budget=budget, seed=1)
    t_strong = time.perf_counter() - t0
    r_strong = _radii(strong)
    r_pgd, p_pgd, t_pgd = np.full(len(X), np.inf), np.zeros(len(X)), 0.0
    if threat in ("linf", "l2"):
        t0 = time.perf_counter()
        with Z.one_thread():
            r_pgd, p_pgd = pgd_radius(net, X, y, threat)
        t_pgd = time.perf_counter() - t0
    return {"network": case.name, "recipe_hash": case.recipe_hash, "threat": threat,
            "n": len(X), "default": r_def.tolist(), "default_passes": p_def.tolist(),
            "default_status": [str(s) for s in default.status],
            "strong": r_strong.tolist(), "strong_budget": budget,
            "strong_passes": _passes(strong).tolist(), "pgd": r_pgd.tolist(),
            "pgd_passes": p_pgd.tolist(),
            "seconds": {"default": t_default, "strong": t_strong, "pgd": t_pgd},
            "measured_at": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def _q(a: np.ndarray, q: float) -> float:
    return float(np.quantile(a, q, method="inverted_cdf")) if len(a) else float("nan")


def summarise(row: dict) -> dict:
    d, s, p = (np.asarray(row[k], float) for k in ("default", "strong", "pgd"))
    ref = np.minimum(s, p)
    broken = np.isfinite(ref)
    ratio = d[broken] / ref[broken]
    return {"network": row["network"], "threat": row["threat"], "n": row["n"],
            "broken": int(broken.sum()), "median": _q(ratio, 0.5), "p90": _q(ratio, 0.9),
            "censored": int((~np.isfinite(d) & broken).sum()),
            "passes": float(np.median(row["default_passes"])),
            "budget": row["strong_budget"],
            "pgd_wins": int((p < s).sum()),
            "seconds": sum(row["seconds"].values()), "measured_at": row["measured_at"]}


def markdown(summaries: list[dict]) -> str:
    def f(v):
        return "inf" if v == np.inf else f"{v:.3f}"
    lines = ["| network | threat | inputs (ref breaks) | median default/ref | p90 default/ref |"
             " censored where ref breaks | median passes (default) | ref budget (10x) |"
             " ref from PGD | seconds |", "|---|---|---|---|---|---|---|---|---|---|"]
    for s in summaries:
        pw = s["pgd_wins"] if s["threat"] != "l1" else "n/a"
        lines.append(f"| {s['network']} | {s['threat']} | {s['n']} ({s['broken']}) | "
                     f"{f(s['median'])} | {f(s['p90'])} | {s['censored']} | "
                     f"{s['passes']:.0f} | {s['budget']} | {pw} | {s['seconds']:.0f} |")
    return "\n".join(lines) + "\n"


def overall(summaries: list[dict]) -> str:
    worst = max(summaries, key=lambda s: s["p90"])
    med = max(summaries, key=lambda s: s["median"])
    return (f"Over {len(summaries)} rows: largest median ratio {med['median']:.3f} "
            f"({med['network']}, {med['threat']}), largest p90 {worst['p90']:.3f} "
            f"({worst['network']}, {worst['threat']}), "
            f"{sum(s['censored'] for s in summaries)} censored defaults where the reference "
            f"breaks, {sum(s['broken'] for s in summaries)} of "
            f"{sum(s['n'] for s in summaries)} inputs broken by the reference.\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--networks", nargs="*", default=None,
                    help="default: every held-out network")
    ap.add_argument("--threats", nargs="*", default=list(THREATS))
    ap.add_argument("--fresh", action="store_true")
    ap.add_argument("--out", type=Path, default=HERE / "BASELINE.md")
    args = ap.parse_args()
    chosen = args.networks or Z.names("held_out")
    cache = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    summaries = []
    t_start = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    for name in chosen:
        case = Z.load(name, n=args.n)
        for threat in args.threats:
            key = f"{name}|{case.recipe_hash}|{threat}|{args.n}"
            if args.fresh or key not in cache:
                cache[key] = measure(case, threat)
                RESULTS.parent.mkdir(parents=True, exist_ok=True)
                RESULTS.write_text(json.dumps(cache))
            s = summarise(cache[key])
            summaries.append(s)
            print(markdown([s]).splitlines()[-1], flush=True)
    table = markdown(summaries)
    print(table)
    when = sorted(s["measured_at"] for s in summaries)
    cmd = "PYTHONPATH=src nice -n 19 python benchmarks/zoo/baseline.py " + " ".join(sys.argv[1:])
    args.out.write_text(
        "# Baseline: robustscope's default search on the zoo's held-out networks\n\n"
        f"Command: `{cmd.strip()}`  \nRun started {t_start}; rows measured between "
        f"{when[0]} and {when[-1]}; torch {torch.__version__}, {torch.get_num_threads()} "
        "torch threads, 2 CPU cores shared with other work (seconds are not benchmarks).\n\n"
        "ratio = default radius / reference radius, over the inputs the reference breaks; "
        "reference = min(robustscope at 10x the default's median passes with seed 1, plain "
        "PGD + bisection for Linf / L2). 'ref from PGD' = inputs where PGD beat the 10x run. "
        "Rows already in `.cache/baseline.json` (same network, recipe hash, threat and n) are "
        "reused, not measured again.\n\n" + table + "\n" + overall(summaries))


if __name__ == "__main__":
    main()
