"""Black box at a few hundred queries (issue 44; issue 39, requirement 6).

Models seen only through ``predict_proba`` (and, for the label-only rows, through a function
that returns the decision as one-hot probabilities). For each model, threat (Linf, L2) and
per-input budget ``B`` (250, 500, 1,000, and the default ceiling when no budget is given), on
the first ``--n`` test rows labelled by the model's own decisions:

* ``robustscope`` - ``rs.radius(wrap_model(predict_proba), X, y, threat, space, budget=B)``,
  the shipped defaults (the step-down search, then HopSkipJump, one budget per input);
* ``robustscope label-only`` - the same on the decisions alone;
* peers (``blackbox_peers.py``), each the smallest counterexample among the first ``B`` rows
  it showed the model: ``cube`` (robustscope's Cube / Square-style radius bisection, the
  first stage of the black-box default before issue 44), ``hsj`` (ART's HopSkipJump),
  ``sign-opt`` (ART's Sign-OPT, L2 only: the norm it minimises), ``rays`` (a RayS-style
  Linf search, Linf only). ART's attacks and RayS use decisions only.

Reference per input: the exact radius where the model allows it (``rs.radius`` on the tree
ensemble itself: exact MILP / leaf search), else a white-box run with a 3,000-pass budget on
the network; in both cases the minimum with every radius any method found (a method can only
be above an exact radius; the benchmark counts the inputs where one is below, which must be
0). Every counterexample is confirmed with the model's own decision on it.

The split: ``tune`` models (breast-cancer XGBoost 100 x depth 6, LightGBM 50, a synthetic
MLP) were used to choose the step-down search's settings; ``held_out`` models were declared
before any tuning and never tuned on; ``held_out_2`` models were declared after the first
held-out measurement, once the Linf restarts had been chosen on the tune models and before
anyone looked at these models, so that the change is judged on models nobody had seen.
The L2 / L1 polish (share of the budget, bisection steps) was chosen on ``xgb-bc`` and
``lgbm-bc``, the boundary projection's Newton steps and segment bisection on ``mlp-tune30``
(an MLP with as many features as the breast-cancer ones); two more tune models (a random
forest and a depth-10 XGBoost on the small synthetic set) were added with them, to tune the
Linf tails of forests and deep boosters without looking at the held-out ones; a random forest
on 30 synthetic features (``rf150-synth30``) chose the share of the budget the Linf restarts
leave the line descent; two multi-class MLPs (``mlp-tune3c``, ``mlp-tune4c``) the boundary
projection's step to the nearest class; multi-class and small-data tree ensembles
(``lgbm-tune3c``, ``xgb-tune4c``, ``xgb-small3c``, ``lgbm-small3c``) and a 20-feature XGBoost
(``xgb-synth20``) the floor of the L2 crossing search.
Targets (held-out models, robustscope with scores): ``B = 500``: median <= 1.01 and p90 <=
1.05; ``B = 250``: median <= 1.05, p90 <= 1.2; default ceiling (issue 39,
requirement 6): median <= 1.02, p90 <= 1.05.

    PYTHONPATH=src python benchmarks/blackbox_budget.py --n 40 --peer-n 20
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from blackbox_peers import peer_radii  # noqa: E402

import robustscope as rs  # noqa: E402
from robustscope.core.space import FeatureSpace  # noqa: E402
from robustscope.models import wrap_model  # noqa: E402
from robustscope.solvers.attacks.decision.cube_search import cube_search  # noqa: E402

BUDGETS = (250, 500, 1000)
TARGETS = {250: (1.05, 1.2), 500: (1.01, 1.05), "default": (1.02, 1.05)}
THREATS = {"linf": math.inf, "l2": 2.0}


@dataclass
class Case:
    name: str
    split: str
    about: str
    proba: object  # (m, d) original units -> (m, k) probabilities
    reference_model: object  # what rs.radius computes the reference on
    reference_kw: dict
    space: FeatureSpace
    X: np.ndarray
    labels: np.ndarray
    k: int


def _split(X, y, test_size=0.2):
    """``X`` and its stratified train / test split (seed 0)."""
    from sklearn.model_selection import train_test_split

    return X, train_test_split(X, y, test_size=test_size, random_state=0, stratify=y)


def _breast_cancer():
    from sklearn.datasets import load_breast_cancer

    return _split(*load_breast_cancer(return_X_y=True))


def _wine():
    from sklearn.datasets import load_wine

    return _split(*load_wine(return_X_y=True), test_size=0.4)


def _synthetic_data(n_samples, n_features, n_informative, n_redundant, n_classes, seed,
                    test_size=0.2):
    """A loader of scikit-learn's ``make_classification`` with these settings, split."""
    def load():
        from sklearn.datasets import make_classification

        return _split(*make_classification(
            n_samples=n_samples, n_features=n_features, n_informative=n_informative,
            n_redundant=n_redundant, n_classes=n_classes, random_state=seed),
            test_size=test_size)
    return load


