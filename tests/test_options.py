"""The search options of ``radius()`` are declared once (issue 38, requirement 1): the
signature, the command line, the spec and the docs agree with the declaration, and every
option, ``certify`` included, reaches ``radius()`` from a spec through the shards."""

from __future__ import annotations

import inspect
import pickle
from enum import Enum
from pathlib import Path

import numpy as np
import pytest
import torch
import typer
from torch import nn

import robustscope as rs
from robustscope.core.errors import InputError
from robustscope.search.engine import radius
from robustscope.search.options import NOT_DECLARED, OPTIONS, RadiusOptions, check_options

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_signature_agrees_with_the_declaration():
    params = inspect.signature(radius).parameters
    declared = [n for n in params if n not in NOT_DECLARED]
    assert declared == list(OPTIONS)  # same names, same order
    for name, option in OPTIONS.items():
        assert params[name].default == option.default, name
    assert set(NOT_DECLARED) <= set(params)
    assert rs.radius is radius


def test_threads_default_is_the_thread_policy():
    from robustscope.search.threads import AUTO

    assert OPTIONS["threads"].default == AUTO


def test_every_option_is_an_option_of_the_radius_command():
    from robustscope.cli.app import app

    command = typer.main.get_command(app).commands["radius"]
    params = {p.name: p for p in command.params}
    for name, option in OPTIONS.items():
        assert name in params, f"radius() option {name} is missing from `robustscope radius`"
        param = params[name]
        assert option.flag in param.opts
        assert param.help == option.help
        default = param.default.value if isinstance(param.default, Enum) else param.default
        assert default == option.default, name
        if option.choices:
            assert _choices(param) == option.choices, name


def _choices(param) -> tuple:
    """The values a choice option accepts (click's ``type.choices``, or the enum typer's own
    parameter classes keep)."""
    kind = getattr(param, "type", None)
    if kind is not None and hasattr(kind, "choices"):
        return tuple(c.value if isinstance(c, Enum) else c for c in kind.choices)
    return tuple(m.value for m in param.type_descriptor.annotation)


def test_every_option_is_a_key_of_the_spec():
    from robustscope.runs.spec import OPTION_KEYS, EvaluationSpec, ThreatSpec

    assert set(OPTION_KEYS) == set(OPTIONS)
    for name, key in OPTION_KEYS.items():
        model: type = EvaluationSpec
        parts = key.split(".")
        for part in parts[:-1]:
            if part == "threats[]":
                model = ThreatSpec
                continue
            annotation = model.model_fields[part].annotation
            model = next(a for a in getattr(annotation, "__args__", (annotation,))
                         if isinstance(a, type))
        leaf = parts[-1] if parts[-1] != "threats[]" else "name"
        field = model.model_fields[leaf]
        if name == "threat":  # required, and any threat: image threats run on their grid
            assert field.is_required()
            continue
        assert field.default == OPTIONS[name].run_default, name
        assert field.description == OPTIONS[name].help, name


def test_docs_list_the_options_from_the_declaration():
    from robustscope.runs.spec import OPTION_KEYS, options_table

    text = (DOCS / "evaluations.md").read_text()
    assert options_table() in text, "docs/evaluations.md: paste runs.spec.options_table()"
    example = text.split("```yaml", 1)[1].split("```", 1)[0]
    for key in OPTION_KEYS.values():
        assert f"{key.rsplit('.', 1)[-1].replace('threats[]', 'name')}:" in example, key


def test_one_default_for_compare_unconstrained():
    from robustscope.runs.spec import parse_spec

    spec = parse_spec("model: {builtin: breast-cancer-gbm}\ndata: {builtin: breast-cancer}\n"
                      "features: {constraints: ['`mean radius` <= `worst radius`']}\n"
                      "threats: [{name: linf}]\n")
    assert inspect.signature(radius).parameters["compare_unconstrained"].default is False
    assert spec.features.compare_unconstrained is False
    assert spec.search_options(spec.threats[0]).compare_unconstrained is False


