"""What a new user hits first (#17 items 10, 12, 13; item 5 in tests/test_run_signals.py):
one table of command lines with the exit code, a fragment of what they print and the files
that must (not) exist afterwards, and a walk over every command's help that catches a new
option without a description, an enumerated option without its choices, and `<bool>`."""

from __future__ import annotations

import json
import re
import warnings
from dataclasses import dataclass, field
from enum import Enum
from importlib import metadata
from pathlib import Path

import joblib
import numpy as np
import pytest
import torch
import typer
from scale_helpers import FlakyModel, _fitted_gbm
from typer.testing import CliRunner

from robustscope.cli.app import app

SPEC = """\
seed: 0
model: {{{model}}}
data: {{builtin: breast-cancer, limit: 8}}
threats: [{{name: linf}}]
solver: {{budget: 200}}
scores: {{n_bootstrap: 20, ood: false, pad: false}}
outputs: {{dir: {out}, store: null}}
execution: {{shard_size: 4, workers: 1}}
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """Every input the table's command lines name, made here: a radius CSV, a tabular model
    and data, a grayscale image classifier and images, run specs (one whose model raises on
    some rows)."""
    d = tmp_path_factory.mktemp("voice")
    (d / "radii.csv").write_text("radius,loss,status\n0.1,0.2,attacked\n0.3,0.1,attacked\n"
                                 "0.2,0.5,exact\n0.4,0.3,exact\n")
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression

    X, y = load_breast_cancer(return_X_y=True)
    X, y = X[:, :4], y
    joblib.dump(LogisticRegression(max_iter=2000).fit(X, y), d / "logreg.joblib")
    rows = ["f0,f1,f2,f3,label"] + [",".join(map(str, [*x, t])) for x, t in zip(X[:6], y[:6],
                                                                              strict=True)]
    (d / "data.csv").write_text("\n".join(rows) + "\n")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit is deprecated
        torch.jit.script(net).save(str(d / "gray.pt"))
    images = torch.rand(3, 1, 8, 8)
    np.savez(d / "gray.npz", X=images.numpy(), y=net(images).argmax(1).numpy())
    (d / "run.yaml").write_text(SPEC.format(model="builtin: breast-cancer-logreg", out="out"))
    (d / "gray.yaml").write_text("model: {path: gray.pt}\ndata: {path: gray.npz}\n"
                                 "threats: [{name: linf}, {name: HueAttack}]\n"
                                 "outputs: {dir: gray-out, store: null}\n")
    flaky = FlakyModel(_fitted_gbm(), threshold=15.0)  # raises on some of the first 8 rows
    joblib.dump(flaky, d / "flaky.pkl")
    (d / "flaky.yaml").write_text(SPEC.format(model="path: flaky.pkl, trust_pickle: true",
                                              out="flaky-out"))
    return d


@dataclass
class Case:
    """One command line: ``args`` (``{d}`` = the files folder), the exit code, fragments of
    what it prints (stdout and stderr together, whitespace collapsed), fragments it must not
    print, files (relative to the folder) that must and must not exist afterwards; with
    ``columns``, the terminal's width, which no line of its stdout may pass (a path aside);
    ``process``: run as a process of its own (what it logs reaches the terminal); ``before``:
    a command line run first (in this process)."""

    name: str
    args: list[str]
    code: int
    says: list[str] = field(default_factory=list)
    never: list[str] = field(default_factory=list)
    exist: list[str] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)
    columns: int | None = None
    process: bool = False
    before: list[str] | None = None


VERSION = metadata.version("robustscope")
CASES = [
    # item 12: --version; choices, option names in messages, one spelling per concept
    Case("version", ["--version"], 0, [f"robustscope {VERSION}"]),
    Case("censored choice", ["scores", "{d}/radii.csv", "--censored", "foo"], 2,
         ["'--censored'", "'exclude', 'bound'"]),
    Case("option names, not parameters", ["scores", "{d}/radii.csv", "--censored", "bound"], 2,
         ["--censor-at: --censored 'bound' needs"], never=["censor_at", "censored="]),
    Case("library range error names the option", ["scores", "{d}/radii.csv", "--confidence",
                                                   "2"], 2, ["--confidence: 2.0 must lie"]),
    Case("n-bootstrap range", ["scores", "{d}/radii.csv", "--n-bootstrap", "-1"], 2,
         ["'--n-bootstrap'"], never=["n_bootstrap"]),
    Case("deprecated --bootstrap still works", ["scores", "{d}/radii.csv", "--bootstrap", "10",
                                                "--json"], 0,
         ["--bootstrap is deprecated; use --n-bootstrap", '"R_nu"']),
    Case("sort choice", ["leaderboard", "--sort", "best"], 2, ["'--sort'", "'avg', 'worst'"]),
    Case("deprecated --db, message names --store", ["leaderboard", "--db", "{d}/no.sqlite"], 2,
         ["--db is deprecated; use --store", "--store {d}/no.sqlite: no such file"]),
    Case("backend choice", ["run", "{d}/run.yaml", "--backend", "spark"], 2,
         ["'--backend'", "'local', 'ray'"], absent=["out"]),
    Case("method choice", ["image-grid", "--model", "{d}/gray.pt", "--data", "{d}/gray.npz",
                           "--out", "{d}/m.json", "--method", "half"], 2, ["'--method'"],
         absent=["m.json"]),
    # item 10: grayscale images
    Case("grayscale: colour threats skipped and named",
         ["image-grid", "--model", "{d}/gray.pt", "--data", "{d}/gray.npz", "--out",
          "{d}/gray.json", "--steps", "1"], 0,
         ["note: skipped jpeg-linf, jpeg-l1, recolor: they need 3 colour channels (RGB); the "
          "images have 1", "wrote {d}/gray.json"], exist=["gray.json"]),
    Case("grayscale: a named colour threat is an error naming it",
         ["image-grid", "--model", "{d}/gray.pt", "--data", "{d}/gray.npz", "--out",
          "{d}/hue.json", "--threats", "linf,hue", "--steps", "1"], 2,
         ["--threats: hue (3 channels) cannot run on images with 1 channel(s)"],
         absent=["hue.json"]),
    Case("grayscale: a colour threat in a spec is named before any work",
         ["run", "{d}/gray.yaml"], 2,
         ["threats[1] (hue): needs 3 colour channels (RGB); the images have 1"],
         absent=["gray-out/shards"]),
    # item 13: tables at 80 columns, failed rows, re-running a completed spec
    Case("radius summary fits 80 columns",
         ["radius", "--model", "{d}/logreg.joblib", "--trust-pickle", "--data",
          "{d}/data.csv", "--out", "{d}/r.csv"], 0, ["inputs", "wrote {d}/r.csv"],
         exist=["r.csv"], columns=80),
    Case("run summary fits 80 columns", ["run", "{d}/run.yaml"], 0,
         ["R_ν", "report.html"], exist=["out/report.html"], columns=80),
    Case("run summary fits 60 columns", ["run", "{d}/run.yaml"], 0,
         ["left out to fit 60 columns", "report.html"], exist=["out/report.html"], columns=60),
    Case("re-running a completed spec says it replaces the run",
         ["run", "{d}/run.yaml", "--out-dir", "{d}/again"], 0,
         ["held a completed run: this run replaces it"], exist=["again/report.html"],
         process=True, before=["run", "{d}/run.yaml", "--out-dir", "{d}/again", "-q"]),
    Case("a run with failed rows says so, even with -q", ["run", "{d}/flaky.yaml", "-q"], 0,
         ["warning: the model raised on", "status 'failed'", "(threats.linf.failed)"],
         exist=["flaky-out/run.json"]),
]


def _invoke(args: list[str], columns: int | None):
    env = {"COLUMNS": str(columns or 200), "TERM": "dumb"}
    return CliRunner().invoke(app, args, env=env)


@dataclass
class _Ran:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def _process(args: list[str], columns: int | None) -> _Ran:
    import os
    import subprocess
    import sys

    env = {**os.environ, "COLUMNS": str(columns or 200), "TERM": "dumb",
           "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-m", "robustscope.cli.app", *args],
                          capture_output=True, text=True, env=env, timeout=300)
    return _Ran(proc.returncode, proc.stdout, proc.stderr)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_command_line(files, case):
    d = str(files)
    if case.before:
        assert _invoke([a.replace("{d}", d) for a in case.before], None).exit_code == 0
    res = (_process if case.process else _invoke)([a.replace("{d}", d) for a in case.args],
                                                  case.columns)
    text = " ".join(res.output.split())
    assert res.exit_code == case.code, res.output
    for fragment in case.says:
        assert fragment.replace("{d}", d) in text, (fragment, res.output)
    for fragment in case.never:
        assert fragment not in text, (fragment, res.output)
    for name in case.exist:
        assert (files / name).exists(), name
    for name in case.absent:
        assert not (files / name).exists(), name
    if case.columns is not None:
        too_wide = [line for line in res.stdout.splitlines()
                    if len(line) > case.columns and d not in line]  # paths may not wrap
        assert not too_wide, "\n".join(too_wide)


def test_run_with_failed_rows_writes_the_messages_it_points_to(files):
    if not (files / "flaky-out" / "run.json").exists():  # the table's case ran it
        _invoke(["run", str(files / "flaky.yaml"), "-q"], 80)
    manifest = json.loads((files / "flaky-out" / "run.json").read_text())
    failed = manifest["threats"]["linf"]["failed"]
    assert failed and all("feature 0 above" in f["error"] for f in failed)


# -- every command's help ----------------------------------------------------------------------
#: Spellings that the command line does not show (one spelling per concept): the shown one.
RETIRED = {"--bootstrap": "--n-bootstrap", "--db": "--store", "--output": "--out",
           "--outdir": "--out-dir", "--features-network": "--feature-network"}


def _commands():
    group = typer.main.get_command(app)
    ctx = group.make_context("robustscope", ["--help"], resilient_parsing=True)
    yield "", group, ctx
    for name in group.list_commands(ctx):
        yield name, group.get_command(ctx, name), ctx


def _choices(param) -> list[str]:
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return [str(m.value) for m in annotation]
    return list(getattr(getattr(param, "type", None), "choices", None) or ())


@pytest.mark.parametrize("name", [n for n, _, _ in _commands()])
def test_help_rules(name):
    command = dict((n, c) for n, c, _ in _commands())[name]
    args = [name, "--help"] if name else ["--help"]
    for columns in (80, 200):
        res = _invoke(args, columns)
        assert res.exit_code == 0, res.output
        assert "<bool>" not in res.output
    text = " ".join(res.output.split())  # the wide one: no choice folded across lines
    for param in command.params:
        if getattr(param, "hidden", False):
            continue
        label = "/".join(getattr(param, "opts", [])) or param.name
        assert (param.help or "").strip(), f"{name} {label}: no help text"
        for choice in _choices(param):
            assert choice in text, f"{name} {label}: choice {choice} not listed"
        quoted = re.findall(r"'([\w-]+)' or '([\w-]+)'", param.help or "")
        if quoted and "file" not in param.help:
            assert _choices(param), f"{name} {label}: enumerated in its help, not a choice"
        for opt in getattr(param, "opts", []):
            assert opt not in RETIRED, f"{name}: {opt} is spelled {RETIRED[opt]} elsewhere"


def test_radius_help_names_every_model_format():
    from robustscope.models.loaders import MODEL_SUFFIXES

    text = " ".join(_invoke(["radius", "--help"], 200).output.split())
    for suffix in MODEL_SUFFIXES:
        if suffix not in (".pth", ".pickle"):  # spellings of .pt and .pkl
            assert suffix in text, suffix


def test_backend_choices_are_the_backends():
    from robustscope.cli.run import Backend
    from robustscope.runs.backends import BACKENDS

    assert tuple(b.value for b in Backend) == BACKENDS


# -- item 13 below the command line -------------------------------------------------------------
def test_fitted_table_fits_80_columns_and_names_what_it_left_out():
    from io import StringIO

    from rich.console import Console

    from robustscope.report.terminal import Col, fitted_table

    columns = [Col("threat", "left")] + [Col(f"reading {k}", priority=k) for k in range(1, 12)]
    rows = [["linf"] + [f"{0.123456789 * k:.6f}" for k in range(1, 12)]]
    for width in (80, 120, 300):
        out = StringIO()
        console = Console(file=out, width=width)
        table = fitted_table("t", columns, rows, console)
        console.print(table)
        lines = out.getvalue().splitlines()
        assert max(map(len, lines)) <= width
        shown = [c.header for c in table.columns]
        assert shown[0] == "threat"
        left_out = [c.header for c in columns if c.header not in shown]
        # the most dispensable go first: what is left is a prefix by priority
        assert shown == ["threat"] + [f"reading {k}" for k in range(1, len(shown))]
        if left_out:
            assert f"left out to fit {width} columns: {', '.join(left_out)}" in table.caption
        else:
            assert table.caption is None
    assert width == 300 and not left_out


def test_run_progress_counts_inputs(files, tmp_path):
    """The run's bar is named after what it counts: inputs, and how many shards."""
    import contextlib

    from robustscope.runs.progress import RunProgress
    from robustscope.runs.runner import run_spec
    from robustscope.runs.spec import load_spec

    stages = []

    class Recording(RunProgress):
        @contextlib.contextmanager
        def stage(self, name, total):
            stages.append((name, total))
            with super().stage(name, total) as advance:
                yield advance

    spec = load_spec(files / "run.yaml")
    spec.outputs.dir = tmp_path / "out"
    run_spec(spec, quiet=True, progress=Recording(1, None))
    assert stages == [("inputs (2 shards)", 8)]


