"""Sharded runs: same numbers for any backend and worker count, kill-and-resume, failing
rows, a worker that dies, a full disk."""

from __future__ import annotations

import errno
import json
import pickle
import random
import re
import signal
import sys
import time

import numpy as np
import pandas as pd
import pytest
from scale_helpers import (
    FlakyModel,
    adversarial,
    dies_once_file,
    gbm_spec,
    run_subprocess,
    table,
)

from robustscope.core.errors import InputError
from robustscope.runs import journal
from robustscope.runs.runner import RunIncomplete, run_spec_file
from robustscope.runs.shards import plan_shards, read_shard, shard_seed
from robustscope.runs.store import open_store

THREATS = ("linf", "l2")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted run, in this process (1 worker), with a store."""
    tmp = tmp_path_factory.mktemp("ref")
    spec = gbm_spec(tmp, "ref", "out", store="ref.sqlite")
    outcome = run_spec_file(spec, quiet=True)
    return tmp, outcome


def assert_same_tables(a, b) -> None:
    for t in THREATS:
        ta, tb = table(a, t), table(b, t)
        assert ta["sample"].is_unique and tb["sample"].is_unique
        pd.testing.assert_frame_equal(ta, tb)
        np.testing.assert_array_equal(adversarial(a, t), adversarial(b, t))


def store_rows(path, manifest) -> dict:
    with open_store(path) as store:
        return {t: store.radii(manifest["threats"][t]["store_run_id"]) for t in THREATS}


def test_shard_plan_and_seeds_do_not_depend_on_workers():
    a = plan_shards(25, ["linf", "l2"], 10, seed=0)
    assert [(s.threat, s.start, s.stop) for s in a] == [
        ("linf", 0, 10), ("linf", 10, 20), ("linf", 20, 25),
        ("l2", 0, 10), ("l2", 10, 20), ("l2", 20, 25)]
    assert len({s.seed for s in a}) == 6
    assert shard_seed(0, "linf", 1) == a[1].seed            # stable
    assert shard_seed(1, "linf", 1) != a[1].seed
    assert 0 <= a[0].seed < 2**63


def test_reference_run_is_complete_and_stored(reference):
    tmp, outcome = reference
    out = tmp / "out"
    plan = json.loads((out / journal.PLAN).read_text())
    assert plan["complete"] is True
    assert outcome.manifest["execution"]["shard_size"] == 6
    lines = (out / journal.JOURNAL).read_text().splitlines()
    assert len(lines) == 8 and all(json.loads(x)["status"] == "done" for x in lines)
    rows = store_rows(tmp / "ref.sqlite", outcome.manifest)
    for t in THREATS:
        csv = table(out, t)
        assert len(rows[t]) == 24 and rows[t]["sample"].is_unique
        np.testing.assert_allclose(rows[t]["radius"].to_numpy(), csv["radius"].to_numpy())


def test_assembled_columns_are_memory_maps_equal_to_the_shards(reference):
    """Bounded memory: the assembled per-input arrays are pages of files in
    shards/<threat>/columns, and hold exactly the shard files' rows."""
    tmp, outcome = reference
    out = tmp / "out"
    for sec in outcome.evaluation.sections:
        res = sec.result
        for name in ("radius", "status", "proba", "x_adv", "sample"):
            assert isinstance(getattr(res, name), np.memmap), name
            assert (out / "shards" / sec.name / "columns" / f"{name}.npy").exists()
        parts = [read_shard(p)[0] for p in sorted((out / "shards" / sec.name).glob("0*.npz"))]
        np.testing.assert_array_equal(res.sample, np.arange(24))
        np.testing.assert_array_equal(res.radius, np.concatenate([p.radius for p in parts]))
        np.testing.assert_array_equal(res.x_adv, np.concatenate([p.x_adv for p in parts]))
        assert res.status.tolist() == sum((p.status.tolist() for p in parts), [])


def test_two_local_workers_give_the_same_numbers(reference, tmp_path):
    ref_tmp, _ = reference
    spec = gbm_spec(tmp_path, "two", "out", workers=2)
    run_spec_file(spec, quiet=True)
    assert_same_tables(ref_tmp / "out", tmp_path / "out")