_synthetic = _synthetic_data(3000, 20, 12, 4, 3, seed=7)
_synthetic_small = _synthetic_data(2000, 10, 6, 2, 2, seed=3)
_synthetic16 = _synthetic_data(3000, 16, 10, 3, 2, seed=21)
_synthetic30 = _synthetic_data(3000, 30, 15, 5, 2, seed=11)
_synthetic16c3 = _synthetic_data(3000, 16, 10, 3, 3, seed=5)
_synthetic12c4 = _synthetic_data(3000, 12, 8, 2, 4, seed=9)
_synthetic20 = _synthetic_data(3000, 20, 10, 4, 2, seed=13)
# as few rows as wine (178), for trees with few splits
_small13c3 = _synthetic_data(180, 13, 5, 3, 3, seed=7, test_size=0.4)


def _mlp(Xtr, ytr, hidden, k, seed=0, epochs=300):
    """A ReLU MLP trained on standardised features, the standardisation folded into its first
    layer (so it takes original units)."""
    torch.manual_seed(seed)
    mean, std = Xtr.mean(0), Xtr.std(0) + 1e-12
    layers, width = [], Xtr.shape[1]
    for h in hidden:
        layers += [torch.nn.Linear(width, h), torch.nn.ReLU()]
        width = h
    net = torch.nn.Sequential(*layers, torch.nn.Linear(width, k)).double()
    xs = torch.as_tensor((Xtr - mean) / std)
    yt = torch.as_tensor(ytr)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    for _ in range(epochs):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(xs), yt).backward()
        opt.step()
    with torch.no_grad():
        first = net[0]
        first.bias -= first.weight @ torch.as_tensor(mean / std)
        first.weight /= torch.as_tensor(std)
    return net.eval()


def _torch_proba(net):
    def proba(a):
        with torch.no_grad():
            return torch.softmax(net(torch.as_tensor(np.asarray(a, dtype=np.float64))), 1).numpy()
    return proba


