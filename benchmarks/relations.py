"""Relations between features on a credit-style data set (issue 16).

Data: ``robustscope.runs.credit.make_credit`` (a documented, seeded generator: 14 features,
six relations that hold on every row, integer counts, a one-hot housing group, age
immutable). Models: a logistic regression, a gradient-boosted ensemble (scikit-learn, 50
trees of depth 3) and a ReLU MLP (torch, 14-16-2). Threat: Linf on range-scaled features.

Per model it measures, on the first ``--n`` test inputs:

* the search without and with the relations (``radius(..., compare_unconstrained=True)``):
  how many unconstrained counterexamples break a relation, how the radii grow, and the time
  per input of each;
* the share of constrained counterexamples that satisfy every relation and the feature
  space (bounds, integers, one-hot, immutable), re-checked here (must be 100%);
* linear model: the exact radius under the relations (a MILP per class: integer and one-hot
  features kept integral, issue 40) against an independent MILP written in raw units with
  ``scipy.optimize.milp`` (``mixed_types.independent_milp``); the attacks' radii
  (minimum-norm, PGD) against it;
* tree ensemble and MLP: the default search against ``solver="exact"``'s certified lower
  bound. Both MILPs hold the relations. The tree MILP is exact under them (integer and
  one-hot features kept integral), and its radius is checked against the same MILP without
  the pruning (``prune=False``) and against the exact radius without the relations (never
  larger). The ReLU MILP relaxes integer and one-hot features, so its brackets rarely close.

    python benchmarks/relations.py --n 40
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings

import numpy as np
import torch
from native_stdout import markdown_only
from sklearn.ensemble import GradientBoostingClassifier
from sklearn.linear_model import LogisticRegression

from robustscope import radius
from robustscope.runs.credit import CREDIT_CONSTRAINTS, credit_space, make_credit
from robustscope.scores.relation_effect import relation_effect


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def fit_models(X: np.ndarray, y: np.ndarray, scale: np.ndarray, seed: int):
    """LR, GBM and MLP, each trained on range-scaled inputs and taking raw inputs."""
    lr = LogisticRegression(max_iter=5000).fit(X / scale, y)
    lr.coef_ = lr.coef_ / scale  # the same model on raw units
    gbm = GradientBoostingClassifier(n_estimators=50, max_depth=3, random_state=seed).fit(X, y)
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(X.shape[1], 16), torch.nn.ReLU(),
                              torch.nn.Linear(16, 2)).double()
    xt, yt = torch.as_tensor(X / scale), torch.as_tensor(y)
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    for _ in range(400):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(xt), yt).backward()
        opt.step()
    with torch.no_grad():
        net[0].weight /= torch.as_tensor(scale)  # raw units in, same decisions
    return {"logistic regression": lr, "gradient boosting": gbm, "MLP 14-16-2": net}


def accuracy(model, X: np.ndarray, y: np.ndarray) -> float:
    if isinstance(model, torch.nn.Module):
        with torch.no_grad():
            pred = model(torch.as_tensor(X)).argmax(1).numpy()
    else:
        pred = model.predict(X)
    return float((pred == y).mean())


def valid_share(res, space) -> tuple[int, float]:
    """Counterexamples found, and the share that satisfy the relations and the space."""
    X = res.x_adv[res.found]
    if len(X) == 0:
        return 0, math.nan
    ok = space.relations_hold(X)
    for i in np.flatnonzero(ok):
        try:
            space.check_data(X[i:i + 1])
        except ValueError:
            ok[i] = False
    return len(X), float(ok.mean())


def fmt(v: float, digits: int = 4) -> str:
    if isinstance(v, float) and math.isnan(v):
        return "—"
    if isinstance(v, float) and math.isinf(v):
        return "∞"
    return f"{v:.{digits}g}"


def main() -> None:
    markdown_only()  # (HiGHS prints to descriptor 1 directly)
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=40, help="test inputs per model")
    parser.add_argument("--train", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-limit", type=float, default=20.0)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    X, y = make_credit(args.train + args.n, seed=args.seed)
    X_train, y_train, X_test, y_test = X[:args.train], y[:args.train], X[args.train:], \
        y[args.train:]
    space = credit_space(X)  # bounds over all rows so that every test row is inside
    free_space = space.unconstrained()
    assert space.relations_hold(X).all()
    models = fit_models(X_train, y_train, space.scale, args.seed)

    print(f"Data: `make_credit({args.train + args.n}, seed={args.seed})`, {X.shape[1]} "
          f"features, {len(CREDIT_CONSTRAINTS)} relations: "
          + "; ".join(f"`{c}`" for c in CREDIT_CONSTRAINTS) + ". Threat Linf on range-scaled "
          f"features; the first {args.n} test inputs. Times were taken on a shared machine: "
          "compare the with/without ratios, measured in the same run, rather than the seconds.")
    print()
    print("| model | test acc. | unconstrained counterexamples | break a relation | "
          "no valid counterexample | median growth | mean growth | valid (constrained) | "
          "s/input without | s/input with | cost ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    results = {}
    for name, model in models.items():
        log(f"{name}: search without and with the relations")
        t0 = time.perf_counter()
        free = radius(model, X_test, y_test, space=free_space, seed=args.seed)
        t_free = (time.perf_counter() - t0) / args.n
        t0 = time.perf_counter()
        con = radius(model, X_test, y_test, space=space, seed=args.seed)
        t_con = (time.perf_counter() - t0) / args.n
        # the comparison numbers from the same two searches' definitions, recomputed from
        # the pair above (compare_unconstrained=True would run the free search once more)
        con.meta["unconstrained_radius"] = free.radius.tolist()
        con.meta["unconstrained_breaks"] = (free.found & ~space.relations_hold(free.x_adv)
                                            ).astype(int).tolist()
        eff = relation_effect(con)
        found, share = valid_share(con, space)
        immutable_ok = np.array_equal(con.x_adv[:, 0], X_test[:, 0])
        results[name] = (free, con)
        print(f"| {name} | {accuracy(model, X_test, y_test):.3f} | {eff['unconstrained_found']} "
              f"| {eff['unconstrained_invalid']} ({100 * eff['unconstrained_invalid_share']:.0f}%) "
              f"| {eff['lost']} | x{fmt(eff['median_growth'])} | x{fmt(eff['mean_growth'])} | "
              f"{found} ({100 * share:.0f}%{'' if immutable_ok else ', age changed!'}) | "
              f"{t_free:.3f} | {t_con:.3f} | {t_con / t_free:.2f} |")
    print()

    # linear model: exact LP against an independent LP, attacks against exact
    lr = models["logistic regression"]
    _, con = results["logistic regression"]
    log("logistic regression: exact LP against scipy's linprog; attacks against exact")
    searched = ~np.isin(con.status, ("misclassified", "satisfied"))
    lb = con.lower_bound[searched]
    from mixed_types import independent_milp  # (mixed_types imports this module)

    indep = np.array([independent_milp(lr.coef_[0], float(lr.intercept_[0]), X_test[i], space)
                      for i in np.flatnonzero(searched)])
    both = np.isfinite(lb) & np.isfinite(indep)
    diff = np.abs(lb[both] - indep[both]) / np.maximum(indep[both], 1e-12)
    print(f"Logistic regression, exact MILP under the relations (HiGHS, integer and one-hot "
          f"features integral) against an independent MILP in raw units "
          f"(`scipy.optimize.milp`): {both.sum()} inputs, largest relative difference "
          f"{diff.max() if len(diff) else math.nan:.2e}; infinite in both: "
          f"{int((np.isinf(lb) & np.isinf(indep)).sum())}, in one only: "
          f"{int((np.isinf(lb) != np.isinf(indep)).sum())}.")
    print()
    print("| model | solver | inputs | found | valid | radius / certified lower bound: median "
          "| p90 | max |")
    print("|---|---|---|---|---|---|---|---|")
    for solver in ("minnorm", "pgd"):
        att = radius(lr, X_test, y_test, space=space, solver=solver, seed=args.seed)
        ok = searched & att.found & np.isfinite(con.lower_bound) & (con.lower_bound > 0)
        ratio = att.radius[ok] / con.lower_bound[ok]
        found, share = valid_share(att, space)
        print(f"| logistic regression | {solver} | {int(searched.sum())} | {int(ok.sum())} | "
              f"{100 * share:.0f}% | {fmt(float(np.median(ratio)))} | "
              f"{fmt(float(np.percentile(ratio, 90)))} | {fmt(float(ratio.max()))} |")
    for name in ("gradient boosting", "MLP 14-16-2"):
        model = models[name]
        _, con = results[name]
        try:
            t0 = time.perf_counter()
            ex = radius(model, X_test, y_test, space=space, solver="exact", seed=args.seed)
            t_ex = (time.perf_counter() - t0) / args.n
        except Exception as exc:  # an exact solver that does not take relations yet
            print(f"| {name} | exact | — | — | — | not available: {exc} | | |")
            continue
        searched = ~np.isin(ex.status, ("misclassified", "satisfied"))
        ok = searched & con.found & np.isfinite(ex.lower_bound) & (ex.lower_bound > 0)
        ratio = con.radius[ok] / ex.lower_bound[ok]
        found, share = valid_share(ex, space)
        closed = int((ex.status[searched] == "exact").sum())
        how = ("tree MILP holding the relations" if name == "gradient boosting"
               else "ReLU MILP holding the relations")
        if name == "gradient boosting":
            tree_check = check_trees(model, X_test, y_test, space, ex)
        print(f"| {name} | default search vs exact ({how}; {closed} closed, "
              f"{t_ex:.2f} s/input) | "
              f"{int(searched.sum())} | {int(ok.sum())} | {100 * share:.0f}% | "
              f"{fmt(float(np.median(ratio)))} | {fmt(float(np.percentile(ratio, 90)))} | "
              f"{fmt(float(ratio.max()))} |")
    print()
    print(tree_check)


def check_trees(model, X: np.ndarray, y: np.ndarray, space, ex) -> str:
    """The tree MILP's radius under the relations (``ex``, from ``solver="exact"``) against
    the MILP alone (no pruning) and against the exact radius without the relations."""
    from robustscope.search.threads import limited_threads
    from robustscope.solvers.exact.trees.driver import exact_tree_radius

    searched = ~np.isin(ex.status, ("misclassified", "satisfied"))
    with limited_threads("auto", X[searched].size):  # the policy radius() applies around it
        ref = exact_tree_radius(model, X[searched], y[searched], space, "linf", time_limit=30,
                                prune=False)
    free = radius(model, X, y, space=space.unconstrained(), solver="exact")
    mine, theirs = ex.radius[searched], ref.radius
    both = np.isfinite(mine) & np.isfinite(theirs)
    diff = np.abs(mine[both] - theirs[both]) / np.maximum(theirs[both], 1e-12)
    ok = searched & ex.found & free.found
    grew = ex.radius[ok] > free.radius[ok] * (1 + 1e-9)
    below = int((ex.radius[ok] < free.lower_bound[ok] * (1 - 1e-9)).sum())
    valid = bool(space.relations_hold(ex.x_adv[ex.found]).all())
    return (f"Gradient boosting, exact tree MILP under the relations (Linf): "
            f"{int((ex.status[searched] == 'exact').sum())} of {int(searched.sum())} inputs "
            f"exact; against the MILP alone (prune=False, "
            f"{int((ref.status == 'exact').sum())} exact): largest relative difference "
            f"{diff.max() if len(diff) else math.nan:.2e} over {int(both.sum())} inputs, "
            f"finite in one only: {int((np.isfinite(mine) != np.isfinite(theirs)).sum())}; "
            f"against the exact radius without the relations: larger on {int(grew.sum())} of "
            f"{int(ok.sum())}, below its certified bound on {below}; counterexamples valid: "
            f"{'all' if valid else 'NOT ALL'}.")


if __name__ == "__main__":
    main()
