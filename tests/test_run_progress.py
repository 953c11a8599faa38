"""Progress while a search runs: the engine reports inputs as they finish and the open
inputs' share of planned passes; a run's bar moves with the shards still in flight (in
this process and from a pool of workers), not only when a shard is committed."""

from __future__ import annotations

import io
import time

import numpy as np
import pytest
import torch
from rich.console import Console
from rich.progress import BarColumn, Progress
from scale_helpers import gbm_spec, slow_black_box_file
from sklearn.linear_model import LogisticRegression

from robustscope.runs import execute
from robustscope.runs.execute import ShardReporter
from robustscope.runs.progress import FinishedColumn, RunProgress
from robustscope.runs.runner import run_spec
from robustscope.runs.spec import load_spec
from robustscope.search import progress as search_progress
from robustscope.search.engine import radius


def _noisy_linear(n: int = 200, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    y = (X[:, 0] + 0.8 * rng.normal(size=n) > 0).astype(int)
    return LogisticRegression().fit(X, y), X, y


def test_engine_reports_inputs_as_they_finish():
    model, X, y = _noisy_linear()
    calls: list[int] = []
    radius(model, X[:50], y[:50], batch_size=20, progress=calls.append)
    assert sum(calls) == 50 and all(k > 0 for k in calls)
    # per batch: the misclassified after the clean pass, then the exactly solved ones
    wrong = int((model.predict(X[:20]) != y[:20]).sum())
    assert wrong > 0 and calls[:2] == [wrong, 20 - wrong]


class Recorder:
    def __init__(self) -> None:
        self.finished_calls: list[int] = []
        self.searching_calls: list[tuple[int, float]] = []

    def finished(self, k: int) -> None:
        self.finished_calls.append(k)

    def searching(self, n_open: int, fraction: float) -> None:
        self.searching_calls.append((n_open, fraction))


def test_engine_reports_the_share_of_planned_passes(monkeypatch):
    monkeypatch.setattr(search_progress, "WORKING_EVERY", 0.0)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(5, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    _, X, _ = _noisy_linear()
    X = X[:12].astype(np.float32)
    y = net(torch.as_tensor(X)).argmax(1).numpy()  # all correctly classified
    rec = Recorder()
    res = radius(net, X, y, progress=rec, batch_size=6)
    assert sum(rec.finished_calls) == 12
    assert len(rec.searching_calls) > 10
    fractions = np.array([f for _, f in rec.searching_calls])
    assert ((fractions >= 0) & (fractions < 1)).all()
    assert all(n_open <= 6 for n_open, _ in rec.searching_calls)
    assert fractions.max() > 0.5           # the default plan's passes are mostly spent
    assert np.isfinite(res.radius).all()


def test_shard_reporter_throttles_and_never_passes_the_shard(monkeypatch):
    sent: list[tuple[int, float]] = []
    reporter = ShardReporter(lambda d, w: sent.append((d, w)), size=4)
    reporter.searching(4, 0.5)             # the first report goes at once
    reporter.searching(4, 0.6)             # within REPORT_EVERY: dropped
    assert sent == [(0, 2.0)]
    monkeypatch.setattr(execute, "REPORT_EVERY", 0.0)
    reporter.finished(3)
    reporter.finished(5)                   # rows searched again after a model error
    reporter.searching(1, 0.9)
    assert sent[1:] == [(3, 3.0), (4, 4.0), (4, 4.0)]


class RecordingProgress(RunProgress):
    """Records every report and commit, in order, with the bar's numbers after it."""

    def __init__(self, progress=None) -> None:
        super().__init__(1, progress, reports=True)
        self.events: list[tuple] = []

    def searching(self, key, done, working=None):
        super().searching(key, done, working)
        self.events.append(("report" if done is not None else "commit", key, done, working,
                            self.finished()))


def _check_events(prog: RecordingProgress, shard_size: int, total: int) -> None:
    events = prog.events
    reports = [e for e in events if e[0] == "report"]
    committed: set[str] = set()
    for kind, key, done, working, _ in events:
        if kind == "commit":
            committed.add(key)
            continue
        assert key not in committed            # no report after the shard's result
        assert 0 <= done <= working <= shard_size
    # the bar moved before the shards finished: work on open inputs was reported
    assert any(0 < working < shard_size for _, _, _, working, _ in reports)
    assert len(committed) == total // shard_size and prog.finished() == total


def test_run_bar_moves_within_shards_in_this_process(tmp_path, monkeypatch):
    monkeypatch.setattr(execute, "REPORT_EVERY", 0.0)
    spec = load_spec(gbm_spec(tmp_path, "one", str(tmp_path / "out"), limit=8, shard=4,
                              model=slow_black_box_file(tmp_path, 0.002)))
    out = io.StringIO()
    with Progress(BarColumn(), FinishedColumn(),
                  console=Console(file=out, force_terminal=True, width=80)) as bars:
        prog = RecordingProgress(bars)
        run_spec(spec, quiet=True, progress=prog)
    _check_events(prog, 4, 16)
    assert "/16" in out.getvalue()


def test_run_bar_moves_within_shards_from_a_pool(tmp_path):
    spec = load_spec(gbm_spec(tmp_path, "two", str(tmp_path / "out"), limit=16, shard=8,
                              workers=2, model=slow_black_box_file(tmp_path, 0.01)))
    prog = RecordingProgress()
    t0 = time.perf_counter()
    run_spec(spec, quiet=True, progress=prog)
    assert time.perf_counter() - t0 > 1.0   # long enough for in-flight reports
    _check_events(prog, 8, 32)


def test_silent_runs_ask_for_no_reports():
    assert RunProgress(1, None).reports is False
    assert RunProgress(1, None, reports=True).reports is True


@pytest.mark.parametrize("fields, shown", [({"finished": 3}, "3/10"), ({}, "7/10")])
def test_finished_column_counts_finished_inputs(fields, shown):
    bars = Progress()
    task_id = bars.add_task("x", total=10, completed=7, **fields)
    [task] = [t for t in bars.tasks if t.id == task_id]
    assert FinishedColumn().render(task).plain == shown
