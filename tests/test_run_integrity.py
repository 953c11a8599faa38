"""Run integrity under faults (issue #42): a resumed run never mixes models or data, one run
per folder, outputs only where they belong, every store reachable, and failures named with
the way out. Each drill checks rows in = rows out, that nothing comes from another model or
dataset, and the message.

SIGTERM under the Ray backend is drilled in ``test_run_signals.py``; the counterexamples that
must flip alone in ``test_flip_alone.py``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import pickle
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scale_helpers import SRC, TESTS, BlackBox, adversarial, table
from typer.testing import CliRunner

from robustscope.cli.app import app
from robustscope.core.errors import InputError
from robustscope.runs import journal
from robustscope.runs.lock import LOCK, FolderInUse, run_folder_lock
from robustscope.runs.progress import RunProgress
from robustscope.runs.runner import RunIncomplete, run_spec, run_spec_file
from robustscope.runs.shards import plan_shards, shard_path
from robustscope.runs.spec import load_spec

THREATS = ("linf", "l2")

CSV_SPEC = """\
seed: 3
model: {{path: {model}, trust_pickle: {trust}}}
data: {{path: {data}}}
threats:
  - name: linf
  - name: l2
solver: {{budget: 120}}
scores: {{n_bootstrap: 10, ood: false, pad: false}}
outputs: {{dir: {out}, store: {store}}}
execution: {{shard_size: 5, workers: 1}}
"""


class Stop(Exception):
    """Raised by :func:`stopping_after`: the run stops as if killed (its plan stays
    incomplete, the shards so far stay on disk)."""


def stopping_after(shards: int) -> RunProgress:
    """A silent progress that raises :class:`Stop` once ``shards`` shards are committed."""

    class StopAfter(RunProgress):
        @contextlib.contextmanager
        def stage(self, name: str, total: int) -> Iterator[Callable[[int], None]]:
            left = [shards]
            with super().stage(name, total) as advance:
                def advance_then_stop(k: int) -> None:
                    advance(k)
                    left[0] -= 1
                    if left[0] <= 0:
                        raise Stop

                yield advance_then_stop

    return StopAfter(1, None)


def run_until_stopped(spec_path: Path, shards: int) -> None:
    spec = load_spec(spec_path)
    with pytest.raises(Stop):
        run_spec(spec, spec_path.read_text(), quiet=True, progress=stopping_after(shards),
                 spec_path=spec_path)


def _gbm(seed: int, rows: slice):
    from sklearn.datasets import load_breast_cancer
    from sklearn.ensemble import GradientBoostingClassifier

    X, y = load_breast_cancer(return_X_y=True)
    return GradientBoostingClassifier(n_estimators=20, max_depth=2,
                                      random_state=seed).fit(X[rows], y[rows])


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """Two black-box models fitted on different rows (``a.pkl``, ``b.pkl``) and a CSV of 15
    breast-cancer inputs (``data.csv``) in one folder."""
    from sklearn.datasets import load_breast_cancer

    tmp = tmp_path_factory.mktemp("inputs")
    (tmp / "a.pkl").write_bytes(pickle.dumps(BlackBox(_gbm(0, slice(0, 300)))))
    (tmp / "b.pkl").write_bytes(pickle.dumps(BlackBox(_gbm(1, slice(200, 500)))))
    data = load_breast_cancer(as_frame=True)
    frame = data.data.iloc[500:515].copy()
    frame["label"] = data.target.iloc[500:515].to_numpy()
    frame.to_csv(tmp / "data.csv", index=False)
    return tmp


def csv_spec(tmp: Path, files: Path, name: str = "spec", model: str = "a.pkl",
             data: Path | None = None, out: str = "out", store: str = "null",
             trust: bool = True) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(CSV_SPEC.format(model=files / model, data=data or files / "data.csv",
                                    out=out, store=store, trust=str(trust).lower()))
    return path


def assert_same_run(a: Path, b: Path) -> None:
    """Two run folders hold the same rows, each once, with the same counterexamples."""
    for t in THREATS:
        ta, tb = table(a, t), table(b, t)
        assert ta["sample"].is_unique and len(ta) == len(tb)
        pd.testing.assert_frame_equal(ta, tb)
        np.testing.assert_array_equal(adversarial(a, t), adversarial(b, t))


@pytest.fixture(scope="module")
def clean_runs(files, tmp_path_factory) -> dict[str, Path]:
    """Uninterrupted runs of model a and of model b on the data: the references."""
    tmp = tmp_path_factory.mktemp("clean")
    out = {}
    for model in ("a.pkl", "b.pkl"):
        spec = csv_spec(tmp, files, model[0], model=model, out=f"out-{model[0]}")
        out[model] = run_spec_file(spec, quiet=True).out_dir
    return out


# -- 1. a run is bound to its inputs ----------------------------------------------------------
def test_a_resume_with_another_model_is_refused_and_restart_starts_afresh(files, clean_runs,
                                                                          tmp_path):
    model = tmp_path / "model.pkl"
    model.write_bytes((files / "a.pkl").read_bytes())
    spec = csv_spec(tmp_path, files, model=str(model))
    run_until_stopped(spec, 2)
    model.write_bytes((files / "b.pkl").read_bytes())      # same format, another model
    result = CliRunner().invoke(app, ["run", str(spec), "-q"])
    assert result.exit_code == 2
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert len(lines) == 1
    assert f"model.path {model} has other contents than when the run started" in lines[0]
    assert "--restart" in lines[0]
    plan = json.loads((tmp_path / "out" / journal.PLAN).read_text())
    assert plan["complete"] is False                        # nothing was touched
    assert len(list((tmp_path / "out" / "shards").rglob("*.npz"))) == 2
    result = CliRunner().invoke(app, ["run", str(spec), "-q", "--restart"])
    assert result.exit_code == 0, result.stderr
    assert_same_run(tmp_path / "out", clean_runs["b.pkl"])  # every row from model b


def test_a_resume_with_changed_data_is_refused(files, clean_runs, tmp_path):
    data = tmp_path / "data.csv"
    frame = pd.read_csv(files / "data.csv")
    frame.to_csv(data, index=False)
    spec = csv_spec(tmp_path, files, data=data)
    run_until_stopped(spec, 3)
    frame.iloc[:5, :-1] *= 1.5                              # rows 0-4 scaled, same count
    frame.to_csv(data, index=False)
    with pytest.raises(InputError, match=f"data.path {data} has other contents"):
        run_spec_file(spec, quiet=True)
    frame = pd.read_csv(files / "data.csv")                 # put back: the resume goes on
    frame.to_csv(data, index=False)
    run_spec_file(spec, quiet=True)
    assert_same_run(tmp_path / "out", clean_runs["a.pkl"])


def test_a_resume_with_a_changed_feature_file_is_refused(files, tmp_path):
    """The feature file is an input as the model and data are: changed in place between a
    stop and the resume, the resume is refused naming it."""
    features = tmp_path / "features.yaml"
    features.write_text("default: {type: real}\n")
    spec = csv_spec(tmp_path, files)
    spec.write_text(spec.read_text() + f"features: {{file: {features}}}\n")
    run_until_stopped(spec, 2)
    features.write_text("default: {type: real, scale: 2.0}\n")
    result = CliRunner().invoke(app, ["run", str(spec), "-q"])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert f"features.file {features} has other contents than when the run started" \
        in result.stderr


def test_a_resume_by_another_version_or_spec_is_refused(files, tmp_path, monkeypatch):
    spec = csv_spec(tmp_path, files)
    run_until_stopped(spec, 1)
    from robustscope.runs import binding

    monkeypatch.setattr(binding, "installed_version", lambda: "0.0.0-other")
    with pytest.raises(InputError, match=r"planned by robustscope .* \(this is 0.0.0-other\)"):
        run_spec_file(spec, quiet=True)
    monkeypatch.undo()
    spec.write_text(spec.read_text().replace("budget: 120", "budget: 130"))
    with pytest.raises(InputError, match=r"the spec changed \(solver.budget\)"):
        run_spec_file(spec, quiet=True)


def test_the_run_records_its_inputs_hashes(files, clean_runs):
    import hashlib

    out = clean_runs["a.pkl"]
    manifest = json.loads((out / "run.json").read_text())
    recorded = manifest["provenance"]["inputs"]
    for key, name in (("model.path", "a.pkl"), ("data.path", "data.csv")):
        digest = hashlib.sha256((files / name).read_bytes()).hexdigest()
        assert recorded[key] == {"path": str(files / name), "sha256": f"sha256:{digest}"}
    report = (out / "report.html").read_text()
    shown = report[report.index('id="provenance"'):report.index("Full provenance (JSON)")]
    for key, name in (("model.path", "a.pkl"), ("data.path", "data.csv")):
        # the report's provenance shows both in its Inputs table, not only in the JSON
        digest = hashlib.sha256((files / name).read_bytes()).hexdigest()
        assert (f'<tr><td class="l">{key}</td><td class="l">{files / name}</td><td class="l">'
                f'<code class="hash">sha256:{digest}</code></td></tr>') in shown
    plan = json.loads((out / journal.PLAN).read_text())
    assert plan["inputs"]["files"] == recorded and plan["inputs"]["robustscope"]


def test_the_store_records_the_inputs_hashes(files, clean_runs, tmp_path):
    """The results store's run rows carry the same hashes as run.json (an SQLite store
    here; PostgreSQL in test_a_run_stores_into_postgresql_from_a_spec)."""
    from robustscope.runs.store import open_store

    db = tmp_path / "runs.db"
    outcome = run_spec_file(csv_spec(tmp_path, files, store=str(db)), quiet=True)
    assert_same_run(outcome.out_dir, clean_runs["a.pkl"])
    recorded = outcome.manifest["provenance"]["inputs"]
    with open_store(db) as store:
        for t in THREATS:
            info = store.run(outcome.manifest["threats"][t]["store_run_id"])
            assert info.config["inputs"] == recorded


# -- 2. one run per folder --------------------------------------------------------------------
def test_a_second_run_on_a_folder_in_use_stops_at_once(files, clean_runs, tmp_path):
    """Two real `robustscope run`s on one folder: the second stops at once naming the first's
    process, writes nothing, and the first finishes to the rows of an uninterrupted run.
    The first is paused (SIGSTOP) once its plan is written, so it holds the folder."""
    import signal
    import time

    spec = csv_spec(tmp_path, files)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, TESTS])}
    first = subprocess.Popen([sys.executable, "-m", "robustscope.cli.app", "run", str(spec),
                              "-q"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "out" / journal.PLAN).exists():
            assert first.poll() is None and time.monotonic() < deadline, first.stderr.read()
            time.sleep(0.01)
        first.send_signal(signal.SIGSTOP)
        journal_file = tmp_path / "out" / journal.JOURNAL
        before = journal_file.read_text() if journal_file.exists() else ""
        result = CliRunner().invoke(app, ["run", str(spec), "-q"])
        assert result.exit_code == 2
        assert result.stderr.strip() == (
            f"error: run folder {tmp_path / 'out'} is in use by process {first.pid} (another "
            "robustscope run); wait for it to end or use another --out-dir")
        after = journal_file.read_text() if journal_file.exists() else ""
        assert after == before                                  # the second wrote nothing
    finally:
        first.send_signal(signal.SIGCONT)
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert_same_run(tmp_path / "out", clean_runs["a.pkl"])     # rows in = rows out, model a's
    # a lock left by a killed holder is stale: the next run takes it over
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from robustscope.runs.lock import run_folder_lock\n"
         "with run_folder_lock(sys.argv[1]):\n    print('held', flush=True); time.sleep(60)",
         str(tmp_path / "out")], env=env, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.kill()
    holder.wait()
    outcome = run_spec_file(spec, quiet=True, resume=False)
    assert_same_run(outcome.out_dir, clean_runs["a.pkl"])
    assert (tmp_path / "out" / LOCK).read_text().strip() == str(os.getpid())


def test_the_lock_is_held_for_the_run_and_released_on_any_exit(tmp_path):
    with run_folder_lock(tmp_path / "run"):
        with pytest.raises(FolderInUse, match=f"in use by process {os.getpid()}"):
            with run_folder_lock(tmp_path / "run"):
                pass
    with contextlib.suppress(RuntimeError):
        with run_folder_lock(tmp_path / "run"):
            raise RuntimeError
    with run_folder_lock(tmp_path / "run"):  # released after the exception
        pass


# -- 3. outputs only where they belong --------------------------------------------------------
@pytest.mark.parametrize("where, message", [
    ("/", "is the file system's root"),
    ("HOME", "is the home folder"),
    ("INPUTS", "holds the run's model.path"),
    ("OTHER", "is not empty and not a robustscope run folder (it holds notes.txt)"),
])
def test_outputs_dir_refuses_folders_that_are_not_the_runs_own(files, tmp_path, monkeypatch,
                                                              where, message):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    out = {"HOME": str(tmp_path / "home"), "INPUTS": str(files), "OTHER": str(tmp_path / "other"),
           "/": "/"}[where]
    spec = csv_spec(tmp_path, files, out=out)
    before = sorted(p.name for p in Path(out).iterdir())
    result = CliRunner().invoke(app, ["run", str(spec), "-q"])
    assert result.exit_code == 2
    assert f"outputs.dir {out}: {message}" in result.stderr
    assert sorted(p.name for p in Path(out).iterdir()) == before   # nothing written


def test_outputs_dir_accepts_a_new_an_empty_or_a_run_folder(files, clean_runs, tmp_path):
    from robustscope.runs.outputs import check_run_outputs

    (tmp_path / "empty").mkdir()
    for out in (tmp_path / "new", tmp_path / "empty", clean_runs["a.pkl"]):
        check_run_outputs(load_spec(csv_spec(tmp_path, files, out=str(out))))


# -- 4. every store reachable -----------------------------------------------------------------
def test_a_store_url_keeps_its_double_slash(tmp_path):
    from robustscope.runs.outputs import check_run_outputs

    text = CSV_SPEC.format(model="m.pkl", data="d.csv", out="out", trust="true",
                           store="'postgresql://user@host:5544/db'")
    (tmp_path / "s.yaml").write_text(text)
    spec = load_spec(tmp_path / "s.yaml")
    assert spec.outputs.store == "postgresql://user@host:5544/db"
    check_run_outputs(spec)  # a URL is not a path to check


@pytest.fixture()
def postgres():
    pgcluster = pytest.importorskip("pgcluster")
    required = os.environ.get("ROBUSTSCOPE_REQUIRE_POSTGRES") == "1"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        if required:
            pytest.fail("psycopg is not installed (and ROBUSTSCOPE_REQUIRE_POSTGRES=1)")
        pytest.skip("no psycopg driver")
    if pgcluster.find_bindir() is None:
        if required:
            pytest.fail("no PostgreSQL server binaries (and ROBUSTSCOPE_REQUIRE_POSTGRES=1)")
        pytest.skip("no PostgreSQL server binaries")
    with pgcluster.ThrowawayCluster() as pg:
        yield pg


def test_a_run_stores_into_postgresql_from_a_spec(files, clean_runs, tmp_path, postgres):
    from robustscope.runs.store import open_store

    spec = csv_spec(tmp_path, files, store=f"'{postgres.url}'")
    outcome = run_spec_file(spec, quiet=True)
    assert_same_run(outcome.out_dir, clean_runs["a.pkl"])
    manifest = outcome.manifest
    assert postgres.password not in json.dumps(manifest)
    assert postgres.password not in (outcome.out_dir / "report.html").read_text()
    with open_store(postgres.url) as store:
        for t in THREATS:
            rows = store.radii(manifest["threats"][t]["store_run_id"])
            assert len(rows) == 15 and rows["sample"].is_unique
            info = store.run(manifest["threats"][t]["store_run_id"])
            assert info.config["inputs"] == manifest["provenance"]["inputs"]


def test_a_store_that_goes_away_mid_run_is_a_runtime_failure(files, clean_runs, tmp_path,
                                                             postgres):
    """The PostgreSQL server dies (immediate shutdown) after the first shard: exit 1 with the
    store named (password hidden) and the resume command; with the server back, that command
    finishes the run, and the store holds every row once, the uninterrupted run's."""
    from robustscope.runs.store import open_store

    spec = csv_spec(tmp_path, files, store=f"'{postgres.url}'")
    original = RunProgress.stage
    paused = []

    @contextlib.contextmanager
    def stage(self, name, total):
        with original(self, name, total) as advance:
            def advance_then_stop_server(k):
                advance(k)
                if not paused and (tmp_path / "out" / "shards").is_dir() \
                        and len(list((tmp_path / "out" / "shards").rglob("*.npz"))) == 1:
                    postgres.pause()
                    paused.append(True)
            yield advance_then_stop_server

    RunProgress.stage = stage
    try:
        result = CliRunner().invoke(app, ["run", str(spec), "-q"])
    finally:
        RunProgress.stage = original
    assert result.exit_code == 1, result.stderr
    assert "the results store postgresql://robustscope:***@" in result.stderr
    resume = f"robustscope run {spec} --resume {tmp_path / 'out'}"
    assert f"resume with: {resume}" in result.stderr
    assert postgres.password not in result.stderr
    shards = list((tmp_path / "out" / "shards").rglob("*.npz"))
    assert len(shards) == 2   # the one stored, and the one whose store transaction failed
    postgres.resume()
    result = CliRunner().invoke(app, resume.split()[1:] + ["-q"])
    assert result.exit_code == 0, result.stderr
    assert_same_run(tmp_path / "out", clean_runs["a.pkl"])
    manifest = json.loads((tmp_path / "out" / "run.json").read_text())
    with open_store(postgres.url) as store:
        for t in THREATS:
            rows = store.radii(manifest["threats"][t]["store_run_id"])
            assert len(rows) == 15 and rows["sample"].is_unique
            clean = table(clean_runs["a.pkl"], t)
            np.testing.assert_array_equal(rows.sort_values("sample")["radius"].to_numpy(),
                                          clean["radius"].to_numpy())