def test_shard_results_do_not_depend_on_the_other_shards(reference, tmp_path):
    """Fixed shard boundaries: fewer inputs leave the finished shards' numbers unchanged."""
    ref_tmp, _ = reference
    run_spec_file(gbm_spec(tmp_path, "short", "out", limit=12), quiet=True)
    for t in THREATS:
        pd.testing.assert_frame_equal(table(tmp_path / "out", t),
                                      table(ref_tmp / "out", t).iloc[:12])


@pytest.mark.parametrize("kill_after", [1, 5])
def test_killed_after_k_shards_then_resumed(reference, tmp_path, kill_after):
    ref_tmp, ref = reference
    spec = gbm_spec(tmp_path, "k", "out", store="k.sqlite")
    code = run_subprocess(spec, kill_after=kill_after, wait=120)
    assert code == -signal.SIGKILL
    done = (tmp_path / "out" / journal.JOURNAL).read_text().splitlines()
    assert len(done) == kill_after
    assert not (tmp_path / "out" / "run.json").exists()
    outcome = run_spec_file(spec, quiet=True)          # resumes automatically
    assert outcome.manifest["provenance"]["execution"]["resumed"] is True
    lines = (tmp_path / "out" / journal.JOURNAL).read_text().splitlines()
    assert len(lines) == 8                               # no shard ran twice
    assert_same_tables(ref_tmp / "out", tmp_path / "out")
    got, want = store_rows(tmp_path / "k.sqlite", outcome.manifest), store_rows(
        ref_tmp / "ref.sqlite", ref.manifest)
    for t in THREATS:
        pd.testing.assert_frame_equal(got[t].drop(columns=["seconds"]),
                                      want[t].drop(columns=["seconds"]))


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_killed_at_a_random_moment_then_resumed(reference, tmp_path, seed):
    ref_tmp, ref = reference
    spec = gbm_spec(tmp_path, "r", "out", store="r.sqlite")
    proc = run_subprocess(spec)
    time.sleep(random.Random(seed).uniform(2.0, 8.0))
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    outcome = run_spec_file(spec, quiet=True)
    assert_same_tables(ref_tmp / "out", tmp_path / "out")
    got, want = store_rows(tmp_path / "r.sqlite", outcome.manifest), store_rows(
        ref_tmp / "ref.sqlite", ref.manifest)
    for t in THREATS:
        assert got[t]["sample"].tolist() == list(range(24))
        np.testing.assert_array_equal(got[t]["radius"], want[t]["radius"])


def test_full_disk_stops_with_a_clear_error_and_resumes(reference, tmp_path, monkeypatch):
    import robustscope.runs.runner as runner_mod

    ref_tmp, _ = reference
    spec = gbm_spec(tmp_path, "disk", "out")
    real = runner_mod.write_shard
    calls = [0]

    def full_after_three(root, out, writer=None):
        calls[0] += 1
        if calls[0] > 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(root, out, writer)

    monkeypatch.setattr(runner_mod, "write_shard", full_after_three)
    shard_file = re.escape(str(tmp_path / "out" / "shards" / "linf" / "000003.npz"))
    with pytest.raises(RunIncomplete, match=rf"(?s)cannot write {shard_file} \(No space left "
                                            r"on device; shard linf/000003\).*--resume"):
        run_spec_file(spec, quiet=True)
    monkeypatch.setattr(runner_mod, "write_shard", real)
    assert len(list((tmp_path / "out" / "shards").rglob("*.npz"))) == 3
    run_spec_file(spec, quiet=True)
    assert_same_tables(ref_tmp / "out", tmp_path / "out")


def test_resume_errors(reference, tmp_path):
    ref_tmp, _ = reference
    spec = gbm_spec(tmp_path, "e", "out")
    with pytest.raises(InputError, match="no incomplete run"):
        run_spec_file(spec, quiet=True, resume=True)
    with pytest.raises(InputError, match="is complete"):
        run_spec_file(gbm_spec(tmp_path, "e2", str(ref_tmp / "out")), quiet=True, resume=True)
    code = run_subprocess(spec, kill_after=1, wait=120)
    assert code == -signal.SIGKILL
    other = gbm_spec(tmp_path, "e3", "out", limit=18)
    with pytest.raises(InputError, match=r"cannot be resumed: the spec changed \(data.limit\)"):
        run_spec_file(other, quiet=True)


def test_ray_backend_missing_gives_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(InputError, match=r"ray backend needs Ray: pip install"):
        run_spec_file(gbm_spec(tmp_path, "noray", "out"), quiet=True, backend="ray")


