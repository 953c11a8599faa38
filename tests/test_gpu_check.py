"""benchmarks/gpu_check.py and the ResNet-18 it runs (#45 items 3-4)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from robustscope.models.resnet import resnet18
from robustscope.threats.tensors import constant

ROOT = Path(__file__).resolve().parents[1]


def test_resnet18_has_the_cifar_shape():
    net = resnet18()
    assert sum(p.numel() for p in net.parameters()) == 11_173_962
    with torch.no_grad():
        out = net(torch.rand(2, 3, 32, 32))
    assert out.shape == (2, 10) and torch.isfinite(out).all()
    # the same seed, the same weights; torch's global random state is left alone
    state = torch.random.get_rng_state()
    torch.testing.assert_close(resnet18(seed=1).linear.weight, resnet18(seed=1).linear.weight)
    assert torch.equal(state, torch.random.get_rng_state())


@pytest.mark.skipif(torch.cuda.is_available(), reason="the script's GPU path runs minutes")
def test_gpu_check_without_cuda_says_so_and_exits_0():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py")],
                         capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().count("\n") == 0 and "no CUDA device" in res.stdout


def test_constants_are_built_once_per_device_and_dtype():
    like = torch.zeros(1)
    a = constant(((1.0, 2.0), (3.0, 4.0)), like)
    assert a is constant([[1, 2], [3, 4]], like)
    assert constant([[1, 2], [3, 4]], like.double()).dtype == torch.float64


@pytest.mark.slow
def test_gpu_check_dry_run_on_the_cpu():
    """The script's device path, on the CPU (no memory or sync counts there)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"),
                          "--device", "cpu", "--n", "2", "--steps", "1", "--threats",
                          "linf,snow", "--budget", "10"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    rows = [line for line in res.stdout.splitlines() if line.startswith("| grid")
            or line.startswith("| radius")]
    assert [r.split("|")[1:3] for r in rows] == [
        [" grid ", " linf "], [" grid ", " snow "], [" radius ", " linf "],
        [" radius ", " l2 "]]
    assert "failed" not in res.stdout
