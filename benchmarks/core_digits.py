"""Core benchmark (issue 2): radius tightness, passes per input and throughput on digits.

Models: multinomial logistic regression (exact solver) and a ReLU MLP 64-128-10 (white box),
both trained on the first 1,297 of scikit-learn's 1,797 digits (pixels scaled to [0, 1]);
evaluation on the last 500 (LR) / first 200 of those (MLP). Feature space: the box [0, 1].

* LR: exact radius throughput (inputs/s over 5,000 inputs per call, median of ``--repeats``
  runs after a warm-up) and
  the ratio of the white-box search's radius to the exact one (the same linear model hidden
  in a torch module, so the search cannot use the exact solver).
* MLP: the default cascade under a budget of 1,000 passes per input against the best radius
  any configuration finds with 10x that budget.

Run: ``python benchmarks/core_digits.py [--repeats 5]`` (prints a markdown section).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression

from robustscope import FeatureSpace
from robustscope.search.engine import radius
from robustscope.search.plan import REFERENCE_CONFIG

BUDGET = 1000
BIG = REFERENCE_CONFIG


def digits_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """scikit-learn's digits with pixels in [0, 1]: the first 1,297 for training
    ``(Xtr, ytr)``, the last 500 for testing ``(Xte, yte)``."""
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    return X[:1297], y[:1297], X[1297:], y[1297:]


def train_mlp(X: np.ndarray, y: np.ndarray, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    xt, yt = torch.tensor(X, dtype=torch.float32), torch.tensor(y)
    for _ in range(300):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(xt), yt).backward()
        opt.step()
    return net.eval()


def timed(fn, repeats: int):
    fn()  # warm-up
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return result, statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--mlp-inputs", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    Xtr, ytr, Xte, yte = digits_split()
    space = FeatureSpace.box(64)
    lr = LogisticRegression(max_iter=3000).fit(Xtr, ytr)
    module = torch.nn.Linear(64, 10).double()
    module.weight.data, module.bias.data = torch.tensor(lr.coef_), torch.tensor(lr.intercept_)

    print("### Logistic regression on digits (exact solver)\n")
    print("| threat | inputs/s (median) | exact | search radius / exact: median | p90 | "
          "search passes/input |")
    print("|---|---|---|---|---|---|")
    speeds, mlp = [], []
    for threat in ("linf", "l2", "l1"):
        # throughput on the 500 test inputs repeated 10 times (5,000 inputs per call)
        _, seconds = timed(lambda t=threat: radius(lr, np.tile(Xte, (10, 1)), np.tile(yte, 10),
                                                   threat=t, space=space, batch_size=4096),
                           args.repeats)
        exact = radius(lr, Xte, yte, threat=threat, space=space)
        attacked = radius(module, Xte[:100], yte[:100], threat=threat, space=space,
                          budget=BUDGET)
        # (a counterexample, whether or not the certified bound closed its bracket)
        ok = attacked.found & (exact.status[:100] == "exact")
        ratio = attacked.radius[ok] / exact.radius[:100][ok]
        speeds.append(10 * len(Xte) / seconds)
        print(f"| {threat} | {10 * len(Xte) / seconds:,.0f} | {(exact.status == 'exact').sum()}/"
              f"{len(Xte)} | {np.median(ratio):.4f} | {np.percentile(ratio, 90):.4f} | "
              f"{np.median(attacked.queries):.0f} |")

    net = train_mlp(Xtr, ytr)
    Xm, ym = Xte[: args.mlp_inputs], yte[: args.mlp_inputs]
    print(f"\n### ReLU MLP 64-128-10 on digits ({len(Xm)} test inputs, budget {BUDGET} "
          "passes/input)\n")
    print("| threat | found | median ratio to best | p90 | max | passes/input (median, max) "
          "| inputs/s |")
    print("|---|---|---|---|---|---|---|")
    for threat in ("linf", "l2"):
        default, seconds = timed(lambda t=threat: radius(net, Xm, ym, threat=t, space=space,
                                                       budget=BUDGET), max(1, args.repeats // 2))
        strong = radius(net, Xm, ym, threat=threat, space=space, config=BIG, rtol=0.001,
                        seed=1, budget=10 * BUDGET)
        strong_mn = radius(net, Xm, ym, threat=threat, space=space, solver="minnorm",
                           budget=10 * BUDGET, seed=2)
        best = np.minimum.reduce([default.radius, strong.radius, strong_mn.radius])
        ok = default.found & (default.status != "misclassified") & np.isfinite(best) & (best > 0)
        ratio = default.radius[ok] / best[ok]
        mlp.append((threat, float(np.median(ratio)), float(np.median(default.queries)),
                    int(default.queries.max())))
        print(f"| {threat} | {ok.sum()}/{(default.status != 'misclassified').sum()} | "
              f"{np.median(ratio):.4f} | {np.percentile(ratio, 90):.4f} | {ratio.max():.3f} | "
              f"{np.median(default.queries):.0f}, {default.queries.max()} | "
              f"{len(Xm) / seconds:.0f} |")

    slowest = min(speeds)
    print(f"\n- Linear exact throughput: slowest threat {slowest:,.0f} inputs/s against the "
          f"target 10,000: {'met' if slowest >= 10_000 else 'MISSED'}.")
    for threat, med, passes, most in mlp:
        ok = med <= 1.02 and passes <= BUDGET and most <= BUDGET
        print(f"- MLP {threat}: median ratio to best {med:.4f} (target <= 1.02) at a median "
              f"of {passes:.0f} passes per input (max {most}; target <= {BUDGET}): "
              f"{'met' if ok else 'MISSED'}.")


if __name__ == "__main__":
    main()
