"""Stopping a run from outside (#17 item 5): workers die with their parent, SIGINT / SIGTERM
end `robustscope run` with one line that gives the resume command, and the resumed run
equals an uninterrupted one. Real subprocesses and real signals; processes are found in
/proc (Linux)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from scale_helpers import SRC, TESTS, gbm_spec, table

from robustscope.runs import journal
from robustscope.runs.runner import run_spec_file

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(),
                                reason="finds processes in /proc (Linux)")

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, TESTS]), "OMP_NUM_THREADS": "1"}


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process."""
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:  # gone meanwhile
                continue
            out[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return out


def descendants(pid: int) -> set[int]:
    parents = _parents()
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        kids = {c for c, pp in parents.items() if pp == p} - found
        found |= kids
        todo.extend(kids)
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited


def wait_gone(pids: set[int], seconds: float) -> set[int]:
    """The processes of ``pids`` still alive after up to ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = {p for p in pids if _alive(p)}
        if not alive:
            return alive
        time.sleep(0.1)
    return {p for p in pids if _alive(p)}


def wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _journal_lines(out: Path) -> int:
    path = out / journal.JOURNAL
    return len(path.read_text().splitlines()) if path.exists() else 0


def start_run(spec: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "robustscope.cli.app", "run", str(spec),
                             "-q", *args], cwd=spec.parent, env={**ENV, **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


# -- the lifeline alone: fast, no torch ------------------------------------------------------
ORPHAN = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], str(os.getpid()), sys.argv[2]])
print(child.pid, flush=True)
time.sleep(60)
"""
WORKER = """
import sys, time
import robustscope.runs.lifeline as lifeline
if sys.argv[2] == "watchdog":  # as where the OS has no parent-death signal
    lifeline.set_parent_death_signal = lambda *a: False
lifeline.die_with_parent(int(sys.argv[1]), poll_seconds=0.2)
print("ready", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("how", ["prctl", "watchdog"])
def test_a_worker_dies_when_its_parent_is_killed(how):
    middle = subprocess.Popen([sys.executable, "-c", ORPHAN, WORKER, how], env=ENV,
                              stdout=subprocess.PIPE, text=True)
    worker = int(middle.stdout.readline())
    wait_for(lambda: descendants(middle.pid) == {worker}, 20, "the worker")
    time.sleep(1.0)  # its imports and the lifeline
    middle.kill()
    middle.wait(5)
    assert wait_gone({worker}, 5) == set(), f"worker survived its parent ({how})"


def test_a_worker_whose_parent_is_already_gone_exits_at_once():
    code = ("import robustscope.runs.lifeline as l; l.die_with_parent(1); "
            "import time; time.sleep(30)")
    proc = subprocess.run([sys.executable, "-c", code], env=ENV, timeout=20)
    assert proc.returncode == 70  # lifeline.ORPHANED_EXIT


# -- robustscope run, killed -----------------------------------------------------------------
@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ref")
    run_spec_file(gbm_spec(tmp, "ref", "out", limit=24, shard=4), quiet=True)
    return tmp / "out"


def test_kill_9_leaves_no_worker_and_the_run_resumes(reference, tmp_path):
    """`kill -9` of `robustscope run` on 2 pool workers while shards run: every process it
    started (workers, resource tracker) is gone within seconds; started again, the run
    continues and equals an uninterrupted one."""
    spec = gbm_spec(tmp_path, "k", "out", limit=24, shard=4)
    proc = start_run(spec, "--workers", "2")
    wait_for(lambda: _journal_lines(tmp_path / "out") >= 1 or proc.poll() is not None, 90,
             "the first shard")
    kids = descendants(proc.pid)
    proc.kill()
    proc.wait(10)
    done = _journal_lines(tmp_path / "out")
    assert 1 <= done < 12, "killed after the run ended: make the spec larger"
    assert len(kids) >= 2
    assert wait_gone(kids, 8) == set(), "processes of the killed run survived it"
    outcome = run_spec_file(spec, quiet=True)
    assert outcome.manifest["provenance"]["execution"]["resumed"] is True
    for threat in ("linf", "l2"):
        pd.testing.assert_frame_equal(table(reference, threat), table(tmp_path / "out", threat))


@pytest.mark.slow  # fast: test_interrupted_run_gives_the_resume_command, test_lifeline_*
@pytest.mark.parametrize(("signum", "code", "workers"), [(signal.SIGTERM, 143, "2"),
                                                           (signal.SIGINT, 130, "1")])
def test_sigterm_and_sigint_end_the_run_with_the_resume_command(tmp_path, signum, code,
                                                                workers):
    spec = gbm_spec(tmp_path, "s", "out", limit=24, shard=4)
    proc = start_run(spec, "--workers", workers)
    wait_for(lambda: _journal_lines(tmp_path / "out") >= 1 or proc.poll() is not None, 90,
             "the first shard")
    kids = descendants(proc.pid)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code, err
    lines = err.strip().splitlines()
    name = signal.Signals(signum).name
    out = tmp_path / "out"
    assert lines == [f"error: interrupted by {name}; the finished shards are kept in {out}; "
                     f"resume with: robustscope run {spec} --resume {out}"], err
    assert wait_gone(kids, 5) == set()
    assert 1 <= _journal_lines(out) < 12
    # the printed command works (run here in-process)
    outcome = run_spec_file(spec, quiet=True, out_dir=out, resume=True)
    assert outcome.manifest["provenance"]["execution"]["resumed"] is True
    assert _journal_lines(out) == 12


def test_handlers_kept_puts_back_the_handlers_a_library_replaced():
    """What ray.init does to a run's SIGTERM handler is undone; a SIGTERM that meets the
    library's handler meanwhile (Ray's end with SystemExit) still stops the run."""
    from robustscope.runs.stopping import Terminated, handlers_kept, terminate_raises

    def exits(signum, frame):
        sys.exit(signum)

    with terminate_raises():
        ours = signal.getsignal(signal.SIGTERM)
        with handlers_kept():
            signal.signal(signal.SIGTERM, exits)
        assert signal.getsignal(signal.SIGTERM) is ours
        with pytest.raises(Terminated), handlers_kept():
            signal.signal(signal.SIGTERM, exits)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler runs first
        assert signal.getsignal(signal.SIGTERM) is ours
    with pytest.raises(SystemExit), handlers_kept():  # not a run's: left as it is
        sys.exit(3)


# -- the same, in this process: fast -----------------------------------------------------------
def _stop_after_one_shard(exc: BaseException):
    """A silent RunProgress whose stage raises ``exc`` when the first shard is committed."""
    import contextlib

    from robustscope.runs.progress import RunProgress

    class StopAfterOneShard(RunProgress):
        @contextlib.contextmanager
        def stage(self, name, total):
            with super().stage(name, total):
                def advance(k):
                    raise exc

                yield advance

    return StopAfterOneShard(1, None)


@pytest.mark.parametrize(("exc", "signum", "code"), [
    (KeyboardInterrupt(), signal.SIGINT, 130), (None, signal.SIGTERM, 143)])
def test_interrupted_run_gives_the_resume_command(tmp_path, monkeypatch, exc, signum, code):
    from typer.testing import CliRunner

    import robustscope.runs.runner as runner
    from robustscope.cli.app import app
    from robustscope.runs.stopping import Terminated

    exc = exc if exc is not None else Terminated(signum)
    real = runner.run_spec
    monkeypatch.setattr(runner, "run_spec", lambda *a, **k: real(
        *a, **{**k, "progress": _stop_after_one_shard(exc)}))
    spec = gbm_spec(tmp_path, "s", "out", limit=8, shard=4)
    res = CliRunner().invoke(app, ["run", str(spec), "-q", "--workers", "1"])
    out = tmp_path / "out"
    name = signal.Signals(signum).name
    assert res.exit_code == code, res.output
    assert res.stderr.strip().splitlines() == [
        f"error: interrupted by {name}; the finished shards are kept in {out}; "
        f"resume with: robustscope run {spec} --resume {out}"]
    assert _journal_lines(out) == 1
    monkeypatch.setattr(runner, "run_spec", real)
    outcome = run_spec_file(spec, quiet=True, out_dir=out, resume=True)
    assert outcome.manifest["provenance"]["execution"]["resumed"] is True
    assert _journal_lines(out) == 4  # 2 threats x 2 shards, the first not run again


@pytest.mark.slow  # Ray's start-up alone takes 30-60 s on a busy 2-core machine
def test_kill_9_of_a_run_on_ray_leaves_no_ray_process(tmp_path):
    """The Ray cluster a run starts dies with it: its actors, raylet and GCS within
    seconds; Ray's dashboard and runtime-env agents notice the raylet's death themselves
    (measured: gone within 85 s of the kill on a busy machine)."""
    pytest.importorskip("ray")
    spec = gbm_spec(tmp_path, "ray", "out", limit=48, shard=4)
    spec.write_text(spec.read_text().replace("workers: 1", "workers: 2, backend: ray"))
    proc = start_run(spec)
    wait_for(lambda: _journal_lines(tmp_path / "out") >= 1 or proc.poll() is not None, 240,
             "the first shard")
    kids = descendants(proc.pid)
    proc.kill()
    proc.wait(10)
    assert _journal_lines(tmp_path / "out") < 24

    def names(pids):
        out = set()
        for pid in pids:
            with contextlib.suppress(OSError):
                out.add(Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")[:60])
        return out

    early = wait_gone(kids, 20)
    assert all("Agent" in name for name in names(early)), names(early)
    assert wait_gone(kids, 150) == set(), names(kids)


@pytest.mark.slow  # Ray's start-up alone takes 15-60 s on a busy 2-core machine
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)],
                         ids=["SIGTERM", "SIGINT"])
def test_sigterm_and_sigint_end_a_run_on_ray_with_the_resume_command(tmp_path, signum, code):
    """As on the local backend: the one line with the resume command, exit 143 (SIGTERM) or
    130 (SIGINT), the Ray cluster the run started shut down, the finished shards kept.
    (SIGTERM used to meet the handlers ray.init installs: a C++ stack dump, then abort.)"""
    pytest.importorskip("ray")
    spec = gbm_spec(tmp_path, "ray", "out", limit=48, shard=4)
    out = tmp_path / "out"
    proc = start_run(spec, "--backend", "ray", "--workers", "1",
                     env={"RAY_USAGE_STATS_ENABLED": "0"})  # no network from tests
    wait_for(lambda: _journal_lines(out) >= 1 or proc.poll() is not None, 240,
             "the first shard")
    kids = descendants(proc.pid)
    proc.send_signal(signum)
    stdout, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    name = signal.Signals(signum).name
    assert err.strip().splitlines() == [
        f"error: interrupted by {name}; the finished shards are kept in {out}; "
        f"resume with: robustscope run {spec} --resume {out}"], err
    assert "Aborted" not in err and "received at time" not in err
    assert stdout == ""  # nor Ray's notes on the tasks cut short
    assert wait_gone(kids, 30) == set(), "processes of the Ray cluster survived the run"
    assert 1 <= _journal_lines(out) < 24
    # the printed command completes the run (here in-process, on the local backend)
    outcome = run_spec_file(spec, quiet=True, out_dir=out, resume=True)
    assert outcome.manifest["provenance"]["execution"]["resumed"] is True
    assert _journal_lines(out) == 24
    # rows in = rows out, each once, and every row the one an uninterrupted run computes
    clean = run_spec_file(gbm_spec(tmp_path, "clean", "clean", limit=48, shard=4),
                          quiet=True).out_dir
    for threat in ("linf", "l2"):
        assert len(table(out, threat)) == 48 and table(out, threat)["sample"].is_unique
        pd.testing.assert_frame_equal(table(clean, threat), table(out, threat))
