"""Smoke test of the paper scripts (slow: run with -m slow)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gaussians_script(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, str(ROOT / "examples/paper/gaussians.py"), str(tmp_path),
                    "--classifiers", "20", "--points", "300"], check=True, env=env,
                   capture_output=True, timeout=300)
    df = pd.read_csv(tmp_path / "gaussians.csv")
    assert (tmp_path / "gaussians.png").stat().st_size > 1000
    assert (tmp_path / "gaussians.md").exists()
    assert df.R_nu_over_bayes.iloc[0] == pytest.approx(1.0)
    # far from the Bayes classifier, R_nu is well below its value there
    assert df.R_nu_over_bayes.iloc[-1] < 0.8
