"""The tutorial's readings on breast-cancer XGBoost (100 trees, depth 6), Linf range-scaled:
flip rate against strength, initial vs perturbed score, IsolationForest check of the
counterexamples (clean inputs as the baseline), Proxy-A distance with intervals.

Counterexamples come from the gradient-free cascade (cube random search + HopSkipJump,
5,000 queries per input), verified with the model's own ``predict``.

Run (about 30 s on one core):
    PYTHONPATH=src python benchmarks/blackbox_readings.py --figures /tmp/figs
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from blackbox_trees import make_models  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--figures", default=None, help="folder for the PNG figures")
    args = ap.parse_args()

    from robustscope.core.result import ATTACKED, MISCLASSIFIED
    from robustscope.models import wrap_model
    from robustscope.report.tabular_figures import (
        flip_rate_figure,
        ood_figure,
        save_figure,
        score_scatter_figure,
    )
    from robustscope.scores.distribution import flip_rate, ood_check, proxy_a_distance
    from robustscope.solvers.attacks.decision.gradient_free import gradient_free

    models, space, Xtr, ytr, Xte, yte = make_models(args.seed)
    sk = models["xgboost"]
    model = wrap_model(sk)
    x, y = torch.as_tensor(Xte), torch.as_tensor(yte)
    run = gradient_free(model, x, y, space, "linf", budget=args.budget,
                            X_pool=torch.as_tensor(Xtr), y_pool=torch.as_tensor(ytr),
                            generator=torch.Generator().manual_seed(args.seed))
    x_adv = run.x_adv.numpy()
    pred = sk.predict(Xte)
    adv_pred = sk.predict(x_adv)
    correct = pred == yte
    status = np.where(~correct, MISCLASSIFIED, ATTACKED)
    assert (adv_pred[run.found] != yte[run.found]).all()
    radius = np.where(correct, run.radius, 0.0)

    flips = flip_rate(radius, [0.01, 0.02, 0.05, 0.1, 0.2], labels=yte, status=status)
    print(f"Breast-cancer XGBoost, Linf range-scaled, the cascade with {args.budget:,} queries "
          f"per input, seed {args.seed}.\n")
    print(f"Inputs {len(yte)}, clean accuracy {correct.mean():.3f}, counterexample found for "
          f"{run.found[correct].mean():.3f} of the correct ones; median radius "
          f"{np.median(radius[correct]):.4f}, mean {radius[correct].mean():.4f}\n")
    table = flips.pivot(index="eps", columns="group", values="flip_rate")
    print("Flip rate (share of correctly classified inputs flipped within eps):\n")
    cols = list(table.columns)
    print("| eps | " + " | ".join(f"class {c}" if c != "all" else "all" for c in cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for e, row in table.iterrows():
        print(f"| {e:g} | " + " | ".join(f"{row[c]:.3f}" for c in cols) + " |")
    broken = correct & run.found
    ood = ood_check(Xtr, Xte[correct], x_adv[broken], seed=args.seed)
    print(f"\n- IsolationForest fitted on training data (predict == 1 is an inlier): "
          f"clean test inputs {ood.clean_outliers}/{len(ood.clean_inlier)} outliers "
          f"({ood.clean_outlier_rate:.1%}); counterexamples {ood.adv_outliers}/"
          f"{len(ood.adv_inlier)} outliers ({ood.adv_outlier_rate:.1%})")
    pad = proxy_a_distance(Xte[broken], x_adv[broken], seed=args.seed, paired=True)
    print(f"- Proxy-A distance (counterexamples vs their inputs, paired split, "
          f"{pad.n_test} held-out rows): {pad.pad:.3f}, Wilson 95% [{pad.interval[0]:.3f}, "
          f"{pad.interval[1]:.3f}], bootstrap 95% [{pad.bootstrap[0]:.3f}, "
          f"{pad.bootstrap[1]:.3f}]")
    pad_all = proxy_a_distance(Xtr, x_adv[broken], seed=args.seed)
    print(f"- Proxy-A distance (counterexamples vs training inputs): {pad_all.pad:.3f}, Wilson 95% "
          f"[{pad_all.interval[0]:.3f}, {pad_all.interval[1]:.3f}]")
    if args.figures:
        out = Path(args.figures)
        out.mkdir(parents=True, exist_ok=True)
        proba = sk.predict_proba(Xte)
        proba_adv = sk.predict_proba(x_adv)
        save_figure(flip_rate_figure(radius, labels=yte, status=status,
                                     class_names={0: "malignant", 1: "benign"}),
                    out / "flip_rate.png")
        save_figure(score_scatter_figure(proba[broken], proba_adv[broken], radius[broken],
                                         prediction=pred[broken]), out / "score_scatter.png")
        save_figure(ood_figure(ood), out / "ood.png")
        print(f"\nfigures written to {out}")


if __name__ == "__main__":
    main()