# -- 5. failures named, with the way out ------------------------------------------------------
def test_a_truncated_shard_is_named_and_computed_again(files, clean_runs, tmp_path, caplog):
    spec = csv_spec(tmp_path, files)
    run_until_stopped(spec, 3)
    shard = plan_shards(15, list(THREATS), 5, 3)[1]
    path = shard_path(tmp_path / "out", shard)
    path.write_bytes(path.read_bytes()[:200])               # cut short; the journal says done
    with caplog.at_level(logging.WARNING, logger="robustscope.runs.journal"):
        run_spec_file(spec, quiet=True)
    assert f"shard file {path} is damaged" in caplog.text
    assert_same_run(tmp_path / "out", clean_runs["a.pkl"])


def test_a_shard_damaged_inside_is_removed_with_the_resume_command(files, clean_runs,
                                                                   tmp_path, monkeypatch):
    from robustscope.runs import runner
    from robustscope.runs.shards import ShardDamaged

    spec = csv_spec(tmp_path, files)
    path = shard_path(tmp_path / "out", plan_shards(15, list(THREATS), 5, 3)[0])

    def damaged(*args, **kwargs):
        raise ShardDamaged(path, "BadZipFile: Bad CRC-32 for file 'radius.npy'")

    monkeypatch.setattr(runner, "assemble", damaged)
    with pytest.raises(RunIncomplete, match=rf"shard file {path} is damaged .* it was removed: "
                       r"resume the run .*--resume"):
        run_spec_file(spec, quiet=True)
    assert not path.exists()
    monkeypatch.undo()
    run_spec_file(spec, quiet=True)
    assert_same_run(tmp_path / "out", clean_runs["a.pkl"])


