"""Check robustscope on a CUDA device: the ResNet-18 grid, a radius batch, host syncs (#45).

    python benchmarks/gpu_check.py                 # where torch.cuda.is_available()
    python benchmarks/gpu_check.py --tests         # also the CUDA branches of the tests

Without CUDA it prints one line and exits 0. With CUDA, on ``--device`` (default ``cuda``;
``--device cpu`` runs the same calls on the CPU, without memory and sync counts, to check
the script itself):

- ``grid_robustness`` of a ResNet-18 (``robustscope.models.resnet``, random weights, labels =
  its own predictions so that every input is attacked) on ``--n`` stripe images per
  threat, for the 9 ranked threats (LPIPS through ``RandomTrunk``), then ``radius`` under
  Linf and L2 (budget ``--budget``);
- per call: images/s, wall time, peak CUDA memory (``torch.cuda.max_memory_allocated``) and
  the host synchronisations torch reports under ``torch.cuda.set_sync_debug_mode("warn")``
  (each synchronising call warns once), with the PGD steps the call ran, so that syncs per
  step can be read off (the attacks' early stop drops broken inputs, which needs the host
  to see the mask: about one sync per step is by design; many per step would be a bug);
- with ``--tests``: ``pytest`` on the tests that have a CUDA branch.

Prints markdown on stdout; exit code 1 if a call fails or a counterexample is off the
device.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import warnings

RANKED = ["linf", "l2", "l1", "elastic", "jpeg-linf", "jpeg-l1", "recolor", "stadv", "lpips"]
CUDA_TESTS = ["tests/test_image_threats.py", "tests/test_unforeseen_threats.py",
              "-k", "device or seeded"]


def _count_syncs(fn):
    """Run ``fn()`` with torch's sync debug mode on warn; return (its value, syncs)."""
    import torch

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            value = fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = sum("synchroniz" in str(w.message).lower() for w in caught)
    return value, syncs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu (a dry run)")
    ap.add_argument("--n", type=int, default=64, help="images per call")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--budget", type=int, default=200)
    ap.add_argument("--threats", default=",".join(RANKED))
    ap.add_argument("--tests", action="store_true", help="also run the CUDA tests")
    args = ap.parse_args()

    import torch

    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        print(f"gpu_check: no CUDA device here (torch {torch.__version__}, CUDA build "
              f"{torch.version.cuda}); nothing to check")
        return 0
    cuda = dev.type == "cuda"

    from robustscope import radius
    from robustscope.models.resnet import resnet18
    from robustscope.models.toy import RandomTrunk, stripes_dataset
    from robustscope.search.grid import grid_robustness

    net = resnet18().to(dev).to(memory_format=torch.channels_last)
    x, _ = stripes_dataset(args.n, size=32, seed=3)
    with torch.no_grad():
        y = net(x.to(dev)).argmax(1).cpu()
    name = torch.cuda.get_device_name(dev) if cuda else str(dev)
    print(f"Device: {name}; torch {torch.__version__}; ResNet-18 "
          f"(random weights, channels-last), {args.n} images per call, {args.steps} PGD "
          f"steps per grid run, radius budget {args.budget}.\n")
    print("| call | threat | images/s | wall (s) | peak memory (MiB) | host syncs | "
          "PGD steps run | syncs / step |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    failed = False
    calls = [("grid", t) for t in args.threats.split(",") if t] + \
        [("radius", "linf"), ("radius", "l2")]
    count = _count_syncs if cuda else (lambda fn: (fn(), 0))
    for task, name in calls:
        if cuda:
            torch.cuda.reset_peak_memory_stats(dev)
            torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        try:
            if task == "grid":
                opts = {"features": RandomTrunk().to(dev)} if name == "lpips" else {}
                res, syncs = count(lambda name=name, opts=opts: grid_robustness(
                    net, x, y, name, steps=args.steps, device=dev, **opts))
                steps_run = int(res.runs.sum()) * args.steps
                on_device = res.x_adv.device.type == dev.type
            else:
                res, syncs = count(lambda name=name: radius(
                    net, x.numpy(), y.numpy(), threat=name, budget=args.budget, device=dev))
                steps_run = int(res.queries.sum()) if hasattr(res, "queries") else 0
                on_device = True
        except Exception as err:  # report every call, then fail
            print(f"| {task} | {name} | failed: {type(err).__name__}: {err} | | | | | |")
            failed = True
            continue
        if cuda:
            torch.cuda.synchronize(dev)
        wall = time.perf_counter() - t0
        peak = torch.cuda.max_memory_allocated(dev) / 2 ** 20 if cuda else float("nan")
        per_step = (f"{syncs / steps_run:.2f}" if cuda and task == "grid" and steps_run
                    else "—")
        peak_s, syncs_s = (f"{peak:.0f}", str(syncs)) if cuda else ("—", "—")
        print(f"| {task} | {name} | {args.n / wall:.1f} | {wall:.1f} | {peak_s} | {syncs_s} | "
              f"{steps_run if task == 'grid' else '—'} | {per_step} |")
        failed |= not on_device
    if args.tests:
        code = subprocess.call([sys.executable, "-m", "pytest", "-q", *CUDA_TESTS])
        print(f"\nCUDA tests: exit code {code}")
        failed |= code != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
