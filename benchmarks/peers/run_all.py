"""Peer benchmark (issue 8): robustscope against Foolbox, ART, torchattacks, the AdverTorch
tutorial's recipe and the paper's random directions, on the same models, inputs and threats,
against the exact radius wherever an exact solver exists.

Regenerate (writes benchmarks/peers/RESULTS_PEERS.md for --full, RESULTS_PEERS_quick.md for
--quick, and results_<mode>.json):

    pip install -r benchmarks/peers/requirements.txt
    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/peers/run_all.py --quick  # 4-10 min
    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/peers/run_all.py --full   # 15-25 min

Metrics (per model and threat, over the correctly classified test inputs):

* ratio = claimed radius / reference radius per input; the reference is the exact radius
  where one exists, else the smallest *confirmed* radius any method found (including
  robustscope with 10x its budget). A method that found nothing, or whose counterexample is
  not confirmed, has ratio inf for that input.
* confirmed = share of the method's counterexamples that the model's own ``predict`` labels
  differently from y, that lie in the feature box, and whose scaled norm is at most the
  claimed radius (relative tolerance 1e-5).
* optimality (AttackBench-style): with ``E`` the largest finite reference radius and
  ``A(r) = mean_i min(r_i, E)`` (the area under the robust-accuracy curve ``eps -> share of
  inputs with r_i > eps`` on [0, E]),  ``optimality = 1 - (A(method) - A(ref)) / (E - A(ref))``:
  1 when the method's curve is the reference's, 0 when it is no better than never attacking.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import methods as M  # noqa: E402
import models as D  # noqa: E402

PEERS = {"foolbox": "foolbox", "art": "art", "torchattacks": "torchattacks"}
TOL = 1e-5


def peer_versions() -> dict[str, str]:
    out = {}
    for name, mod in PEERS.items():
        try:
            out[name] = importlib.import_module(mod).__version__
        except Exception as exc:  # noqa: BLE001 - recorded in the results
            out[name] = f"unavailable: {type(exc).__name__}: {exc}"
    return out


def method_table(case, threat: str) -> list[tuple[str, str, object, bool]]:
    """(name, peer, runner, slow) for the methods that apply to this model and threat."""
    rows = [("robustscope auto", "robustscope", M.robustscope_auto, False)]
    if case.kind == "trees":
        rows.append(("robustscope auto, black box", "robustscope", M.robustscope_blackbox,
                     False))
    if case.torch_model is not None and case.kind != "linear":
        rows.append(("robustscope auto, budget 200", "robustscope",
                     lambda *a: M.robustscope_auto(*a, budget=200), False))
    if case.torch_model is not None:
        rows.append(("Foolbox FMN", "foolbox",
                     lambda *a: M.foolbox_minnorm(*a, which="fmn"), False))
        if threat == "l2":
            rows.append(("Foolbox DDN", "foolbox",
                         lambda *a: M.foolbox_minnorm(*a, which="ddn"), False))
            rows.append(("ART DeepFool", "art", M.art_deepfool, False))
        rows.append(("Foolbox PGD + bisection", "foolbox", M.foolbox_pgd, True))
        rows.append(("torchattacks PGD + bisection", "torchattacks", M.torchattacks_pgd, True))
    rows.append(("ART HopSkipJump", "art", M.art_hsj, True))
    if case.kind == "trees":
        rows.append(("ART clique bound (lower)", "art", M.art_clique_bound, True))
    if threat == "linf" and case.kind in ("trees", "linear", "relu"):
        rows.append(("AdverTorch recipe (FD-PGD)", "robustscope", M.advertorch_recipe, True))
    rows.append(("random directions (paper)", "robustscope", M.random_directions, True))
    return rows


def confirm(case, X, y, run, threat) -> np.ndarray:
    """True where the counterexample is real: other label, in the box, norm <= claim."""
    found = np.isfinite(run.radius)
    ok = np.zeros(len(X), dtype=bool)
    if not found.any() or np.isnan(run.x_adv).all():
        return ok
    xa = run.x_adv[found]
    pred = case.predict(xa)
    lo, hi = case.space.lower, case.space.upper
    flat = xa.reshape(len(xa), -1)
    inbox = ((flat >= lo - 1e-7) & (flat <= hi + 1e-7)).all(1)
    size = M.norms(xa, X[found], threat)
    ok[found] = (pred != y[found]) & inbox & (size <= run.radius[found] * (1 + TOL) + 1e-9)
    return ok


def summarise(r: np.ndarray, ref: np.ndarray, lower: bool = False) -> dict:
    sel = np.isfinite(ref) & (ref > 0)
    ratio = r[sel] / ref[sel]
    E = float(ref[sel].max()) if sel.any() else float("nan")
    a_ref = np.minimum(ref[sel], E).mean()
    a_m = np.minimum(r[sel], E).mean()
    opt = 1 - (a_m - a_ref) / (E - a_ref) if E > a_ref else float("nan")
    return {"n": int(sel.sum()), "ratio_median": float(np.median(ratio)),
            "ratio_p90": float(np.quantile(ratio, 0.1 if lower else 0.9, method="higher"
                                            if not lower else "lower")),
            "optimality": None if lower else float(opt)}


def run_case(case, threat, cfg, n_slow, log) -> dict:
    X, y = case.X, case.y
    runs: dict[str, dict] = {}
    radii: dict[str, np.ndarray] = {}
    for name, peer, fn, slow in method_table(case, threat):
        k = min(len(X), n_slow) if slow else len(X)
        t0 = time.perf_counter()
        try:
            run = fn(case, threat, X[:k], y[:k], cfg)
        except Exception as exc:  # noqa: BLE001 - a peer failing is a result
            runs[name] = {"peer": peer, "error": f"{type(exc).__name__}: {exc}"[:300]}
            log(f"  {name}: FAILED {runs[name]['error']}")
            traceback.print_exc()
            continue
        lower = "lower" in run.note
        r = np.full(len(X), np.nan)
        if lower:
            r[:k] = run.radius
            conf = None
        else:
            ok = confirm(case, X[:k], y[:k], run, threat)
            found = np.isfinite(run.radius)
            conf = float(ok[found].mean()) if found.any() else float("nan")
            r[:k] = np.where(ok, run.radius, np.inf)
        radii[name] = r
        runs[name] = {"peer": peer, "inputs": k, "lower_bound": lower,
                      "found": float(np.isfinite(run.radius).mean()), "confirmed": conf,
                      "queries_per_input": float(np.mean(run.queries)),
                      "seconds_per_input": run.seconds / k, "note": run.note}
        log(f"  {name}: {k} inputs, {time.perf_counter() - t0:.1f} s")
    # reference radius: exact where a solver certifies it, else the best known
    exact = None
    t0 = time.perf_counter()
    try:
        exact = M.robustscope_exact(case, threat, X, y, cfg)
    except Exception as exc:  # noqa: BLE001
        log(f"  exact solver failed: {type(exc).__name__}: {exc}")
        traceback.print_exc()
    exact_secs = (time.perf_counter() - t0) / len(X)
    n_exact = 0 if exact is None else int(np.isfinite(np.asarray(exact, dtype=float)).sum())
    if n_exact < len(X):
        if case.kind == "trees":
            strong_runs = M.tree_reference_runs(case, threat, X, y)
        else:
            strong_runs = [("robustscope 10x budget",
                            M.robustscope_auto(case, threat, X, y, cfg, mult=10, seed=1))]
        for key, strong in strong_runs:
            ok = confirm(case, X, y, strong, threat)
            radii[key] = np.where(ok, strong.radius, np.inf)
            runs[key] = {
                "peer": "robustscope", "inputs": len(X), "lower_bound": False,
                "found": float(np.isfinite(strong.radius).mean()),
                "confirmed": float(ok[np.isfinite(strong.radius)].mean()),
                "queries_per_input": float(np.mean(strong.queries)),
                "seconds_per_input": strong.seconds / len(X), "note": "reference run"}
    upper_runs = [v for k_, v in radii.items() if not runs[k_]["lower_bound"]]
    best = np.nanmin(np.vstack(upper_runs), axis=0)
    if exact is not None:
        ref = np.where(np.isfinite(exact), exact, best)
        ref_kind = (f"exact on {n_exact}/{len(X)} inputs ({exact_secs:.3f} s/input)"
                    + ("" if n_exact == len(X) else ", best known on the others"))
    else:
        ref = best
        ref_kind = "best known (min over all methods' confirmed radii, incl. robustscope 10x)"
    for name, r in radii.items():
        sel = ~np.isnan(r)
        runs[name].update(summarise(r[sel], ref[sel], lower=runs[name]["lower_bound"]))
        if runs[name]["lower_bound"]:
            above = int((r[sel] > ref[sel] * (1 + 1e-4)).sum())
            runs[name]["above_reference"] = above
            if above:
                runs[name]["note"] += (f"; INVALID on {above}/{int(sel.sum())} inputs: above a "
                                       "verified counterexample's radius")
        if exact is not None and not runs[name]["lower_bound"]:
            ex = np.asarray(exact, dtype=float)
            below = r[sel] < np.nan_to_num(ex[sel], nan=-1.0) * (1 - 1e-4)
            runs[name]["below_exact"] = int(below.sum())
    extra = {}
    if threat == "linf" and case.torch_model is not None:
        try:
            rs = M.robustscope_auto(case, threat, X, y, cfg)
            extra["empirical_robustness"] = M.art_empirical_robustness(case, X, rs.x_adv)
        except Exception as exc:  # noqa: BLE001
            extra["empirical_robustness_error"] = str(exc)[:200]
    return {"reference": ref_kind, "median_reference": float(np.median(ref[np.isfinite(ref)])),
            "n": len(X), "runs": runs, "extra": extra,
            "radii": {k: [float(v) for v in r] for k, r in radii.items()},
            "reference_radii": [float(v) for v in ref]}


def verdict(runs: dict, exact: bool) -> str:
    """Targets: as tight as the best peer (median ratio) at <= 1/10 of its time or queries;
    within 2% of exact where exact exists. Misses say by how much."""
    rs = runs.get("robustscope auto")
    peers = {k: v for k, v in runs.items() if v.get("peer") != "robustscope"
             and "ratio_median" in v and not v["lower_bound"]}
    if not rs or "ratio_median" not in rs:
        return "robustscope did not run"
    parts = []
    if peers:
        best_name = min(peers, key=lambda k: (peers[k]["ratio_median"],
                                              peers[k]["seconds_per_input"]))
        b = peers[best_name]
        rel = rs["ratio_median"] / b["ratio_median"] - 1
        # robustscope's cost as a share of the peer's: the target is <= 0.1 on either
        t_share = rs["seconds_per_input"] / max(b["seconds_per_input"], 1e-12)
        q_share = rs["queries_per_input"] / max(b["queries_per_input"], 1e-12)
        how = ("as tight" if abs(rel) <= 1e-3 else
               f"tighter by {-rel:.1%}" if rel < 0 else f"LOOSER by {rel:.1%}")
        tight = "met" if rel <= 1e-3 else f"MISSED by {rel:.1%}"
        best_share = min(t_share, q_share)
        cost = ("met" if best_share <= 0.1 else
                f"MISSED: {best_share / 0.1:.0f}x over the 1/10 target")
        parts.append(
            f"tightest peer {best_name} (median ratio {b['ratio_median']:.4f}, robustscope "
            f"{rs['ratio_median']:.4f}): robustscope {how}, tightness target {tight}; "
            f"robustscope spends {t_share:.2g}x the peer's time and {q_share:.2g}x its "
            f"queries, cost target (<= 0.1x) {cost}")
    if exact:
        gap = rs["ratio_median"] - 1
        parts.append(f"{'within' if gap <= 0.02 else 'NOT within'} 2% of exact "
                     f"(median {gap:+.2%}, p90 {rs['ratio_p90'] - 1:+.2%})")
    return "; ".join(parts)


def summary_table(report: dict) -> list[str]:
    """Markdown rows: per model and threat, robustscope's default against the tightest peer."""
    out = ["| model, threat | reference | robustscope auto: ratio median (p90) | s, queries "
           "/input | tightest peer: ratio median (p90) | its s, queries /input |",
           "|---|---|---|---|---|---|"]
    for key, res in report["results"].items():
        runs = res["runs"]
        rs = runs.get("robustscope auto", {})
        peers = {k: v for k, v in runs.items() if v.get("peer") != "robustscope"
                 and "ratio_median" in v and not v["lower_bound"]}
        if "ratio_median" not in rs or not peers:
            continue
        name = min(peers, key=lambda k: (peers[k]["ratio_median"],
                                         peers[k]["seconds_per_input"]))
        b = peers[name]
        out.append(f"| {key} | {res['reference'].split(' (')[0]} | {rs['ratio_median']:.4f} "
                   f"({rs['ratio_p90']:.4f}) | {rs['seconds_per_input']:.4f}, "
                   f"{rs['queries_per_input']:,.0f} | {name}: {b['ratio_median']:.4f} "
                   f"({b['ratio_p90']:.4f}) | {b['seconds_per_input']:.4f}, "
                   f"{b['queries_per_input']:,.0f} |")
    return out