@pytest.mark.parametrize(("name", "bad", "message"), [
    ("rtol", 1.0, "rtol must be in"), ("rtol", float("nan"), "rtol"),
    ("budget", 0, "budget must be a positive integer"), ("budget", 2.5, "budget"),
    ("seed", None, "seed"), ("seed", -1, "seed"), ("threads", 0, "threads"),
    ("batch_size", 0, "batch_size"), ("invalid", "skip", "invalid"),
    ("certify", "milp", "certify"), ("solver", "cube", "not a solver"),
    ("max_radius", float("inf"), "max_radius"), ("compare_unconstrained", "yes",
                                                 "compare_unconstrained"),
    ("threat", "elastic", "image threat"),
])
def test_radius_refuses_bad_options_naming_them(name, bad, message):
    X, y = np.zeros((2, 3)), np.zeros(2, dtype=int)
    with pytest.raises(InputError, match=message):
        check_options(**{name: bad})
    with pytest.raises(InputError, match=message):
        radius(lambda x: np.tile([0.6, 0.4], (len(x), 1)), X, y, **{name: bad})


def test_options_convert_and_pickle():
    opts = RadiusOptions(budget=3.0, threads=np.int64(2), certify="crown")
    assert opts.budget == 3 and isinstance(opts.budget, int) and opts.threads == 2
    assert pickle.loads(pickle.dumps(opts)) == opts
    assert opts.kwargs(seed=7)["seed"] == 7
    with pytest.raises(InputError, match="rtol"):
        RadiusOptions(rtol=2)
    with pytest.raises(InputError, match="unknown search option"):
        check_options(colour="red")


def test_spec_solver_keys_reach_the_threat_jobs():
    from robustscope.runs.runner import _threat_jobs
    from robustscope.runs.spec import parse_spec

    spec = parse_spec("seed: 4\nmodel: {builtin: breast-cancer-gbm, device: cpu}\n"
                      "data: {builtin: breast-cancer}\n"
                      "threats:\n  - {name: linf, max_radius: 0.5}\n"
                      "  - {name: l2, solver: {name: pgd, certify: bab, threads: 2}}\n"
                      "solver: {certify: none, threads: null, budget: 100, rtol: 0.05, "
                      "batch_size: 32}\n")
    jobs = pickle.loads(pickle.dumps(_threat_jobs(spec)))  # what workers receive
    linf = jobs["linf"].radius_kwargs(seed=11)
    assert linf == {"threat": "linf", "solver": "auto", "max_radius": 0.5, "budget": 100,
                    "rtol": 0.05, "seed": 11, "device": "cpu", "batch_size": 32,
                    "threads": None, "invalid": "error", "compare_unconstrained": False,
                    "certify": "none"}
    l2 = jobs["l2"].radius_kwargs(seed=1)
    assert (l2["solver"], l2["certify"], l2["threads"], l2["batch_size"]) == ("pgd", "bab", 2,
                                                                               128)


def test_spec_errors_on_new_keys_name_key_and_line():
    from robustscope.runs.spec import SpecError, parse_spec

    with pytest.raises(SpecError, match=r"line 4: solver\.certify: 'milp' is not a "
                                        r"certification method; choose one of auto"):
        parse_spec("model: {builtin: breast-cancer-gbm}\ndata: {builtin: breast-cancer}\n"
                   "threats: [{name: linf}]\nsolver: {certify: milp}\n", "spec.yaml")
    with pytest.raises(SpecError, match=r"solver\.threads: threads must be 'auto'"):
        parse_spec("model: {builtin: breast-cancer-gbm}\ndata: {builtin: breast-cancer}\n"
                   "threats: [{name: linf}]\nsolver: {threads: 0}\n", "spec.yaml")


def test_cli_passes_every_option_to_radius(tmp_path, monkeypatch):
    """--batch-size, --threads and the others reach radius() as declared."""
    import pandas as pd
    import skops.io as sio
    from sklearn.linear_model import LogisticRegression
    from typer.testing import CliRunner

    import robustscope.search.engine as engine
    from robustscope.cli.app import app

    rng = np.random.default_rng(0)
    X = rng.random((12, 3))
    y = (X[:, 0] > 0.5).astype(int)
    sio.dump(LogisticRegression().fit(X, y), tmp_path / "m.skops")
    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    frame["label"] = y
    frame.to_csv(tmp_path / "d.csv", index=False)
    seen = {}
    real = engine.radius

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "radius", spy)
    result = CliRunner().invoke(app, [
        "radius", "--model", str(tmp_path / "m.skops"), "--data", str(tmp_path / "d.csv"),
        "--out", str(tmp_path / "r.csv"), "--quiet", "--threads", "none", "--batch-size", "5",
        "--certify", "none", "--rtol", "0.05", "--threat", "l2"])
    assert result.exit_code == 0, result.output
    assert {k: seen[k] for k in ("threads", "batch_size", "certify", "rtol", "threat")} == {
        "threads": None, "batch_size": 5, "certify": "none", "rtol": 0.05, "threat": "l2"}
    assert set(OPTIONS) <= set(seen)
    bad = CliRunner().invoke(app, [
        "radius", "--model", str(tmp_path / "m.skops"), "--data", str(tmp_path / "d.csv"),
        "--out", str(tmp_path / "r2.csv"), "--rtol", "2"])
    assert bad.exit_code == 2 and "--rtol must be in (0, 1), got 2.0" in bad.output
    assert not (tmp_path / "r2.csv").exists()