def build_cases(n: int, only: set[str] | None = None) -> list[Case]:
    from lightgbm import LGBMClassifier
    from sklearn.ensemble import RandomForestClassifier
    from xgboost import XGBClassifier

    specs = [
        ("xgb-bc", "tune", "XGBoost 100 trees, depth 6, breast cancer (30 features)",
         _breast_cancer, lambda: XGBClassifier(n_estimators=100, max_depth=6, n_jobs=1,
                                               random_state=0)),
        ("lgbm-bc", "tune", "LightGBM 50 trees, breast cancer",
         _breast_cancer, lambda: LGBMClassifier(n_estimators=50, n_jobs=1, random_state=0,
                                                verbose=-1)),
        ("mlp-tune", "tune", "ReLU MLP 10-32-32-2, synthetic 2 classes (10 features)",
         _synthetic_small, (32, 32)),
        # declared for the issue 44 / 39 follow-up, tune only: a forest and a deep booster
        # like the held-out ones that missed under Linf, on data no held-out model uses
        ("rf100-synth10", "tune", "random forest 100 trees, depth 8, synthetic 2 classes "
         "(10 features)", _synthetic_small,
         lambda: RandomForestClassifier(100, max_depth=8, n_jobs=1, random_state=0)),
        ("xgb-d10-synth10", "tune", "XGBoost 100 trees, depth 10, synthetic 2 classes "
         "(10 features)", _synthetic_small,
         lambda: XGBClassifier(n_estimators=100, max_depth=10, n_jobs=1, random_state=0)),
        ("mlp-tune30", "tune", "ReLU MLP 30-64-2, synthetic 2 classes (30 features)",
         _synthetic30, (64,)),
        # added 2026-12-07, tune only: a forest on as many features as the held-out
        # breast-cancer ones, on which the share the restarts leave the line descent was chosen
        ("rf150-synth30", "tune", "random forest 150 trees, depth 6, synthetic 2 classes "
         "(30 features)", _synthetic30,
         lambda: RandomForestClassifier(150, max_depth=6, n_jobs=1, random_state=0)),
        # added 2026-12-07, tune only: every tune model before had two classes; the
        # boundary projection's step to the nearest class was chosen on these two
        ("mlp-tune3c", "tune", "ReLU MLP 16-48-48-3, synthetic 3 classes (16 features)",
         _synthetic16c3, (48, 48)),
        ("mlp-tune4c", "tune", "ReLU MLP 12-32-32-32-4, synthetic 4 classes (12 features)",
         _synthetic12c4, (32, 32, 32)),
        # added 2026-12-07, tune only: multi-class and small-data tree ensembles (every tune
        # tree before had two classes and thousands of rows), on which the crossing search's
        # floor (crossings.MIN_RESERVE) was chosen; a 20-feature XGBoost on which its
        # two-level profile was tried and not taken
        ("lgbm-tune3c", "tune", "LightGBM 100 trees, synthetic 3 classes (16 features)",
         _synthetic16c3, lambda: LGBMClassifier(n_estimators=100, n_jobs=1, random_state=0,
                                                verbose=-1)),
        ("xgb-tune4c", "tune", "XGBoost 200 trees, depth 6, synthetic 4 classes (12 features)",
         _synthetic12c4, lambda: XGBClassifier(n_estimators=200, max_depth=6, n_jobs=1,
                                               random_state=0)),
        ("xgb-small3c", "tune", "XGBoost 200 trees, depth 8, synthetic 3 classes, 180 rows "
         "(13 features)", _small13c3,
         lambda: XGBClassifier(n_estimators=200, max_depth=8, n_jobs=1, random_state=0)),
        ("lgbm-small3c", "tune", "LightGBM 100 trees, synthetic 3 classes, 180 rows "
         "(13 features)", _small13c3,
         lambda: LGBMClassifier(n_estimators=100, n_jobs=1, random_state=0, verbose=-1,
                                min_child_samples=5)),
        ("xgb-synth20", "tune", "XGBoost 150 trees, depth 6, synthetic 2 classes "
         "(20 features)", _synthetic20,
         lambda: XGBClassifier(n_estimators=150, max_depth=6, n_jobs=1, random_state=0)),
        ("lgbm500-bc", "held_out", "LightGBM 500 trees, breast cancer",
         _breast_cancer, lambda: LGBMClassifier(n_estimators=500, n_jobs=1, random_state=0,
                                                verbose=-1)),
        ("rf200-bc", "held_out", "random forest 200 trees, depth 6, breast cancer",
         _breast_cancer, lambda: RandomForestClassifier(200, max_depth=6, n_jobs=1,
                                                        random_state=0)),
        ("xgb-d10-synth", "held_out", "XGBoost 100 trees, depth 10, synthetic 3 classes "
         "(20 features)", _synthetic,
         lambda: XGBClassifier(n_estimators=100, max_depth=10, n_jobs=1, random_state=0)),
        ("lgbm-wine", "held_out", "LightGBM 100 trees, wine 3 classes (13 features)",
         _wine, lambda: LGBMClassifier(n_estimators=100, n_jobs=1, random_state=0,
                                       verbose=-1, min_child_samples=5)),
        ("mlp-synth", "held_out", "ReLU MLP 20-64-64-3, synthetic", _synthetic, (64, 64)),
        ("mlp-bc", "held_out", "ReLU MLP 30-128-2, breast cancer", _breast_cancer, (128,)),
        # declared after the first held-out run, before the restarts were chosen (on the tune
        # models): a second set nobody had looked at when that change was made
        ("lgbm300-synth16", "held_out_2", "LightGBM 300 trees, synthetic 2 classes "
         "(16 features)", _synthetic16,
         lambda: LGBMClassifier(n_estimators=300, n_jobs=1, random_state=0, verbose=-1)),
        ("xgb-d8-wine", "held_out_2", "XGBoost 200 trees, depth 8, wine", _wine,
         lambda: XGBClassifier(n_estimators=200, max_depth=8, n_jobs=1, random_state=0)),
        ("mlp-wine", "held_out_2", "ReLU MLP 13-32-32-3, wine", _wine, (32, 32)),
    ]
    cases = []
    for name, split, about, data, make in specs:
        if only and name not in only:
            continue
        X, (Xtr, Xte, ytr, yte) = data()
        space = FeatureSpace.from_data(X)
        k = len(np.unique(ytr))
        if isinstance(make, tuple):
            net = _mlp(Xtr, ytr, make, k)
            proba, ref_model, ref_kw = _torch_proba(net), net, {"budget": 3000}
        else:
            model = make().fit(Xtr, ytr)
            proba, ref_model, ref_kw = model.predict_proba, model, {}
        x = Xte[:n]
        labels = np.asarray(proba(x)).argmax(1)
        cases.append(Case(name, split, about, proba, ref_model, ref_kw, space, x, labels, k))
    return cases


