"""An image grid on the Ray backend with two CPU workers equals the single-process run
(#45 item 5): the same radii, statuses and counterexamples, and the same queries but for the
wrapping probe each worker process pays once."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest
import torch
from scale_helpers import SRC, TESTS

from robustscope.models.toy import stripes_dataset, train_tiny_cnn
from robustscope.runs.runner import run_spec_file

ray = pytest.importorskip("ray")

SPEC = """\
seed: 5
model: {{path: {model}}}
data: {{path: {data}}}
threats:
  - name: snow
  - name: brightness
  - name: linf
    strengths: {{max: 0.1, num: 5}}
solver: {{budget: 120}}
scores: {{n_bootstrap: 10, ood: false, pad: false}}
outputs: {{dir: {out}, store: null, adversarial: true}}
execution: {{shard_size: 4, workers: {workers}}}
"""
THREATS = ("snow", "brightness", "linf")


def _table(out, threat) -> pd.DataFrame:
    return pd.read_csv(out / f"radii_{threat}.csv").drop(columns=["seconds"])


@pytest.mark.slow
def test_ray_image_grid_equals_one_process(tmp_path, monkeypatch):
    torch.set_num_threads(1)
    net = train_tiny_cnn(steps=100)
    torch.jit.script(net).save(str(tmp_path / "net.pt"))
    x, y = stripes_dataset(12, seed=9)
    np.savez(tmp_path / "data.npz", X=x.numpy(), y=y.numpy())
    for name, workers in (("local", 1), ("ray", 2)):
        (tmp_path / f"{name}.yaml").write_text(SPEC.format(
            model=tmp_path / "net.pt", data=tmp_path / "data.npz", out=tmp_path / name,
            workers=workers))
    run_spec_file(tmp_path / "local.yaml", quiet=True)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([SRC, TESTS,
                                                   os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")  # no network from tests
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        outcome = run_spec_file(tmp_path / "ray.yaml", quiet=True, backend="ray", workers=2)
    finally:
        ray.shutdown()
    assert outcome.manifest["provenance"]["execution"]["backend"] == "ray"
    probes = 0
    for t in THREATS:
        a, b = _table(tmp_path / "local", t), _table(tmp_path / "ray", t)
        assert len(a) == 12 and a["sample"].is_unique
        pd.testing.assert_frame_equal(a.drop(columns=["queries", "forward_queries"]),
                                      b.drop(columns=["queries", "forward_queries"]))
        # queries too, but for the wrapping probe (2 example rows, one pass each), which
        # each worker process pays once, on the first rows of its first shard
        extra = (b["queries"] - a["queries"]).to_numpy()
        assert set(extra) <= {0, 1}
        np.testing.assert_array_equal(extra, b["forward_queries"] - a["forward_queries"])
        assert (a["sample"].to_numpy()[extra == 1] % 4 < 2).all()
        probes += int(extra.sum())
        with np.load(tmp_path / "local" / f"adv_{t}.npz") as za, \
                np.load(tmp_path / "ray" / f"adv_{t}.npz") as zb:
            np.testing.assert_array_equal(za["X_adv"], zb["X_adv"])
    assert probes <= 2  # one more process than the local run
    # the grid threats were searched on their grids and broke some inputs
    snow = _table(tmp_path / "local", "snow")
    assert (snow["status"] == "attacked").any() or (snow["status"] == "censored").all()
