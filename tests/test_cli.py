"""The command line end to end, on each model file format."""

from __future__ import annotations

import errno
import pathlib
import pickle

import numpy as np
import pandas as pd
import pytest
import torch
import typer
from typer.testing import CliRunner

from robustscope.cli.app import app
from robustscope.cli.common import EXIT_CODES, ExitCode
from robustscope.core.result import CSV_COLUMNS, STATUSES, RadiusResult
from robustscope.search import engine

runner = CliRunner()
N_ROWS = 30


@pytest.fixture(scope="module")
def tabular(tmp_path_factory, breast_cancer):
    X, y = breast_cancer
    order = np.random.default_rng(0).permutation(len(X))  # both classes among the first rows
    X, y = X[order][:, :8], y[order]
    folder = tmp_path_factory.mktemp("tabular")
    frame = pd.DataFrame(X[:N_ROWS], columns=[f"f{i}" for i in range(8)])
    frame["label"] = y[:N_ROWS]
    frame.to_csv(folder / "data.csv", index=False)
    return folder, X, y


def _run(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def _check_outputs(out_csv, adv_npz, n: int, shape: tuple[int, ...]):
    table = pd.read_csv(out_csv)
    assert list(table.columns[: len(CSV_COLUMNS)]) == CSV_COLUMNS
    assert len(table) == n
    assert set(table["status"]) <= set(STATUSES)
    assert (table["queries"] >= 1).all()
    adv = np.load(adv_npz)["X_adv"]
    assert adv.shape == (n, *shape)
    return table


def _radius(folder, model_path, *extra):
    out, adv = folder / f"{model_path.stem}.csv", folder / f"{model_path.stem}.npz"
    result = _run("radius", "--model", model_path, "--data", folder / "data.csv", "--out", out,
                  "--adversarial-out", adv, "--threat", "linf", "--quiet", *extra)
    return result, out, adv


def test_xgboost_json_and_ubj(tabular):
    xgb = pytest.importorskip("xgboost")
    folder, X, y = tabular
    model = xgb.XGBClassifier(n_estimators=10, max_depth=3).fit(X, y)
    for suffix in ("json", "ubj"):
        path = folder / f"xgb.{suffix}"
        model.save_model(path)
        result, out, adv = _radius(folder, path)
        assert result.exit_code == 0, result.output
        table = _check_outputs(out, adv, N_ROWS, (8,))
        assert (table["prediction"] == model.predict(X[:N_ROWS])).all()
        broken = table["status"].isin(["exact", "attacked"])
        assert (table["status"] == "exact").sum() >= N_ROWS // 2  # the trees are read exactly
        X_adv = np.load(adv)["X_adv"]
        assert (model.predict(X_adv[broken]) != y[:N_ROWS][broken]).all()


def test_lightgbm_text(tabular):
    lgb = pytest.importorskip("lightgbm")
    folder, X, y = tabular
    model = lgb.LGBMClassifier(n_estimators=10, num_leaves=7, verbose=-1).fit(X, y)
    path = folder / "lgb.txt"
    model.booster_.save_model(path)
    result, out, adv = _radius(folder, path)
    assert result.exit_code == 0, result.output
    table = _check_outputs(out, adv, N_ROWS, (8,))
    assert (table["prediction"] == model.predict(X[:N_ROWS])).all()


def test_skops_linear_model_is_exact(tabular):
    import skops.io as sio
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    folder, X, y = tabular
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit(X, y)
    path = folder / "lr.skops"
    sio.dump(model, path)
    result, out, adv = _radius(folder, path, "--solver", "exact")
    assert result.exit_code == 0, result.output
    table = _check_outputs(out, adv, N_ROWS, (8,))
    exact = table["status"] == "exact"
    assert exact.sum() >= N_ROWS - 2
    np.testing.assert_allclose(table["radius"][exact], table["lower_bound"][exact], rtol=1e-6)


def test_pickle_needs_trust(tabular):
    import joblib
    from sklearn.ensemble import RandomForestClassifier

    folder, X, y = tabular
    path = folder / "forest.joblib"
    joblib.dump(RandomForestClassifier(n_estimators=5, random_state=0).fit(X, y), path)
    refused, out, _ = _radius(folder, path)
    assert refused.exit_code != 0
    assert "--trust-pickle" in refused.output and not out.exists()
    accepted, out, adv = _radius(folder, path, "--trust-pickle")
    assert accepted.exit_code == 0, accepted.output
    _check_outputs(out, adv, N_ROWS, (8,))


def test_onnx_probabilities(tabular):
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper
    from sklearn.linear_model import LogisticRegression

    folder, X, y = tabular
    lr = LogisticRegression(max_iter=5000).fit(X / X.max(0), y)
    w = np.vstack([np.zeros(8), lr.coef_[0] / X.max(0)]).astype(np.float32)
    b = np.array([0.0, lr.intercept_[0]], dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "W", "b"], ["z"], transB=1),
         helper.make_node("Softmax", ["z"], ["probabilities"], axis=1)],
        "linear", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 8])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [None, 2])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")])
    path = folder / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    result, out, adv = _radius(folder, path)
    assert result.exit_code == 0, result.output
    table = _check_outputs(out, adv, N_ROWS, (8,))
    assert (table["prediction"] == lr.predict(X[:N_ROWS] / X.max(0))).all()