# -- a model that raises on some rows ---------------------------------------------------------
FLAKY_SPEC = """\
seed: 0
model: {path: model.pkl, trust_pickle: true}
data: {path: data.csv}
features:
  default: {lower: 0.0, upper: 1.0}
  features: [{index: 0, lower: 0.0, upper: 10.0, mutable: false}]
threats: [{name: linf}]
solver: {budget: 100}
scores: {n_bootstrap: 20, ood: false, pad: false}
outputs: {dir: out, store: flaky.sqlite}
execution: {shard_size: 8, workers: 1}
"""


def test_a_model_raising_on_some_rows_loses_only_those(tmp_path):
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, size=(20, 4))
    y = (X[:, 1] + X[:, 2] > 1).astype(int)
    poison = [3, 12, 13]
    X[poison, 0] = 5.0                 # feature 0 is immutable: only these rows ever raise
    model = FlakyModel(LogisticRegression().fit(X, y), threshold=2.0)
    (tmp_path / "model.pkl").write_bytes(pickle.dumps(model))
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(4)]).assign(label=y)
    frame.to_csv(tmp_path / "data.csv", index=False)
    (tmp_path / "spec.yaml").write_text(FLAKY_SPEC)
    outcome = run_spec_file(tmp_path / "spec.yaml", quiet=True)
    tab = pd.read_csv(tmp_path / "out" / "radii_linf.csv")
    assert tab["sample"].tolist() == list(range(20))
    assert tab.index[tab["status"] == "failed"].tolist() == poison
    assert tab.loc[poison, "label"].tolist() == y[poison].tolist()
    good = tab.drop(index=poison)
    assert good["status"].isin(["attacked", "censored", "misclassified"]).all()
    assert (good["status"] == "attacked").sum() >= 10
    failed = outcome.manifest["threats"]["linf"]["failed"]
    assert [f["sample"] for f in failed] == poison
    assert all("feature 0 above 2.0" in f["error"] for f in failed)
    assert "failed" in outcome.manifest["threats"]["linf"]["notes"]
    with open_store(tmp_path / "flaky.sqlite") as store:
        run_id = outcome.manifest["threats"]["linf"]["store_run_id"]
        assert store.run(run_id).status == "failed"
        assert store.radii(run_id)["sample"].tolist() == good["sample"].tolist()


def test_assembly_fills_shards_whose_rows_all_failed(tmp_path):
    """A first shard whose every row failed (no class count known) is assembled with the
    searched shards after it: fill values, true labels, errors, summed and joined meta."""
    from types import SimpleNamespace

    from robustscope.core.result import RadiusResult
    from robustscope.runs.runner import assemble
    from robustscope.runs.shards import ShardOutput, write_shard

    n, k = 3, 2
    shards = plan_shards(2 * n, ["linf"], n, seed=0)
    failed = RadiusResult.failures(np.arange(n), np.ones((n, 4)), dict.fromkeys(range(n), "x"),
                                   "linf", "pgd", 1.0, meta={"seed": 0})
    rng = np.random.default_rng(0)
    searched = RadiusResult(
        radius=rng.uniform(size=n), lower_bound=np.zeros(n),
        status=np.array(["attacked"] * n, dtype=object), x_adv=rng.normal(size=(n, 4)),
        label=np.zeros(n, np.int64), prediction=np.zeros(n, np.int64),
        adv_prediction=np.ones(n, np.int64), proba=rng.dirichlet(np.ones(k), n),
        proba_adv=rng.dirichlet(np.ones(k), n), loss=np.ones(n),
        forward_queries=np.ones(n, np.int64), backward_queries=np.zeros(n, np.int64),
        seconds=np.ones(n), threat="linf", solver="pgd", max_radius=1.0,
        classes=np.array(["no", "yes"]), sample=np.arange(n, 2 * n),
        meta={"seed": 9, "attack_runs": [1, 2, 3]})
    for shard, res in zip(shards, (failed, searched), strict=True):
        write_shard(tmp_path, ShardOutput(shard, res, 1.0))
    spec = SimpleNamespace(threats=[SimpleNamespace(name="linf")])
    y = np.array(["yes", "no", "maybe", "no", "no", "no"])
    results, seconds = assemble(tmp_path, spec, shards, (4,), y)
    res = results["linf"]
    assert seconds == {"linf": 2.0}
    assert res.status.tolist() == ["failed"] * n + ["attacked"] * n
    assert res.errors == dict.fromkeys(range(n), "x")
    assert res.proba.shape == (2 * n, k) and np.isnan(res.proba[:n]).all()
    np.testing.assert_array_equal(res.proba[n:], searched.proba)
    np.testing.assert_array_equal(res.x_adv[:n], np.ones((n, 4)))
    assert res.label[:n].tolist() == [-1, -1, -1]        # "maybe" is no class: unknown
    assert res.meta == {"seed": 9, "attack_runs": [0, 0, 0, 1, 2, 3]}
    res, _ = assemble(tmp_path, spec, shards, (4,), np.array(["yes", "no", "no"] * 2))
    assert res["linf"].label[:n].tolist() == [1, 0, 0]    # true classes of the failed rows
    table = res["linf"].to_dataframe()
    assert table["label"].tolist() == ["yes", "no", "no", "no", "no", "no"]
    assert table["prediction"].isna().tolist() == [True] * n + [False] * n


