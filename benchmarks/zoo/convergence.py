"""Issue #39: the convergence rounds (``SearchConfig(converge_ceiling=C)``,
``robustscope.search.convergence``) against the default search, on one half of the zoo.

For each network x threat (Linf, L2, L1) on the first ``--n`` correctly classified test
inputs, the rows of ``baseline.py`` (default, a 10x-budget run with seed 1, PGD + bisection
for Linf / L2; measured here where ``.cache/baseline.json`` lacks them) and one more search:
``rs.radius(net, X, y, threat=t, space=box, config=SearchConfig(converge_ceiling=C))``.

best known = per input, the minimum over the default, the 10x run, PGD and the rounds.
Reported per network x threat, for the default and for the rounds: median, p90 and max of
radius / best known over the inputs something breaks (censored = inf), inputs more than 2%
above it, censored inputs that another method breaks, and median passes per input (forward
+ backward rows), with the rounds' share of inputs marked converged. The rounds' settings
were chosen on the ``tune`` half (a lost research branch, see the issue's notes); run with
``--split held_out`` for the numbers that count. Per-input results are cached in
``.cache/convergence.json``; writes ``CONVERGENCE_<split>.md``::

    PYTHONPATH=src nice -n 19 python benchmarks/zoo/convergence.py --split held_out [--n 10]
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
from robustscope.search.plan import SearchConfig  # noqa: E402

from . import networks as Z  # noqa: E402
from .baseline import RESULTS as BASELINE_CACHE  # noqa: E402
from .baseline import THREATS, _passes, _radii, measure  # noqa: E402

HERE = Path(__file__).resolve().parent
CACHE = Z.CACHE / "convergence.json"


def rounds_row(case, threat: str, ceiling: int) -> dict:
    X = case.X
    space = rs.FeatureSpace.box(case.space.n_features if X.ndim == 2 else X.shape[1:])
    t0 = time.perf_counter()
    res = rs.radius(case.module, X, case.y, threat=threat, space=space,
                    config=SearchConfig(converge_ceiling=ceiling))
    return {"radius": _radii(res).tolist(), "passes": _passes(res).tolist(),
            "converged": [bool(c) for c in res.meta.get("converged", [])],
            "seconds": time.perf_counter() - t0,
            "measured_at": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def _q(a: np.ndarray, q: float) -> float:
    return float(np.quantile(a, q, method="inverted_cdf")) if len(a) else float("nan")


def summarise(base: dict, rounds: dict) -> dict:
    d, s, p, c = (np.asarray(v, float) for v in (base["default"], base["strong"],
                                                 base["pgd"], rounds["radius"]))
    best = np.minimum.reduce([d, s, p, c])
    broken = np.isfinite(best)
    out = {"network": base["network"], "threat": base["threat"], "n": base["n"],
           "broken": int(broken.sum())}
    for key, r, passes in (("default", d, base["default_passes"]),
                           ("rounds", c, rounds["passes"])):
        ratio = r[broken] / best[broken]
        out[key] = {"median": _q(ratio, 0.5), "p90": _q(ratio, 0.9),
                    "max": float(ratio.max()) if len(ratio) else float("nan"),
                    "over2": int((ratio > 1.02).sum()),
                    "censored": int((~np.isfinite(r) & broken).sum()),
                    "passes": float(np.median(passes))}
    out["converged"] = sum(rounds["converged"]) if rounds["converged"] else None
    out["seconds"] = rounds["seconds"]
    return out


def markdown(rows: list[dict]) -> str:
    def f(v):
        return "inf" if v == np.inf else f"{v:.3f}"
    lines = ["| network | threat | inputs | default median / p90 / max | >2% | passes |"
             " rounds median / p90 / max | >2% | censored | passes | converged | seconds |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        a, b = r["default"], r["rounds"]
        conv = "n/a" if r["converged"] is None else f"{r['converged']}/{r['n']}"
        lines.append(
            f"| {r['network']} | {r['threat']} | {r['n']} ({r['broken']}) | "
            f"{f(a['median'])} / {f(a['p90'])} / {f(a['max'])} | {a['over2']} | "
            f"{a['passes']:.0f} | {f(b['median'])} / {f(b['p90'])} / {f(b['max'])} | "
            f"{b['over2']} | {b['censored']} | {b['passes']:.0f} | {conv} | "
            f"{r['seconds']:.0f} |")
    return "\n".join(lines) + "\n"


def verdict(rows: list[dict]) -> str:
    lines = []
    for key in ("default", "rounds"):
        meds = [r[key]["median"] for r in rows]
        p90s = [r[key]["p90"] for r in rows]
        met = sum(r[key]["median"] <= 1.02 and r[key]["p90"] <= 1.05 and not r[key]["censored"]
                  for r in rows)
        lines.append(
            f"- {key}: largest median {max(meds):.4f}, largest p90 {max(p90s):.4f}, "
            f"largest max {max(r[key]['max'] for r in rows):.3f}, "
            f"{sum(r[key]['over2'] for r in rows)} of {sum(r['broken'] for r in rows)} "
            f"inputs > 2% above the best known, "
            f"{sum(r[key]['censored'] for r in rows)} censored where another breaks, "
            f"median passes {np.median([r[key]['passes'] for r in rows]):.0f}; "
            f"{met} of {len(rows)} rows meet median <= 1.02 and p90 <= 1.05 with none "
            "censored.")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--split", choices=("tune", "held_out"), default="held_out")
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--ceiling", type=int, default=3000)
    ap.add_argument("--networks", nargs="*", default=None)
    ap.add_argument("--threats", nargs="*", default=list(THREATS))
    args = ap.parse_args()
    chosen = args.networks or Z.names(args.split)
    base_cache = json.loads(BASELINE_CACHE.read_text()) if BASELINE_CACHE.exists() else {}
    cache = json.loads(CACHE.read_text()) if CACHE.exists() else {}
    rows = []
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    for name in chosen:
        case = Z.load(name, n=args.n)
        for threat in args.threats:
            key = f"{name}|{case.recipe_hash}|{threat}|{args.n}"
            if key not in base_cache:
                base_cache[key] = measure(case, threat)
                BASELINE_CACHE.parent.mkdir(parents=True, exist_ok=True)
                BASELINE_CACHE.write_text(json.dumps(base_cache))
            ckey = f"{key}|{args.ceiling}"
            if ckey not in cache:
                cache[ckey] = rounds_row(case, threat, args.ceiling)
                CACHE.write_text(json.dumps(cache))
            rows.append(summarise(base_cache[key], cache[ckey]))
            print(markdown(rows[-1:]).splitlines()[-1], flush=True)
    text = markdown(rows) + "\n" + verdict(rows)
    print(text)
    cmd = "PYTHONPATH=src nice -n 19 python benchmarks/zoo/convergence.py " + " ".join(
        sys.argv[1:])
    (HERE / f"CONVERGENCE_{args.split}.md").write_text(
        f"# Convergence rounds against the default, {args.split} half of the zoo\n\n"
        f"Command: `{cmd.strip()}`  \nStarted {started}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} torch threads, 2 CPU cores shared with other work "
        "(seconds are not benchmarks). Ratios = radius / best known (the minimum over the "
        "default, a 10x-budget run, PGD + bisection for Linf / L2, and the rounds).\n\n"
        + text)


if __name__ == "__main__":
    main()
