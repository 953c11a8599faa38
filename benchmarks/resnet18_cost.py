"""What a user pays to run robustscope on a ResNet-18 (3 x 32 x 32, 11.2M parameters), #45.

For each of MultiRobustBench's 9 ranked threats, ``grid_robustness`` (bisection over the
20-level grid, ``--steps`` PGD steps per run), and ``radius`` under Linf and L2 (budget
``--budget`` passes per input), each in its own child process (so that its peak resident
memory is its own):

- images/s: inputs over wall time of the call (model wrapping included);
- passes per image: forward and backward rows the network saw, over the inputs (counted by
  a wrapper around the network, not by robustscope's ledger);
- model share: the time inside the network's forward (wrapper) and backward (from the
  gradient reaching its output to the gradient reaching its input, autograd hooks) over
  the wall time; the rest is robustscope's own work (threat rendering, projection,
  verification, bookkeeping);
- peak RSS of the child process (``ru_maxrss``).

Weights are random (``robustscope.models.resnet.resnet18``, seed 0) and the labels are the
network's own predictions, so every input is attacked (the point is cost, not accuracy);
images are the toy stripes (``stripes_dataset``) at 32 x 32. LPIPS compares images through
``RandomTrunk`` (robustscope ships no AlexNet). Threads: ``--threads`` for torch in each
child (the search is told the same number).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import multiprocessing as mp
import resource
import sys
import time

RANKED = ["linf", "l2", "l1", "elastic", "jpeg-linf", "jpeg-l1", "recolor", "stadv", "lpips"]


def _run(task: str, name: str, n: int, steps: int, budget: int, threads: int,
         channels_last: bool) -> dict:
    import torch

    from robustscope import radius
    from robustscope.models.resnet import resnet18
    from robustscope.models.toy import RandomTrunk, stripes_dataset
    from robustscope.search.grid import grid_robustness

    torch.set_num_threads(threads)
    net = resnet18()
    if channels_last:
        net = net.to(memory_format=torch.channels_last)

    class Timed(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner
            self.fwd = self.bwd = 0.0
            self.fwd_rows = self.bwd_rows = 0
            self._start: list[float] = []

        def forward(self, x):
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            t = time.perf_counter()
            out = self.inner(x)
            self.fwd += time.perf_counter() - t
            self.fwd_rows += x.shape[0]
            if out.requires_grad and x.requires_grad:
                rows = x.shape[0]

                def started(g):
                    self._start.append(time.perf_counter())

                def finished(g):
                    self.bwd += time.perf_counter() - self._start.pop()
                    self.bwd_rows += rows

                out.register_hook(started)
                x.register_hook(finished)
            return out

    model = Timed(net).eval()
    x, _ = stripes_dataset(n, size=32, seed=3)
    with torch.no_grad():
        y = net(x).argmax(1)
    t0 = time.perf_counter()
    if task == "grid":
        opts = {"features": RandomTrunk()} if name == "lpips" else {}
        res = grid_robustness(model, x, y, name, steps=steps, threads=threads, **opts)
        broken = float((res.level < len(res.grid)).mean())
    else:
        res = radius(model, x.numpy(), y.numpy(), threat=name, budget=budget, threads=threads)
        broken = float(sum(s in ("exact", "attacked", "censored") for s in res.status)) / n
    wall = time.perf_counter() - t0
    return {"task": task, "name": name, "n": n, "wall": wall,
            "fwd_rows": model.fwd_rows, "bwd_rows": model.bwd_rows,
            "model_s": model.fwd + model.bwd, "fwd_s": model.fwd, "bwd_s": model.bwd,
            "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "broken": broken}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4, help="images per threat")
    ap.add_argument("--steps", type=int, default=10, help="PGD steps per grid run")
    ap.add_argument("--budget", type=int, default=200, help="radius budget (passes/input)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--threats", default=",".join(RANKED))
    ap.add_argument("--channels-last", action="store_true")
    args = ap.parse_args()
    tasks = [("grid", t) for t in args.threats.split(",") if t] + \
        [("radius", "linf"), ("radius", "l2")]
    rows = []
    ctx = mp.get_context("spawn")
    for task, name in tasks:
        with cf.ProcessPoolExecutor(1, mp_context=ctx) as pool:
            r = pool.submit(_run, task, name, args.n, args.steps, args.budget, args.threads,
                            args.channels_last).result()
        rows.append(r)
        print(f"{task} {name}: {r['wall']:.1f} s", file=sys.stderr, flush=True)
    print(f"ResNet-18 (11.2M parameters, random weights, labels = its predictions), "
          f"{args.n} images of 3 x 32 x 32 per row, {args.threads} torch threads, "
          f"channels-last {'on' if args.channels_last else 'off'}; grid: bisection over the "
          f"20 levels, {args.steps} PGD steps per run; radius: budget {args.budget} passes "
          f"per input.\n")
    print("| call | threat | images/s | s/image | passes/image (fwd + bwd) | model share "
          "| robustscope share | peak RSS (MB) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        share = r["model_s"] / r["wall"]
        print(f"| {r['task']} | {r['name']} | {r['n'] / r['wall']:.3f} | "
              f"{r['wall'] / r['n']:.1f} | {r['fwd_rows'] / r['n']:.0f} + "
              f"{r['bwd_rows'] / r['n']:.0f} | {100 * share:.0f}% | "
              f"{100 * (1 - share):.0f}% | {r['rss_mb']:.0f} |")
    over = [f"{r['task']} {r['name']}" for r in rows if 1 - r["model_s"] / r["wall"] > 0.10]
    total = sum(r["wall"] for r in rows)
    model = sum(r["model_s"] for r in rows)
    print(f"\nOver all rows robustscope's own work is {100 * (1 - model / total):.0f}% of the "
          f"time (target <= 10%); rows above 10%: "
          f"{', '.join(over) or 'none'}.")


if __name__ == "__main__":
    main()