def summary(report: dict, markdown_path: str) -> str:
    """The section benchmarks/RESULTS.md shows: provenance, the summary table, every
    verdict, and the invalid lower bounds, all from ``report``."""
    out = [f"Measured {report['date']}, {report['total_minutes']:.1f} min; peers: "
           + ", ".join(f"{k} {v}" for k, v in report["peers"].items())
           + f". {report['n']} inputs per model ({report['n_slow']} for the slow methods). "
           f"Every method, every input, definitions: [{Path(markdown_path).name}]"
           f"(peers/{Path(markdown_path).name}).", "", *summary_table(report), "",
           "Verdicts against the issue's targets (tightness: robustscope's median ratio at "
           "most the tightest peer's; cost: at most 1/10 of that peer's time or queries; "
           "exact: within 2% of the exact radius):", ""]
    for key, res in report["results"].items():
        out.append(f"- **{key}**: {verdict(res['runs'], res['reference'].startswith('exact'))}")
    cheap = [(key, res["runs"]["robustscope auto, budget 200"])
             for key, res in report["results"].items()
             if "ratio_median" in res["runs"].get("robustscope auto, budget 200", {})]
    if cheap:
        out += ["", "At the peers' cost: robustscope held to a budget of 200 passes per input "
                "(median ratio, queries per input): " + "; ".join(
                    f"{key} {r['ratio_median']:.4f} at {r['queries_per_input']:,.0f}"
                    for key, r in cheap) + "."]
    confirmed = [s["confirmed"] for res in report["results"].values()
                 for s in res["runs"].values() if s.get("confirmed") is not None]
    below = sum(s.get("below_exact", 0) for res in report["results"].values()
                for s in res["runs"].values())
    invalid = [f"{name} on {key}: above a verified counterexample's radius on "
               f"{s['above_reference']}/{s['n']} inputs"
               for key, res in report["results"].items() for name, s in res["runs"].items()
               if s.get("above_reference")]
    out += ["", f"Share of counterexamples the model confirms, lowest over all methods: "
            f"{min(confirmed):.0%}; radii below an exact radius: {below}."]
    if invalid:
        out += ["", "Lower bounds that are not valid: " + "; ".join(invalid) + "."]
    return "\n".join(out)