def test_a_full_disk_while_writing_the_tables_names_the_file_and_resumes(files, clean_runs,
                                                                         tmp_path, monkeypatch):
    from robustscope.runs import runner

    spec = csv_spec(tmp_path, files)
    target = tmp_path / "out" / "radii_l2.csv"

    def full(res, path):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(target))

    monkeypatch.setattr(runner, "_write_table", full)
    result = CliRunner().invoke(app, ["run", str(spec), "-q"])
    assert result.exit_code == 1
    assert f"cannot write {target} (No space left on device)" in result.stderr
    assert "resume with: robustscope run" in result.stderr
    monkeypatch.undo()
    result = CliRunner().invoke(app, ["run", str(spec), "-q"])
    assert result.exit_code == 0, result.stderr
    assert_same_run(tmp_path / "out", clean_runs["a.pkl"])


def _tmpfs(folder: Path, size: str) -> bool:
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                          capture_output=True)
    return done.returncode == 0


def test_a_full_tmpfs_stops_the_run_with_the_resume_command(files, clean_runs, tmp_path):
    """A real full disk (a 160 kB tmpfs): exit 1, the folder and the resume command named;
    given room (the tmpfs remounted larger), the printed resume completes the run to the
    rows of an uninterrupted one."""
    disk = tmp_path / "disk"
    if not _tmpfs(disk, "160k"):
        pytest.skip("this machine does not let the tests mount a small tmpfs")
    try:
        out = disk / "out"
        spec = csv_spec(tmp_path, files, out=str(out))
        result = CliRunner().invoke(app, ["run", str(spec), "-q"])
        assert result.exit_code == 1, result.stderr
        assert "No space left on device" in result.stderr
        assert f"error: cannot write {out}/" in result.stderr   # the file that did not fit
        resume = f"robustscope run {spec} --resume {out}"
        assert f"resume with: {resume}" in result.stderr
        assert not (out / "report.html").exists()
        subprocess.run(["mount", "-o", "remount,size=8m", str(disk)], check=True)
        result = CliRunner().invoke(app, resume.split()[1:] + ["-q"])
        assert result.exit_code == 0, result.stderr
        assert_same_run(out, clean_runs["a.pkl"])
    finally:
        # lazy: the failed run's traceback may still hold memory maps of files in it
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_write_that_fails_without_a_file_name_is_named_by_its_path(tmp_path):
    """A full disk while writing to an open file raises an OSError with no file name; the
    atomic writer names the file the user asked for (not its temporary)."""
    from robustscope.core.fileio import atomic_write

    def write(tmp):
        tmp.write_text("x")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(OSError) as caught:
        atomic_write(tmp_path / "report.html", write)
    assert caught.value.filename == str(tmp_path / "report.html")
    assert caught.value.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []   # the temporary is gone


