"""Issue #39: the default's stopping rule against a fixed strong reference, on one half of the
zoo (tune while choosing settings, held_out to report).

For each network x threat (Linf, L2, L1) on the zoo's ``--n`` correctly classified test
inputs: the search under test (``rs.radius`` with its defaults, or a named candidate
setting), and a reference measured once and cached: ``rs.radius(..., budget=3000, seed=1)``
with the planned cascade only (no convergence rounds) and, under Linf / L2, a plain PGD with
five restarts and a bisection (``pgd.py``). *best known* = per input the minimum over every
cached run of that network and threat (reference, PGD and every setting measured). Per row:
median / p90 / max of radius / best known over the inputs something breaks, inputs more than
2% above it, censored inputs another method breaks, median and p90 passes per input, and the
inputs the search marked converged, with those of them more than 2% above the best known
(*false*: a converged flag that overstates). Results are cached per setting in
``.cache/stopping_<split>.json``; ``--out`` writes the table::

    PYTHONPATH=src nice -n 19 python benchmarks/zoo/stopping.py --split tune --setting default
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "zoo"

import robustscope as rs  # noqa: E402
from robustscope.search.plan import SearchConfig  # noqa: E402

from . import networks as Z  # noqa: E402
from .baseline import THREATS, _passes, _radii  # noqa: E402
from .pgd import pgd_radius  # noqa: E402

HERE = Path(__file__).resolve().parent
REFERENCE_BUDGET = 3000

#: Named settings: keyword arguments of ``rs.radius`` (``config`` as SearchConfig fields).
SETTINGS: dict[str, dict] = {
    "default": {},
    "legacy300": {"config": {"converge_ceiling": None}},
    "lean": {"config": {"default_gradients": 75}},
    "t5": {"config": {"converge_targets": 5}},
    "lean-t5": {"config": {"default_gradients": 75, "converge_targets": 5}},
    # issue 39's "10x ceiling run": the default with ten times its ceiling of passes
    "ceiling10x": {"config": {"converge_ceiling": 30_000}},
}


def _space(case):
    X = case.X
    return rs.FeatureSpace.box(case.space.n_features if X.ndim == 2 else X.shape[1:])


def _kwargs(setting: str) -> dict:
    kw = dict(SETTINGS[setting])
    if "config" in kw:
        kw["config"] = SearchConfig(**kw["config"])
    return kw


def run_setting(case, threat: str, setting: str) -> dict:
    t0 = time.perf_counter()
    res = rs.radius(case.module, case.X, case.y, threat=threat, space=_space(case),
                    **_kwargs(setting))
    return {"radius": _radii(res).tolist(), "passes": _passes(res).tolist(),
            "converged": (res.converged > 0).tolist(), "seconds": time.perf_counter() - t0,
            "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def run_reference(case, threat: str) -> dict:
    t0 = time.perf_counter()
    strong = rs.radius(case.module, case.X, case.y, threat=threat, space=_space(case),
                       budget=REFERENCE_BUDGET, seed=1,
                       config=SearchConfig(converge_ceiling=None))
    r_pgd = np.full(len(case.X), np.inf)
    if threat in ("linf", "l2"):
        with Z.one_thread():
            r_pgd, _ = pgd_radius(case.module, case.X, case.y, threat)
    return {"strong": _radii(strong).tolist(), "pgd": np.asarray(r_pgd, float).tolist(),
            "seconds": time.perf_counter() - t0,
            "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def _q(a: np.ndarray, q: float) -> float:
    return float(np.quantile(a, q, method="inverted_cdf")) if len(a) else float("nan")


def summarise(rows: dict, key: str, setting: str) -> dict:
    ref = rows[key]["reference"]
    runs = {s: np.asarray(v["radius"], float) for s, v in rows[key].items()
            if s != "reference"}
    best = np.minimum.reduce([np.asarray(ref["strong"]), np.asarray(ref["pgd"]),
                              *runs.values()])
    broken = np.isfinite(best)
    mine = rows[key][setting]
    r = np.asarray(mine["radius"], float)
    ratio = r[broken] / best[broken]
    conv = np.asarray(mine["converged"], bool)[broken]
    p = np.asarray(mine["passes"], float)
    return {"row": key, "n": len(r), "broken": int(broken.sum()), "median": _q(ratio, 0.5),
            "p90": _q(ratio, 0.9), "max": float(ratio.max()) if len(ratio) else np.nan,
            "over2": int((ratio > 1.02).sum()),
            "censored": int((~np.isfinite(r) & broken).sum()),
            "passes": float(np.median(p)), "passes_p90": _q(p, 0.9),
            "converged": int(conv.sum()), "false": int((conv & (ratio > 1.02)).sum()),
            "seconds": mine["seconds"]}


def table(rows: dict, setting: str, keys: list[str]) -> str:
    head = ("| network / threat | inputs | median | p90 | max | >2% | censored | passes "
            "median / p90 | converged (false) | s |\n|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    tot = {"over2": 0, "censored": 0, "false": 0, "conv": 0, "n": 0, "ok": 0}
    for key in keys:
        s = summarise(rows, key, setting)
        ok = s["median"] <= 1.02 and s["p90"] <= 1.05 and s["censored"] == 0
        tot["ok"] += ok
        for k in ("over2", "censored", "false"):
            tot[k] += s[k]
        tot["conv"] += s["converged"]
        tot["n"] += s["broken"]
        lines.append(f"| {key} | {s['broken']} | {s['median']:.3f} | {s['p90']:.3f} | "
                     f"{s['max']:.3f} | {s['over2']} | {s['censored']} | {s['passes']:.0f} / "
                     f"{s['passes_p90']:.0f} | {s['converged']} ({s['false']}) | "
                     f"{s['seconds']:.0f} |")
    lines.append(f"\n{setting}: {tot['ok']} of {len(keys)} rows meet median <= 1.02, p90 <= "
                 f"1.05, none censored; {tot['over2']} of {tot['n']} inputs > 2% above the "
                 f"best known; {tot['censored']} censored where another breaks; "
                 f"{tot['conv']} marked converged, {tot['false']} of them > 2% above.")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--split", choices=Z.SPLITS, required=True)
    ap.add_argument("--setting", nargs="+", default=["default"])
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--networks", nargs="*", default=None)
    ap.add_argument("--threats", nargs="*", default=list(THREATS))
    ap.add_argument("--fresh", action="store_true", help="measure the settings again")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    cache = Z.CACHE / f"stopping_{args.split}.json"
    rows = json.loads(cache.read_text()) if cache.exists() else {}
    names = args.networks or Z.names(args.split)
    keys = []
    for name in names:
        case = Z.load(name)
        case.X, case.y = case.X[: args.n], case.y[: args.n]
        for threat in args.threats:
            key = f"{name} / {threat}"
            keys.append(key)
            row = rows.setdefault(key, {})
            if "reference" not in row:
                row["reference"] = run_reference(case, threat)
            for setting in args.setting:
                if setting not in row or args.fresh:
                    row[setting] = run_setting(case, threat, setting)
            cache.write_text(json.dumps(rows))
            for setting in args.setting:
                s = summarise(rows, key, setting)
                print(f"{key:34s} {setting:10s} med {s['median']:.3f} p90 {s['p90']:.3f} "
                      f"max {s['max']:.3f} cens {s['censored']} passes {s['passes']:.0f} "
                      f"conv {s['converged']} false {s['false']} {s['seconds']:.0f}s",
                      file=sys.stderr, flush=True)
    stamps = sorted({rows[k][s].get("measured_at", "?") for k in keys
                     for s in ("reference", *args.setting)})
    head = (f"Split `{args.split}` ({len(names)} networks x {len(args.threats)} threats, the "
            f"first {args.n} correctly classified test inputs each); runs measured "
            f"{', '.join(stamps)} (read back from `.cache/stopping_{args.split}.json` where "
            "cached). Settings: "
            + "; ".join(f"`{s}` = {SETTINGS[s] or 'rs.radius defaults'}" for s in args.setting)
            + ". *converged (false)*: inputs the search marked converged, and how many of "
            "them are more than 2% above the best known radius.")
    text = head + "\n\n" + "\n\n".join(f"**{s}**\n\n" + table(rows, s, keys)
                                        for s in args.setting)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