def markdown(report: dict) -> str:
    mode = report["mode"]
    out = [f"# Peer benchmark ({mode})", "",
           f"Regenerate: `OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/peers/run_all.py "
           f"--{mode}` (peers from `benchmarks/peers/requirements.txt`). Measured "
           f"{report['date']} on {report['machine']}, torch {report['torch']}, numpy "
           f"{report['numpy']}, one torch thread; {report['total_minutes']:.1f} min in all"
           + ("" if not report.get("updated") else "; sections rerun later: "
              + ", ".join(f"{k} ({v})" for k, v in report["updated"].items()))
           + ".", "",
           "Peers: " + ", ".join(f"{k} {v}" for k, v in report["peers"].items()) + ".", "",
           "**Definitions.** *ratio*: radius claimed by the method / reference radius, per "
           "input (inf where nothing confirmed was found); the reference is the exact radius "
           "where an exact solver exists and closed its bracket (robustscope's exact linear "
           "solver, `robustscope.solvers.exact.trees.driver`, "
           "`robustscope.solvers.exact.relu.milp` when "
           "present; else `benchmarks/exact_xgb_linf.py` for XGBoost), else the smallest "
           "confirmed radius of any method, including robustscope with 10x budget (for trees: "
           "its cube search and HopSkipJump with 10x budget). *p90*: 90th percentile of the "
           "ratio (for "
           "lower bounds: 10th). *optimality* (AttackBench-style): with E the largest finite "
           "reference radius and A(r) = mean_i min(r_i, E) the area under the robust-accuracy "
           "curve on [0, E], optimality = 1 - (A(method) - A(ref)) / (E - A(ref)). "
           "*confirmed*: share of the method's counterexamples that the model's own `predict` "
           "labels differently, that lie in the box and whose scaled norm is <= the claimed "
           "radius. *queries*: model passes per input (forward rows + backward rows, counted "
           "on the model; a finite-difference gradient counts its forward rows). Slow methods "
           f"(bisections, HopSkipJump, recipe, random directions) run on the first "
           f"{report['n_slow']} inputs only; their ratios are on those inputs.", ""]
    out += ["## Summary", "", *summary_table(report), ""]
    for key, res in report["results"].items():
        out += [f"## {key}", "",
                f"{res['n']} correctly classified test inputs; reference: {res['reference']}; "
                f"median reference radius {res['median_reference']:.4f}.", ""]
        out += ["| method | inputs | ratio median | p90 | optimality | found | confirmed | "
                "queries/input | s/input | note |", "|---|---|---|---|---|---|---|---|---|---|"]
        for name, s in res["runs"].items():
            if "error" in s:
                out.append(f"| {name} | – | failed: {s['error']} | | | | | | | |")
                continue
            opt = "" if s["optimality"] is None else f"{s['optimality']:.3f}"
            conf = "–" if s["confirmed"] is None else f"{s['confirmed']:.0%}"
            note = s["note"]
            if s.get("below_exact"):
                note += f" {s['below_exact']} below exact!"
            out.append(f"| {name} | {s['inputs']} | {s['ratio_median']:.4f} | "
                       f"{s['ratio_p90']:.4f} | {opt} | {s['found']:.0%} | {conf} | "
                       f"{s['queries_per_input']:,.0f}"
                       f" | {s['seconds_per_input']:.4f} | {note} |")
        er = res["extra"].get("empirical_robustness")
        if er:
            out += ["", f"ART `empirical_robustness` (minimal FGSM, Linf, mean ‖δ‖/‖x‖): "
                    f"{er[0]:.4f}; the same statistic over robustscope's counterexamples: "
                    f"{er[1]:.4f}."]
        out += ["", f"**Verdict:** {verdict(res['runs'], res['reference'].startswith('exact'))}",
                ""]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true")
    mode.add_argument("--full", action="store_true")
    ap.add_argument("--models", default="lr,mlp,lenet,cnn,xgboost,rf")
    ap.add_argument("--out", default=None,
                    help="markdown to write (default: RESULTS_PEERS.md for --full, "
                         "RESULTS_PEERS_quick.md for --quick, next to this script)")
    ap.add_argument("--render", action="store_true",
                    help="only rewrite the markdown from results_<mode>.json")
    ap.add_argument("--update", action="store_true",
                    help="keep the other models' sections of results_<mode>.json; rerun --models")
    args = ap.parse_args()
    full = args.full
    if args.out is None:
        args.out = str(HERE / ("RESULTS_PEERS.md" if full else "RESULTS_PEERS_quick.md"))
    torch.set_num_threads(1)
    n, n_slow = (60, 20) if full else (20, 6)
    cfg = M.Config() if full else M.Config(hsj_iter=10, hsj_eval=500, rd_dirs=500,
                                           recipe_iters=50)
    builders = {"lr": lambda: D.digits_lr(n), "mlp": lambda: D.digits_mlp(n),
                "lenet": lambda: D.mnist_lenet(n, epochs=4 if full else 2),
                "cnn": lambda: D.toy_cnn(n), "xgboost": lambda: D.cancer_trees(n, "xgboost"),
                "rf": lambda: D.cancer_trees(n, "rf")}
    t_all = time.perf_counter()
    report = {"mode": "full" if full else "quick", "peers": peer_versions(), "n": n,
              "n_slow": n_slow, "torch": torch.__version__, "numpy": np.__version__,
              "machine": f"{platform.processor() or platform.machine()}, CPU",
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "results": {}}

    json_path = Path(args.out).with_name(f"results_{report['mode']}.json")
    if args.render:  # rewrite the markdown from the stored JSON only
        stored = json.loads(json_path.read_text())
        Path(args.out).write_text(markdown(stored) + "\n")
        print(summary(stored, args.out))
        return
    if args.update and json_path.exists():
        old = json.loads(json_path.read_text())
        report["results"] = old["results"]
        report["total_minutes_before_update"] = old["total_minutes"]
        report["updated"] = {}

    def log(msg):  # progress on stderr; stdout carries the summary markdown only
        print(msg, file=sys.stderr, flush=True)

    for key in args.models.split(","):
        case = builders[key]()
        log(f"{case.name}: clean accuracy {case.meta['accuracy']:.3f}, {len(case.X)} inputs")
        for threat in case.threats:
            title = f"{case.name}, {threat.upper() if threat == 'l2' else 'Linf'}"
            log(f"# {title}")
            res = run_case(case, threat, cfg, n_slow, log)
            res["verdict"] = verdict(res["runs"], res["reference"].startswith("exact"))
            report["results"][title] = res
            if "updated" in report:
                report["updated"][title] = report["date"]
            log(f"  verdict: {res['verdict']}")
    report["total_minutes"] = (time.perf_counter() - t_all) / 60
    if "total_minutes_before_update" in report:
        report["total_minutes"] += report["total_minutes_before_update"]
    Path(args.out).write_text(markdown(report) + "\n")
    json_path.write_text(json.dumps(report, indent=1, default=float))
    log(f"wrote {args.out} in {report['total_minutes']:.1f} min")
    print(summary(report, args.out))


if __name__ == "__main__":
    main()
