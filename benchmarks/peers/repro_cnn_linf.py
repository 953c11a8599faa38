"""Reproduction for the lead: on the tiny CNN (Linf), two inputs whose nearest boundary is the
runner-up class where ``solver="auto"`` ends 1.4-2.2x above what plain ``solver="pgd"`` and
Foolbox's FMN find (inputs 15 and 19 of the peer benchmark's tiny-CNN set).

Run: ``OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/peers/repro_cnn_linf.py``
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import models as D  # noqa: E402

from robustscope.search.engine import radius  # noqa: E402


def main() -> None:
    torch.set_num_threads(1)
    case = D.toy_cnn(20)
    X, y, net = case.X[[15, 19]], case.y[[15, 19]], case.torch_model
    with torch.no_grad():
        print("labels", y, "clean logits\n", net(torch.as_tensor(X, dtype=torch.float32)))
    for solver in ("auto", "minnorm", "pgd"):
        r = radius(net, X, y, threat="linf", space=case.space, solver=solver, budget=1000)
        print(f"{solver:8s} radius {r.radius} passes {r.queries} class {r.adv_prediction}")
    r = radius(net, X, y, threat="linf", space=case.space, solver="minnorm", budget=4000)
    print(f"minnorm, 4000 passes: radius {r.radius} class {r.adv_prediction}")
    try:
        import foolbox as fb
    except ImportError:
        return
    xt = torch.as_tensor(X, dtype=torch.float32)
    _, adv, _ = fb.attacks.LInfFMNAttack(steps=100)(fb.PyTorchModel(net, bounds=(0, 1)), xt,
                                                    torch.as_tensor(y), epsilons=None)
    size = (adv.double() - torch.as_tensor(X)).abs().flatten(1).max(1).values
    print(f"Foolbox FMN: radius {size.numpy()} class {net(adv).argmax(1).numpy()}")


if __name__ == "__main__":
    main()