def test_torchscript_on_images(tmp_path, digits, digits_mlp):
    X, y = digits
    images = X[:10].reshape(10, 1, 8, 8)
    np.savez(tmp_path / "data.npz", X=images, y=y[:10])
    net = torch.nn.Sequential(torch.nn.Flatten(), *digits_mlp)
    path = tmp_path / "net.pt"
    torch.jit.script(net).save(str(path))
    out, adv = tmp_path / "radii.parquet", tmp_path / "adv.npz"
    result = _run("radius", "--model", path, "--data", tmp_path / "data.npz", "--out", out,
                  "--adversarial-out", adv, "--threat", "l2", "--quiet")
    assert result.exit_code == 0, result.output
    table = pd.read_parquet(out)
    assert (table["status"] == "attacked").sum() >= 8
    X_adv = np.load(adv)["X_adv"]
    assert X_adv.shape == images.shape and X_adv.min() >= 0 and X_adv.max() <= 1


def test_torch_export_program(tmp_path, digits, digits_mlp):
    X, y = digits
    np.savez(tmp_path / "data.npz", X=X[:10], y=y[:10])
    batch = torch.export.Dim("batch")
    program = torch.export.export(digits_mlp, (torch.zeros(2, 64),),
                                  dynamic_shapes=({0: batch},))
    path = tmp_path / "net.pt2"
    torch.export.save(program, str(path))
    out = tmp_path / "radii.csv"
    result = _run("radius", "--model", path, "--data", tmp_path / "data.npz", "--out", out,
                  "--quiet")
    assert result.exit_code == 0, result.output
    assert (pd.read_csv(out)["status"] == "attacked").sum() >= 8


def test_features_file_is_applied_and_checked(tabular):
    folder, X, y = tabular
    import skops.io as sio
    from sklearn.linear_model import LogisticRegression

    path = folder / "lr_raw.skops"
    sio.dump(LogisticRegression(max_iter=5000).fit(X / X.max(0), y), path)
    bad = folder / "bad.yaml"
    bad.write_text("default: {lower: 0, upper: 1}\n")  # the raw features exceed 1
    result, out, _ = _radius(folder, path, "--features", bad)
    assert result.exit_code != 0
    assert "contradicts the data" in result.output and not out.exists()


@pytest.mark.parametrize("args, message", [
    (["--model", "missing.json"], "does not exist"),
    (["--model", "{folder}/data.csv"], "unknown model file type '.csv'"),
    (["--out", "{folder}/radii.xlsx"], "unknown extension"),
    (["--out", "/no/such/folder/r.csv"], "does not exist"),
])
def test_bad_arguments_exit_nonzero_with_a_message(tabular, args, message):
    xgb = pytest.importorskip("xgboost")
    folder, X, y = tabular
    model_path = folder / "ok.json"
    xgb.XGBClassifier(n_estimators=2).fit(X, y).save_model(model_path)
    base = {"--model": str(model_path), "--data": str(folder / "data.csv"),
            "--out": str(folder / "radii.csv")}
    for key, value in zip(args[::2], args[1::2], strict=True):
        base[key] = value.format(folder=folder)
    result = _run("radius", *[t for kv in base.items() for t in kv], "--quiet")
    assert result.exit_code == 2
    assert message in result.output


def test_demo_runs(tmp_path):
    result = _run("demo", "--out-dir", tmp_path)
    assert result.exit_code == 0, result.output
    assert "logistic" in result.output and "black box" in result.output
    assert (tmp_path / "report.html").is_file()
    for slug in ("xgboost_exact", "xgboost_black_box", "logistic_regression_exact"):
        for figure in ("flip_rate", "scores"):
            assert (tmp_path / f"{figure}_{slug}.png").read_bytes()[:4] == b"\x89PNG"
    linear = pd.read_csv(tmp_path / "radii_logistic_regression_exact.csv")
    assert (linear["status"].isin(["exact", "misclassified"])).all()
    trees = pd.read_csv(tmp_path / "radii_xgboost_exact.csv")
    blind = pd.read_csv(tmp_path / "radii_xgboost_black_box.csv")
    assert (trees["status"].isin(["exact", "misclassified"])).all()
    exact = trees["status"] == "exact"
    # a black-box radius is never below the certified exact one, and close to it
    assert (blind["radius"][exact] >= trees["lower_bound"][exact] * (1 - 1e-9)).all()
    assert (blind["radius"][exact] / trees["radius"][exact]).median() < 1.1