def test_seconds_column_is_the_batch_average_it_says():
    from sklearn.linear_model import LogisticRegression

    from robustscope.core.result import ROW_SCHEMA
    from robustscope.search.engine import radius

    [column] = [c for c in ROW_SCHEMA if c.name == "seconds"]
    assert "batch average" in column.doc
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    y = (X[:, 0] > 0).astype(int)
    res = radius(LogisticRegression().fit(X, y), X[:6], y[:6], batch_size=3)
    assert len(set(res.seconds[:3])) == 1 and len(set(res.seconds[3:])) == 1


def test_loading_pt_files_gives_no_future_or_deprecation_warning(tmp_path):
    from robustscope.models.loaders import load_model

    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.script(net).save(str(tmp_path / "s.pt"))
        torch.save(net, tmp_path / "full.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        warnings.simplefilter("error", DeprecationWarning)
        load_model(tmp_path / "s.pt", example=np.zeros((2, 3)))
        load_model(tmp_path / "full.pt", trust_pickle=True, example=np.zeros((2, 3)))


def test_quiet_ray_init_has_no_banner():
    import logging

    from robustscope.runs.backends import ray_init_options

    quiet = ray_init_options(2, None, quiet=True)
    assert quiet["logging_level"] == logging.ERROR and quiet["include_dashboard"] is False
    assert quiet["log_to_driver"] is False and quiet["num_cpus"] == 2
    assert "logging_level" not in ray_init_options(2, None, quiet=False)


@pytest.mark.slow  # fast: test_quiet_ray_init_has_no_banner
def test_quiet_run_on_ray_prints_only_the_report_path(files, tmp_path):
    import subprocess
    import sys

    pytest.importorskip("ray")
    spec = tmp_path / "ray.yaml"
    spec.write_text((files / "run.yaml").read_text().replace("workers: 1",
                                                            "workers: 2, backend: ray"))
    proc = subprocess.run([sys.executable, "-m", "robustscope.cli.app", "run", str(spec), "-q"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and proc.stdout.strip().endswith("report.html")


def test_demo_provenance_states_its_measured_duration(tmp_path, monkeypatch):
    """The demo's report gives the wall time from the demo's start (training included) and
    each model's search time, not the time the report took."""
    import time

    import robustscope.runs.demo as demo

    calls = {}
    real = demo.build_demo_report

    def spy(*args, **kwargs):
        calls.update(kwargs)
        return real(*args, **kwargs)

    def few_models(seed=0):
        data, X_train, X_test, y_train, y_test, models = real_train(seed)
        keep = demo.LOGISTIC
        return data, X_train, X_test[:10], y_train, y_test[:10], {keep: models[keep]}

    real_train = demo.train_models
    monkeypatch.setattr(demo, "train_models", few_models)
    monkeypatch.setattr(demo, "build_demo_report", spy)
    t0 = time.time()
    demo.run_demo(tmp_path / "demo", quiet=True)
    elapsed = time.time() - t0
    assert t0 <= calls["started"] <= t0 + 1
    assert set(calls["seconds"]) == {demo.LOGISTIC} and calls["seconds"][demo.LOGISTIC] > 0
    html = (tmp_path / "demo" / "report.html").read_text()
    wall = float(re.search(r'wall_seconds(?:"|&#34;|&quot;): ([0-9.]+)', html).group(1))
    assert 0 < wall <= elapsed