def _confirm(case: Case, x_adv: np.ndarray, found: np.ndarray, what: str) -> None:
    pred = np.asarray(case.proba(x_adv[found])).argmax(1)
    if (pred == case.labels[found]).any():
        raise AssertionError(f"{case.name} / {what}: a counterexample the model does not confirm")


def _one_hot(case: Case):
    eye = np.eye(case.k)
    return lambda a: eye[np.asarray(case.proba(a)).argmax(1)]


def case_digest(case: Case) -> str:
    """SHA-256 of the inputs, their labels and the model's probabilities on them: equal
    digests mean the same inputs seen by the same model."""
    h = hashlib.sha256()
    for a in (case.X, case.labels, np.asarray(case.proba(case.X))):
        h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
    return h.hexdigest()


def _reusable(earlier: dict | None, out: dict) -> bool:
    """Whether an earlier run's references and peer radii belong to these very inputs: its
    digest equals this run's (``out["digest"]``) or, for a run from before digests were
    stored, its Cube radii (deterministic, rerun every time) equal this run's at every
    budget."""
    if not earlier or "reference_run" not in earlier:
        return False
    if "digest" in earlier:
        return earlier["digest"] == out["digest"]
    return all(earlier["runs"].get(f"cube / {b}") == out["runs"][f"cube / {b}"]
               for b in BUDGETS)


