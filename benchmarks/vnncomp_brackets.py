"""Radius brackets of the VNN-COMP-style MNIST digits by each certificate (issue 41).

The networks and digits of ``benchmarks/vnncomp_mnist.py`` (256x2, 256x4, 256x6 ReLU MLPs
exported to ONNX with a fixed batch of 1 and read back as white boxes; the first
``--images`` correctly classified validation digits). Per network and certificate, one
radius search over the digits (Linf, box [0, 1]; branch and bound and the MILP get
``--exact-time`` seconds per input) gives each digit's bracket ``lower_bound <= radius <=
verified radius``. The certificates: ``radius(certify=...)`` for ``crown``, ``alpha-crown``
and ``bab``; ``milp`` is the network MILP, ``radius(solver="exact", certify="crown")``, as
``verify --bracket milp`` runs it.

Reported: the median verified radius, the median and smallest ``lower / radius``, the
brackets closed (status ``exact``), the seconds per input, and the instances of the main
benchmark (each digit at each eps) that the bracket alone decides: ``sat`` where the
verified radius is at most eps, ``unsat`` where the certified bound is above it. A
contradiction is a digit whose certified bound under one certificate lies above a verified
radius under another.

Run: ``python benchmarks/vnncomp_brackets.py [--images 15] [--exact-time 20]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from vnncomp_mnist import exported_network, network_arguments, setting_up  # noqa: E402

from robustscope import FeatureSpace, radius  # noqa: E402
from robustscope.models.base import Classifier  # noqa: E402
from robustscope.models.loaders import load_model  # noqa: E402
from robustscope.search.plan import SearchConfig  # noqa: E402

METHODS = ("crown", "alpha-crown", "bab", "milp")


def bracket(model: Classifier, X: np.ndarray, y: np.ndarray, method: str, exact_time: float
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """``(verified radius, certified bound, exact status, seconds per input)`` per digit."""
    space = FeatureSpace.box((784, 1), 0.0, 1.0)
    config = SearchConfig(exact_time_limit=exact_time)
    t0 = time.perf_counter()
    if method == "milp":
        res = radius(model, X, y, threat="linf", space=space, solver="exact",
                     certify="crown", config=config)  # as verify's --bracket milp
    else:
        res = radius(model, X, y, threat="linf", space=space, certify=method, config=config)
    seconds = (time.perf_counter() - t0) / len(X)
    found = np.isfinite(res.radius) & (res.status != "censored")
    upper = np.where(found, res.radius, np.inf)
    return upper, np.asarray(res.lower_bound, dtype=float), res.status == "exact", seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    network_arguments(ap)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--exact-time", type=float, default=20.0)
    args = ap.parse_args()
    eps_list, (Xtr, ytr, Xva, yva), work = setting_up(args, "vnncomp_brackets_")
    print(f"The networks and digits of the section above ({args.images} per network); Linf "
          f"in the box [0, 1]; branch and bound and the MILP get {args.exact_time:g} s per "
          f"input; 2 CPU cores. Decided: of the {args.images * len(eps_list)} instances per "
          f"network (eps in {{{args.eps}}}), those the bracket alone answers.\n")
    print("| network | certificate | median r | median lb / r | min lb / r | closed | "
          "s per input | decided (sat + unsat) |")
    print("|---|---|---|---|---|---|---|---|")
    contradictions = []
    for depth in (int(d) for d in args.depths.split(",")):
        net, path = exported_network(depth, args.epochs, Xtr, ytr, work)
        model = load_model(path, example=Xva[:2].reshape(2, 784, 1))
        with torch.no_grad():
            pred = net(torch.as_tensor(Xva, dtype=torch.float32)).argmax(1).numpy()
        chosen = np.flatnonzero(pred == yva)[:args.images]
        X = Xva[chosen].reshape(-1, 784, 1).astype(np.float32)
        y = yva[chosen]
        uppers, lowers = {}, {}
        for method in args.methods.split(","):
            upper, lower, closed, seconds = bracket(model, X, y, method, args.exact_time)
            uppers[method], lowers[method] = upper, lower
            ratio = lower / upper
            sat = sum(int((upper <= e).sum()) for e in eps_list)
            unsat = sum(int((lower > e).sum()) for e in eps_list)
            print(f"| 256x{depth} | {method} | {np.median(upper):.4f} | {np.median(ratio):.3f} "
                  f"| {np.min(ratio):.3f} | {int(closed.sum())} of {len(X)} | {seconds:.2f} | "
                  f"{sat + unsat} ({sat} + {unsat}) |", flush=True)
            print(f"  256x{depth} {method} done", file=sys.stderr, flush=True)
        best_upper = np.min(np.stack(list(uppers.values())), axis=0)
        for method, lower in lowers.items():
            bad = np.flatnonzero(lower > best_upper * (1 + 1e-6))
            contradictions += [f"256x{depth} digit {chosen[i]}: {method} certifies "
                               f"{lower[i]:.5g} above a verified {best_upper[i]:.5g}"
                               for i in bad]
    print(f"\nContradictions: {len(contradictions)}"
          + ("" if not contradictions else " — " + "; ".join(contradictions)))


if __name__ == "__main__":
    main()