COLUMN_ON_A_FULL_DISK = """
import sys
from pathlib import Path
from robustscope.runs.runner import _column_file
try:
    column = _column_file(Path(sys.argv[1]), "radius", "float64", (131072,))  # 1 MB
    column[:] = 1.0
    column.flush()
except OSError as exc:
    print(f"OSError {exc.errno} {exc.filename}")
"""


def test_a_column_that_a_full_disk_cannot_hold_is_an_error_not_a_bus_error(tmp_path):
    """The run's memory-mapped columns have their blocks reserved: on a disk without room the
    run stops with an error naming the file (numpy's sparse file, mapped and written, was
    killed by SIGBUS: exit 135 and no message)."""
    disk = tmp_path / "disk"
    if not _tmpfs(disk, "64k"):
        pytest.skip("this machine does not let the tests mount a small tmpfs")
    try:
        done = subprocess.run([sys.executable, "-c", COLUMN_ON_A_FULL_DISK, str(disk)],
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": SRC})
        assert done.returncode == 0, (done.returncode, done.stderr)
        assert done.stdout.strip() == f"OSError {errno.ENOSPC} {disk / 'radius.npy'}"
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch's legacy ONNX exporter
def test_a_model_that_cannot_take_the_data_is_bad_input_naming_both_shapes(tmp_path):
    torch = pytest.importorskip("torch")
    net = torch.nn.Sequential(torch.nn.Linear(10, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    torch.onnx.export(net, torch.zeros(1, 10), str(tmp_path / "net.onnx"), dynamo=False)
    frame = pd.DataFrame(np.random.default_rng(0).random((6, 30)),
                         columns=[f"f{i}" for i in range(30)])
    frame["label"] = [0, 1] * 3
    frame.to_csv(tmp_path / "d.csv", index=False)
    spec = tmp_path / "s.yaml"
    spec.write_text(CSV_SPEC.format(model=tmp_path / "net.onnx", data=tmp_path / "d.csv",
                                    out="out", store="null", trust="false"))
    result = CliRunner().invoke(app, ["run", str(spec), "-q"])
    assert result.exit_code == 2
    assert "X has shape (6, 30); the model takes N×10" in result.stderr


def test_an_untrusted_pickle_in_a_run_names_the_spec_key(files, tmp_path):
    spec = csv_spec(tmp_path, files, trust=False)
    result = CliRunner().invoke(app, ["run", str(spec), "-q"])
    assert result.exit_code == 2
    assert "set model.trust_pickle: true in the spec" in result.stderr
    assert "--trust-pickle" not in result.stderr


def test_a_fifo_as_the_model_is_not_a_regular_file(files, tmp_path):
    fifo = tmp_path / "model.pkl"
    os.mkfifo(fifo)
    spec = csv_spec(tmp_path, files, model=str(fifo))
    result = CliRunner().invoke(app, ["run", str(spec), "-q"])
    assert result.exit_code == 2
    assert f"model.path {fifo}: not a regular file" in result.stderr