def measure(case: Case, threat: str, peer_n: int, seed: int = 0,
            earlier: dict | None = None) -> dict:
    """Radii per method and budget for one case and threat (lists, JSON-ready).

    ``earlier``: this case and threat from an earlier run's JSON; where it belongs to the same
    inputs (:func:`_reusable`), its reference and peer radii are kept rather than recomputed
    (neither depends on robustscope's black box) and the result says so (``reused_from``)."""
    out: dict = {"runs": {}, "queries": {}, "converged": {}, "seconds": {},
                 "digest": case_digest(case)}
    boxes = {"robustscope": wrap_model(case.proba, n_classes=case.k),
             "robustscope label-only": wrap_model(_one_hot(case), n_classes=case.k)}
    for key, box in boxes.items():
        for budget in (*BUDGETS, None):
            t = time.perf_counter()
            res = rs.radius(box, case.X, case.labels, threat=threat, space=case.space,
                            budget=budget, seed=seed)
            label = f"{key} / {budget or 'default'}"
            found = np.isfinite(res.radius) & (res.radius > 0)
            _confirm(case, res.x_adv, found, label)
            if budget is not None and (res.queries > budget).any():
                raise AssertionError(f"{case.name} / {label}: an input past its budget")
            out["runs"][label] = res.radius.tolist()
            out["queries"][label] = res.queries.tolist()
            out["converged"][label] = res.converged.tolist()
            out["seconds"][label] = time.perf_counter() - t
    x_t, y_t = torch.as_tensor(case.X), torch.as_tensor(case.labels)
    cube_box = boxes["robustscope"]
    for budget in BUDGETS:
        t = time.perf_counter()
        run = cube_search(cube_box, x_t, y_t, case.space, threat, budget=budget,
                          X_pool=x_t, y_pool=y_t, generator=torch.Generator().manual_seed(seed))
        _confirm(case, run.x_adv.numpy(), run.found, f"cube / {budget}")
        out["runs"][f"cube / {budget}"] = run.radius.tolist()
        out["queries"][f"cube / {budget}"] = run.forward_queries.tolist()
        out["seconds"][f"cube / {budget}"] = time.perf_counter() - t
    peers = ["hsj", "rays"] if threat == "linf" else ["hsj", "sign-opt"]
    if _reusable(earlier, out):
        for key in ("reference_seconds", "reference_kind", "reference_exact", "reference_run"):
            out[key] = earlier[key]
        for name in peers:
            out["seconds"][name] = earlier["seconds"][name]
            for budget in BUDGETS:
                out["runs"][f"{name} / {budget}"] = earlier["runs"][f"{name} / {budget}"]
        out["reused_from"] = earlier.get("reused_from") or earlier.get("measured", "an earlier run")
        return out
    t = time.perf_counter()
    ref = rs.radius(case.reference_model, case.X, case.labels, threat=threat, space=case.space,
                    **case.reference_kw)
    out["reference_seconds"] = time.perf_counter() - t
    out["reference_kind"] = ("exact" if not case.reference_kw else "white box, 3,000 passes")
    out["reference_exact"] = (ref.status == "exact").tolist()
    out["reference_run"] = ref.radius.tolist()
    sub = slice(0, min(peer_n, len(case.X)))
    for name in peers:
        t = time.perf_counter()
        radii = peer_radii(name, case.proba, case.space.lower, case.space.scale, case.X[sub],
                           case.labels[sub], THREATS[threat], BUDGETS, case.k, seed)
        for j, budget in enumerate(BUDGETS):
            out["runs"][f"{name} / {budget}"] = radii[:, j].tolist()
        out["seconds"][name] = time.perf_counter() - t
    return out


def _ratios(result: dict, label: str) -> np.ndarray:
    """radius / reference over the inputs the method was run on (inf: nothing found)."""
    reference = _reference(result)
    r = np.asarray(result["runs"][label], dtype=float)
    ref = reference[: len(r)]
    keep = np.isfinite(ref) & (ref > 0)
    return r[keep] / ref[keep]


def _reference(result: dict) -> np.ndarray:
    ref = np.asarray(result["reference_run"], dtype=float)
    for r in result["runs"].values():
        r = np.asarray(r, dtype=float)
        ref[: len(r)] = np.minimum(ref[: len(r)], r)
    return ref


def _below_exact(result: dict) -> int:
    exact = np.asarray(result["reference_exact"], dtype=bool)
    ref = np.asarray(result["reference_run"], dtype=float)
    below = 0
    for r in result["runs"].values():
        r = np.asarray(r, dtype=float)
        e = exact[: len(r)]
        below += int((r[e] < ref[: len(r)][e] * (1 - 1e-4)).sum())
    return below


def _cell(ratios: np.ndarray) -> str:
    if not len(ratios):
        return "-"
    med, p90 = np.median(ratios), np.quantile(ratios, 0.9)
    fmt = lambda v: "inf" if not np.isfinite(v) else f"{v:.3f}"  # noqa: E731
    return f"{fmt(med)} / {fmt(p90)}"