@pytest.mark.slow
def test_a_dead_local_worker_fails_its_shards_and_the_run_resumes(reference, tmp_path):
    ref_tmp, _ = reference
    model = dies_once_file(tmp_path, tmp_path / "died")  # kills the first worker calling it
    spec = gbm_spec(tmp_path, "dead", "out", workers=2, model=model)
    with pytest.raises(RunIncomplete, match=r"(?s)shard\(s\) failed.*BrokenProcessPool"
                                            r".*--resume"):
        run_spec_file(spec, quiet=True)
    assert (tmp_path / "died").exists()
    run_spec_file(spec, quiet=True)
    assert_same_tables(ref_tmp / "out", tmp_path / "out")


def test_cli_resume_and_backend_options(tmp_path, monkeypatch):
    import typer
    from typer.testing import CliRunner

    from robustscope.cli import run as run_cmd

    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """test app"""

    run_cmd.register(app)
    spec = gbm_spec(tmp_path, "cli", "out")
    cli = CliRunner()
    res = cli.invoke(app, ["run", str(spec), "--quiet", "--resume", str(tmp_path / "out")])
    assert res.exit_code == 2 and "no incomplete run" in res.output
    res = cli.invoke(app, ["run", str(spec), "--quiet", "--resume", str(tmp_path / "a"),
                           "--out-dir", str(tmp_path / "b")])
    assert res.exit_code == 2 and "not two different folders" in res.output
    monkeypatch.setitem(sys.modules, "ray", None)
    res = cli.invoke(app, ["run", str(spec), "--quiet", "--backend", "ray"])
    assert res.exit_code == 2 and "pip install" in res.output


def test_run_folder_tables_round_trip_over_several_chunks(tmp_path, monkeypatch):
    """The radius CSV and the counterexample NPZ are written a chunk of rows at a time;
    read back, they hold every row exactly (chunks of 7 rows over 40; image-shaped
    counterexamples)."""
    from robustscope.core.result import RadiusResult
    from robustscope.runs import runner

    monkeypatch.setattr(runner, "TABLE_CHUNK", 7)
    n = 40
    rng = np.random.default_rng(3)
    x = rng.normal(size=(n, 1, 2, 3))
    radius = rng.uniform(size=n)
    status = np.where(rng.uniform(size=n) < 0.5, "exact", "attacked")
    res = RadiusResult(
        radius=radius, lower_bound=radius / 2, status=status, x_adv=x,
        label=np.zeros(n, int), prediction=np.zeros(n, int), adv_prediction=np.ones(n, int),
        proba=np.full((n, 2), 0.5), proba_adv=np.full((n, 2), 0.5), loss=radius,
        forward_queries=np.arange(n), backward_queries=np.zeros(n, int), seconds=radius,
        threat="linf", solver="exact", max_radius=1.0)
    runner._write_table(res, tmp_path / "radii.csv")
    runner._save_adversarial(res, tmp_path / "adv.npz")
    table = pd.read_csv(tmp_path / "radii.csv")
    assert len(table) == n
    assert np.allclose(table["radius"], radius, rtol=1e-12)
    assert table["status"].tolist() == status.tolist()
    with np.load(tmp_path / "adv.npz") as saved:
        assert np.array_equal(saved["X_adv"], x)
        assert np.array_equal(saved["radius"], radius)
        assert saved["status"].tolist() == status.tolist()