# -- the exit-code policy (robustscope.cli.common) ---------------------------------------------
#: One bad input per command: its arguments (``{tmp}`` is a fresh folder holding a plain file
#: ``afile``) and a piece of the one-line message.
BAD_INPUT = {
    "radius": (["radius", "--model", "{tmp}/m.json", "--data", "{tmp}/nope.csv", "--out",
                "{tmp}/r.csv"], "nope.csv does not exist"),
    "demo": (["demo", "--out-dir", "{tmp}/afile"], "is a file, not a folder"),
    "run": (["run", "{tmp}/nope.yaml"], "nope.yaml does not exist"),
    "compare": (["compare", "{tmp}/runA", "{tmp}/runB"], "no such folder"),
    "scores": (["scores", "{tmp}/nope.csv"], "no such file"),
    "leaderboard": (["leaderboard", "--accuracies", "{tmp}/nope.json"], "not found"),
    "image-grid": (["image-grid", "--model", "{tmp}/net.pt", "--data", "{tmp}/nope.npz",
                    "--out", "{tmp}/acc.json"], "nope.npz does not exist"),
    "verify": (["verify", "--model", "{tmp}/net.onnx", "--spec", "{tmp}/nope.vnnlib"],
               "nope.vnnlib: cannot be read"),
    # option values that typer itself refuses get the same one line and code
    "radius --threat": (["radius", "--model", "m.json", "--data", "d.csv", "--out", "r.csv",
                         "--threat", "l7"], "'l7' is not one of"),
    "image-grid --steps": (["image-grid", "--model", "m.pt", "--data", "d.npz", "--out",
                            "a.json", "--steps", "0"], "--steps"),
    "scores --colour": (["scores", "r.csv", "--colour"], "No such option: --colour"),
}


def test_every_command_has_a_bad_input_case():
    commands = set(typer.main.get_command(app).commands)
    assert commands == {case.split()[0] for case in BAD_INPUT}


def _one_error_line(result) -> str:
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output
    return lines[0]


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_input_is_one_line_and_exit_2(case, tmp_path):
    args, message = BAD_INPUT[case]
    (tmp_path / "afile").write_text("not a folder\n")
    result = _run(*[a.format(tmp=tmp_path) for a in args])
    assert result.exit_code == ExitCode.BAD_INPUT == 2, result.output
    assert message in _one_error_line(result)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]  # nothing written


class FailingModel:
    """Loads like any classifier (it says its classes) and raises when it is called."""

    classes_ = np.array([0, 1])

    def predict_proba(self, X):
        raise RuntimeError("sensor offline")


def test_a_model_that_raises_is_a_runtime_failure(tabular, tmp_path):
    folder, _, _ = tabular
    model = tmp_path / "failing.pkl"
    model.write_bytes(pickle.dumps(FailingModel()))  # our own object: a trusted pickle
    args = ["radius", "--model", model, "--data", folder / "data.csv", "--out",
            tmp_path / "r.csv", "--trust-pickle", "--quiet"]
    result = _run(*args)
    assert result.exit_code == ExitCode.FAILURE == 1, result.output
    line = _one_error_line(result)
    assert "FailingModel raised RuntimeError: sensor offline" in line and "--verbose" in line
    assert not (tmp_path / "r.csv").exists()
    verbose = _run("--verbose", *args)
    assert verbose.exit_code == 1
    assert "Traceback" in verbose.stderr and 'raise RuntimeError("sensor offline")' in \
        verbose.stderr
    assert verbose.stderr.splitlines()[-1].startswith("error: ")


@pytest.fixture(scope="module")
def linear_model(tabular):
    import skops.io as sio
    from sklearn.linear_model import LogisticRegression

    folder, X, y = tabular
    path = folder / "lr_policy.skops"
    sio.dump(LogisticRegression(max_iter=5000).fit(X / X.max(0), y), path)
    return path


def _disk_full(self, path, *args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device", str(path))


def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def _bug(*args, **kwargs):
    return 1 / 0


@pytest.mark.parametrize("target, replacement, code, message", [
    (RadiusResult, ("save", _disk_full), ExitCode.FAILURE, "r.csv: No space left on device"),
    (engine, ("radius", _bug), ExitCode.FAILURE,
     "unexpected ZeroDivisionError: division by zero (run robustscope --verbose"),
    (engine, ("radius", _interrupt), ExitCode.INTERRUPTED, "interrupted"),
], ids=["disk-full", "bug", "interrupted"])
def test_runtime_failures_and_interruptions(tabular, linear_model, tmp_path, monkeypatch,
                                            target, replacement, code, message):
    folder, _, _ = tabular
    monkeypatch.setattr(target, *replacement)
    result = _run("radius", "--model", linear_model, "--data", folder / "data.csv", "--out",
                  tmp_path / "r.csv", "--quiet")
    assert result.exit_code == code, result.output
    assert message in _one_error_line(result)


def test_exit_code_table_is_documented():
    assert set(EXIT_CODES) == {0, 1, 2, 130, 143} == {int(c) for c in ExitCode}
    root = pathlib.Path(__file__).resolve().parents[1]
    readme = " ".join((root / "README.md").read_text().split())
    table = (root / "docs" / "getting-started.md").read_text().split("## Exit codes")[1]
    for code in EXIT_CODES:
        assert f"\n| {code} |" in table, code
        assert code == 0 or f"exit code {code}" in readme, code