def report(results: dict, cases: list[Case]) -> str:
    lines = []
    about = {c.name: c for c in cases}
    for threat in THREATS:
        lines += [f"\n### {threat.upper() if threat == 'l2' else 'Linf'}\n",
                  "median / p90 of radius / reference; *label-only*: the decisions alone; "
                  "peers on the first inputs only (*n peers*)\n"]
        methods = ["robustscope", "robustscope label-only", "cube", "hsj",
                   "rays" if threat == "linf" else "sign-opt"]
        header = "| model | split | reference | n / n peers | method | " + \
            " | ".join(f"B = {b}" for b in BUDGETS) + " | default ceiling (queries median) |"
        lines += [header, "|" + "---|" * (header.count("|") - 1)]
        for name, per_threat in results.items():
            res = per_threat.get(threat)
            if res is None:
                continue
            n = len(res["reference_run"])
            n_peer = len(res["runs"].get(f"hsj / {BUDGETS[0]}", []))
            kind = res["reference_kind"]
            if kind == "exact":
                kind = f"exact ({sum(res['reference_exact'])}/{n})"
            for method in methods:
                cells = [_cell(_ratios(res, f"{method} / {b}")) if f"{method} / {b}" in
                         res["runs"] else "-" for b in BUDGETS]
                default = f"{method} / default"
                if default in res["runs"]:
                    q = np.median(res["queries"][default])
                    cells.append(f"{_cell(_ratios(res, default))} ({q:,.0f})")
                else:
                    cells.append("-")
                lines.append(f"| {name} | {about[name].split if name in about else ''} | "
                             f"{kind} | {n} / {n_peer} | {method} | " + " | ".join(cells) + " |")
    lines += verdict_table(results, about)
    lines.append("\n**Targets** (robustscope with scores, held-out models):\n")
    verdicts, splits = [], []
    for name, per_threat in results.items():
        if about.get(name) is None or not about[name].split.startswith("held_out"):
            continue
        for threat, res in per_threat.items():
            for budget, (t_med, t_p90) in TARGETS.items():
                r = _ratios(res, f"robustscope / {budget}")
                med, p90 = np.median(r), np.quantile(r, 0.9)
                ok = med <= t_med and p90 <= t_p90
                verdicts.append(ok)
                splits.append(about[name].split)
                lines.append(f"- {name} ({about[name].split}) / {threat} / B = {budget}: "
                             f"{med:.3f} / {p90:.3f} "
                             f"(target {t_med} / {t_p90}): {'met' if ok else 'MISSED'}")
    lines.append(f"\n{sum(verdicts)} of {len(verdicts)} held-out targets met.")
    for split in ("held_out", "held_out_2"):
        sub = [ok for (s, ok) in zip(splits, verdicts, strict=True) if s == split]
        lines.append(f"- {split}: {sum(sub)} of {len(sub)}")
    below = sum(_below_exact(res) for per in results.values() for res in per.values())
    lines.append(f"Radii below an exact reference (must be 0): {below}.")
    return "\n".join(lines)


def verdict_table(results: dict, about: dict) -> list[str]:
    """What the ``converged`` column said at the default ceiling, per model and threat (with
    scores): inputs marked 1 (converged) and -1 (still falling), and of the inputs whose
    radius ended more than 5% above the reference, how many were marked 1. A radius that
    loose called converged is the verdict's error that matters."""
    lines = ["\n**Convergence verdicts** at the default ceiling (robustscope with scores): "
             "inputs marked converged (1) / still falling (-1); *loose*: radius above 1.05x "
             "the reference, and how many of those were marked converged\n",
             "| model | split | threat | 1 / -1 | loose | loose marked 1 |",
             "|---|---|---|---|---|---|"]
    for name, per_threat in results.items():
        for threat, res in per_threat.items():
            label = "robustscope / default"
            if label not in res.get("converged", {}):
                continue
            verdict = np.asarray(res["converged"][label])
            reference = _reference(res)
            ratio = np.asarray(res["runs"][label], dtype=float) / reference
            loose = np.isfinite(reference) & (reference > 0) & (ratio > 1.05)
            split = about[name].split if name in about else ""
            lines.append(f"| {name} | {split} | {threat} | {(verdict == 1).sum()} / "
                         f"{(verdict == -1).sum()} | {loose.sum()} | "
                         f"{(loose & (verdict == 1)).sum()} |")
    return lines