# -- certify in a spec reaches radius() through the shards -------------------------------------
@pytest.fixture(scope="module")
def torch_inputs(tmp_path_factory):
    """A tiny ReLU network saved as TorchScript and 6 inputs it classifies."""
    d = tmp_path_factory.mktemp("net")
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).eval()
    torch.jit.script(net).save(str(d / "net.pt"))
    X = np.random.default_rng(1).random((6, 4)).astype(np.float32)
    with torch.no_grad():
        y = net(torch.as_tensor(X)).argmax(1).numpy()
    np.savez(d / "data.npz", X=X, y=y)
    return d


@pytest.mark.parametrize("certify", ["none", "crown"])
def test_spec_certify_reaches_radius(torch_inputs, tmp_path, certify):
    from robustscope.runs.runner import run_spec_file
    from robustscope.runs.shards import read_shard

    d = torch_inputs
    (tmp_path / "spec.yaml").write_text(f"""\
model: {{path: {d / 'net.pt'}}}
data: {{path: {d / 'data.npz'}}}
features: {{default: {{lower: 0, upper: 1}}}}
threats:
  - {{name: linf, max_radius: 1.0}}
solver: {{certify: {certify}, budget: 400}}
scores: {{intrinsic: false, ood: false, pad: false, n_bootstrap: 0}}
outputs: {{dir: out, adversarial: false}}
execution: {{workers: 1}}
""")
    outcome = run_spec_file(tmp_path / "spec.yaml", quiet=True)
    res, _ = read_shard(next((outcome.out_dir / "shards" / "linf").glob("0*.npz")))
    assert res.meta["certify"] == (None if certify == "none" else "crown")
    if certify == "none":
        assert (res.lower_bound == 0).all()
    else:
        assert (res.lower_bound[res.found] > 0).all()


# -- issue 38, smaller items ---------------------------------------------------------------------
@pytest.mark.parametrize("bad", [float("nan"), -0.1, "0.1", True, None])
def test_one_training_strength_check_refuses_nan(bad):
    """Accuracy files (``Attacks Used``) and ``trained_on`` share one check; both refuse NaN
    and name the argument."""
    from robustscope.scores.accuracy_grid import AccuracyGrid, ModelAccuracies
    from robustscope.scores.multiattack import point_table

    grid = AccuracyGrid(90.0, {"AutoLinfAttack": {0.01: 80.0}})
    with pytest.raises(InputError, match=r"'Attacks Used' strength of 'AutoLinfAttack' must "
                                         r"be a number >= 0"):
        _ = ModelAccuracies("m", grid, {"Attacks Used": {"AutoLinfAttack": bad}}).trained_on
    with pytest.raises(InputError, match=r"trained_on: training strength of 'linf' must be a "
                                         r"number >= 0"):
        point_table(grid, grid, attacks=["AutoLinfAttack"], trained_on={"linf": bad})
    assert ModelAccuracies("m", grid, {"Attacks Used": {"A": 0.5}}).trained_on == {"A": 0.5}


def test_journal_keeps_nothing_between_calls(tmp_path):
    """The journal is read from disk each time (no module cache that outlives a run)."""
    import json

    from robustscope.runs import journal
    from robustscope.runs.shards import Shard

    assert not [n for n, v in vars(journal).items()
                if isinstance(v, dict) and n.startswith("_") and not n.startswith("__")]
    shard = Shard("linf", 0, 0, 0, 4, 1)
    journal.record(tmp_path, shard, "done", failed_rows=0)
    assert journal.read_journal(tmp_path)[shard.key]["status"] == "done"
    assert journal.pending(tmp_path, [shard]) == [shard]  # no shard file yet
    (tmp_path / journal.JOURNAL).write_text(json.dumps({"shard": shard.key}) + "\n{cut")
    assert journal.read_journal(tmp_path) == {shard.key: {"shard": shard.key}}
