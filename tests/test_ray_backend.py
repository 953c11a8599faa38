"""The Ray backend on a local 2-CPU cluster: the same tables as the local backend, and a
worker that dies once is retried by Ray."""

from __future__ import annotations

import os

import pytest
from scale_helpers import SRC, TESTS, dies_once_file, gbm_spec, slow_black_box_file
from test_sharded_runs import assert_same_tables

from robustscope.runs.runner import run_spec_file

ray = pytest.importorskip("ray")


def test_ray_matches_local_and_retries_a_dead_worker(tmp_path, monkeypatch):
    run_spec_file(gbm_spec(tmp_path, "local", "local", workers=1), quiet=True)
    marker = tmp_path / "worker-died"
    model = dies_once_file(tmp_path, marker)    # kills the first actor process calling it
    # Ray workers inherit the environment of the cluster started here
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([SRC, TESTS,
                                                   os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")  # no network from tests
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        outcome = run_spec_file(gbm_spec(tmp_path, "ray", "ray", model=model), quiet=True,
                                backend="ray", workers=2)
    finally:
        ray.shutdown()
    assert marker.exists()      # one actor did die (os._exit); Ray restarted it, re-ran its shards
    assert outcome.manifest["provenance"]["execution"]["backend"] == "ray"
    assert_same_tables(tmp_path / "local", tmp_path / "ray")


def test_ray_shards_in_flight_report_progress(tmp_path, monkeypatch):
    """Reports reach the driver through Ray's queue while shards run (the bar moves before
    any shard is done), and never after a shard's result."""
    from test_run_progress import RecordingProgress, _check_events

    from robustscope.runs.runner import run_spec
    from robustscope.runs.spec import load_spec

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([SRC, TESTS,
                                                   os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    spec = load_spec(gbm_spec(tmp_path, "ray", str(tmp_path / "out"), limit=16, shard=8,
                              model=slow_black_box_file(tmp_path, 0.01)))
    spec.execution.backend, spec.execution.workers = "ray", 2
    prog = RecordingProgress()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        outcome = run_spec(spec, quiet=True, progress=prog)
    finally:
        ray.shutdown()
    assert outcome.manifest["provenance"]["execution"]["backend"] == "ray"
    _check_events(prog, 8, 32)