def figure(results: dict, path: Path) -> None:
    """One panel per model: median radius / reference against the budget, per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    fig, axes = plt.subplots(2, math.ceil(len(names) / 2), figsize=(3.2 * math.ceil(
        len(names) / 2), 6), squeeze=False)
    for ax, name in zip(axes.ravel(), names, strict=False):
        res = results[name].get("linf")
        if res is None:
            continue
        for method in ("robustscope", "robustscope label-only", "cube", "hsj", "rays"):
            ys = [np.median(_ratios(res, f"{method} / {b}")) for b in BUDGETS
                  if f"{method} / {b}" in res["runs"]]
            if len(ys) == len(BUDGETS):
                ax.plot(BUDGETS, ys, marker="o", label=method)
        ax.set_xscale("log")
        ax.set_xticks(BUDGETS, [str(b) for b in BUDGETS])
        ax.minorticks_off()
        ax.set_title(f"{name} (Linf)", fontsize=9)
        ax.set_xlabel("queries per input")
    for ax in axes.ravel()[len(names):]:
        ax.set_visible(False)
    axes.ravel()[0].set_ylabel("median radius / reference")
    axes.ravel()[0].legend(fontsize=7)
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=90)
    tmp.replace(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--peer-n", type=int, default=20)
    ap.add_argument("--models", default="", help="comma-separated names (default: all)")
    ap.add_argument("--threats", default="linf,l2")
    ap.add_argument("--json", default="benchmarks/results/blackbox_budget.json")
    ap.add_argument("--figure", default="benchmarks/results/blackbox_budget.png")
    ap.add_argument("--reuse", action="store_true",
                    help="keep the references and peer radii of the run in --json where they "
                         "belong to the same inputs and model (checked per case); robustscope "
                         "and Cube always rerun")
    args = ap.parse_args()
    only = set(filter(None, args.models.split(",")))
    cases = build_cases(args.n, only or None)
    earlier = json.loads(Path(args.json).read_text()) if args.reuse and Path(
        args.json).exists() else {}
    results: dict = {}
    t0 = time.perf_counter()
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for case in cases:
        results[case.name] = {}
        for threat in args.threats.split(","):
            print(f"{case.name} / {threat} ...", file=sys.stderr, flush=True)
            res = measure(case, threat, args.peer_n,
                          earlier=earlier.get(case.name, {}).get(threat))
            res["measured"] = stamp
            results[case.name][threat] = res
    out = Path(args.json)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(results))
    tmp.replace(out)
    print("Models (split: *tune* chose every setting; *held_out* never tuned on; "
          "*held_out_2* declared after the first held-out run, never tuned on either; the "
          "results of both held-out sets were read after earlier changes, never used to "
          "choose a setting):\n")
    for c in cases:
        print(f"- `{c.name}` ({c.split}): {c.about}, {len(c.X)} test rows, {c.k} classes")
    print(report(results, cases))
    reused = sorted({res["reused_from"] for per in results.values()
                     for res in per.values() if "reused_from" in res})
    kept = sum("reused_from" in res for per in results.values() for res in per.values())
    if kept:
        print(f"\nReferences and peer radii of {kept} of "
              f"{sum(len(per) for per in results.values())} model / threat rows kept from the "
              f"run of {', '.join(reused)} (`--reuse`: same inputs, labels and model "
              "probabilities, checked per row); robustscope and Cube reran.")
    if args.figure:
        figure(results, Path(args.figure))
        print(f"\nCurves (median ratio against queries, Linf, one panel per model): "
              f"`{args.figure}`.")
    print(f"\nMeasured in {(time.perf_counter() - t0) / 60:.1f} min.")


if __name__ == "__main__":
    main()
