"""Paper, synthetic experiment: R_nu of random linear classifiers against their distance to the
Bayes classifier of two 2-D isotropic Gaussians.

Usage: ``python examples/paper/gaussians.py OUT_DIR [--seed 0]``; writes
``gaussians.png`` and ``gaussians.csv`` / ``.md`` (one row per distance).

Setup (choices where the paper is silent):
- classes N(mu1, sigma^2 I) (label 1) and N(mu2, sigma^2 I) (label 0), mu1 = (2, 1),
  mu2 = (0, -1), sigma = 1, 1,000 test points per class;
- Bayes classifier beta* = (mu1 - mu2) / sigma^2, beta0* = (|mu2|^2 - |mu1|^2) / (2 sigma^2);
- distance between classifiers: the Euclidean distance of the parameter vectors
  (beta, beta0) in R^3;
- at distance d, 200 random classifiers with ||beta|| = ||beta*|| held fixed (else
  R_nu = accuracy / ||beta|| would reward a small ||beta||): beta is beta* rotated by an angle
  theta uniform in [-theta_max, theta_max] (theta_max: the largest rotation that stays within
  distance d), and beta0 = beta0* +/- sqrt(d^2 - ||beta - beta*||^2) with a random sign;
- radii are exact (L2, no bounds): r = margin / ||beta|| for well-classified points, 0 else;
  loss = log(1 + exp(-margin)); R_nu by :func:`robustscope.scores.intrinsic.intrinsic_scores`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import parse_out, write_table  # noqa: E402

from robustscope.report.intrinsic_figures import save_figure  # noqa: E402
from robustscope.scores.intrinsic import intrinsic_scores  # noqa: E402


def r_nu_of(beta: np.ndarray, beta0: float, X: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(R_nu, accuracy) of the classifier sign(beta.x + beta0) on (X, y), y in {0, 1}."""
    margin = (2 * y - 1) * (X @ beta + beta0)
    ok = margin > 0
    radius = np.where(ok, margin / np.linalg.norm(beta), 0.0)
    loss = np.logaddexp(0.0, -margin)
    status = np.where(ok, "exact", "misclassified")
    return intrinsic_scores(radius, loss, status, n_bootstrap=0).R_nu, float(ok.mean())


def main() -> None:
    args = parse_out(__doc__.splitlines()[0], lambda p: (
        p.add_argument("--classifiers", type=int, default=200),
        p.add_argument("--points", type=int, default=1000)))
    rng = np.random.default_rng(args.seed)
    mu1, mu2, sigma = np.array([2.0, 1.0]), np.array([0.0, -1.0]), 1.0
    X = np.vstack([rng.normal(mu1, sigma, (args.points, 2)),
                   rng.normal(mu2, sigma, (args.points, 2))])
    y = np.r_[np.ones(args.points, int), np.zeros(args.points, int)]
    beta_s = (mu1 - mu2) / sigma**2
    beta0_s = (mu2 @ mu2 - mu1 @ mu1) / (2 * sigma**2)
    norm = np.linalg.norm(beta_s)
    base, base_acc = r_nu_of(beta_s, beta0_s, X, y)
    assert abs(base - base_acc / norm) < 1e-9  # R_nu = accuracy / ||beta|| exactly

    rows = []
    for d in np.linspace(0.0, 3.0 * norm, 31):
        theta_max = 2 * np.arcsin(min(1.0, d / (2 * norm)))
        vals, accs = [], []
        for _ in range(args.classifiers):
            th = rng.uniform(-theta_max, theta_max)
            rot = np.array([[np.cos(th), -np.sin(th)], [np.sin(th), np.cos(th)]])
            beta = rot @ beta_s
            rest = max(0.0, d**2 - np.sum((beta - beta_s) ** 2))
            beta0 = beta0_s + rng.choice([-1.0, 1.0]) * np.sqrt(rest)
            v, a = r_nu_of(beta, beta0, X, y)
            vals.append(v)
            accs.append(a)
        vals = np.array(vals)
        rows.append({"distance": d, "R_nu_mean": vals.mean(), "R_nu_std": vals.std(),
                     "R_nu_over_bayes": vals.mean() / base, "accuracy_mean": np.mean(accs)})
    df = write_table(rows, args.out, "gaussians")

    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    ax.errorbar(df.distance, df.R_nu_over_bayes, yerr=df.R_nu_std / base, fmt="o-", ms=3,
                capsize=2)
    ax.axhline(1.0, color="0.7", lw=0.8)
    ax.set_xlabel("distance of (β, β⁰) to the Bayes classifier (β*, β⁰*)")
    ax.set_ylabel("mean R_ν / R_ν(Bayes)")
    ax.set_title(f"Two 2-D Gaussians, ||β|| = ||β*|| = {norm:.3g}, "
                 f"{args.classifiers} classifiers per distance", fontsize=9)
    fig.tight_layout()
    save_figure(fig, args.out / "gaussians.png")
    print(f"Bayes classifier: accuracy {base_acc:.4f}, R_nu {base:.4f} (= acc/||beta*||)")
    print(df.to_string(index=False, float_format=lambda v: f"{v:.4g}"))


if __name__ == "__main__":
    main()
