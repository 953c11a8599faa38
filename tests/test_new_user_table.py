"""Issue 17 ("What a new user hits first") as one table: every case of items 2, 3, 8 and 11,
and the command-line side of items 1, 4, 6, 9 and 14, as (arguments, exit code, message
fragment, files that must not exist afterwards, files that must be unchanged).

``{d}`` in a case is the module's folder of inputs (made once by :func:`inputs`), ``{o}`` a
fresh folder per case for outputs. A case that fails must have written nothing: its outputs
are listed under ``absent`` and the inputs it names as outputs under ``unchanged``.
"""

from __future__ import annotations

import hashlib
import json
import operator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from robustscope.cli.app import app
from robustscope.core.errors import InputError, RobustscopeWarning

runner = CliRunner()
#: A folder no process can create files in, root included (the tests run as root in CI).
READ_ONLY = "/sys"


@dataclass(frozen=True)
class Case:
    """One row of the table."""

    item: str
    args: tuple[str, ...]
    code: int
    fragment: str
    absent: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    #: a RobustscopeWarning the command must give (its message contains this)
    warns: str = ""


def _c(item: str, args: str, code: int, fragment: str, absent: str = "",
       unchanged: str = "", warns: str = "") -> Case:
    return Case(item, tuple(args.split()), code, fragment, tuple(absent.split()),
                tuple(unchanged.split()), warns)


# radius with the named logistic regression on the plain CSV, its outputs in {o}
RADIUS = "radius --model {d}/m.skops --data {d}/d.csv -q"
GRID = "image-grid --model {d}/net.pt --data {d}/img.npz --threats linf --steps 1"

CASES: dict[str, Case] = {
    # -- item 2: never over an input, never two outputs on one path, writable before work --
    "out is the data file": _c("2", "radius --model {d}/m.skops --data {d}/d.csv "
                               "--out {d}/d.csv", 2, "is the --data file", unchanged="{d}/d.csv"),
    "out is the model file": _c("2", "radius --model {d}/x.json --data {d}/d.csv "
                                "--out {d}/x.json", 2, "is the --model file",
                                unchanged="{d}/x.json"),
    "out is the feature file": _c("2", RADIUS + " --features {d}/feat.yaml --out "
                                  "{d}/feat.yaml", 2, "is the --features file",
                                  unchanged="{d}/feat.yaml"),
    "adversarial-out is out": _c("2", RADIUS + " --out {o}/r.csv --adversarial-out {o}/r.csv",
                                 2, "are the same file", absent="{o}/r.csv"),
    "out in a read-only folder": _c("2", RADIUS + f" --out {READ_ONLY}/r.csv", 2,
                                    "cannot write in folder"),
    "adversarial-out in a read-only folder": _c(
        "2", RADIUS + f" --out {{o}}/r.csv --adversarial-out {READ_ONLY}/a.npz", 2,
        "--adversarial-out: cannot write in folder", absent="{o}/r.csv"),
    "out folder missing": _c("2", RADIUS + " --out {o}/nope/r.csv", 2, "does not exist"),
    "out extension": _c("2", RADIUS + " --out {o}/r.txt", 2, "unknown extension '.txt'",
                        absent="{o}/r.txt"),
    "image-grid out is the data": _c("2", GRID + " --out {d}/img.npz", 2, "is the --data file",
                                     unchanged="{d}/img.npz"),
    "image-grid levels-out is the model": _c("2", GRID + " --out {o}/g.json --levels-out "
                                             "{d}/net.pt", 2, "is the --model file",
                                             absent="{o}/g.json", unchanged="{d}/net.pt"),
    "image-grid out extension": _c("2", GRID + " --out {o}/g.csv", 2, "use .json",
                                   absent="{o}/g.csv"),
    "compare out is a run's manifest": _c("2", "compare {d}/runA {d}/runA --out "
                                          "{d}/runA/run.json", 2, "is the RUN_A run.json file",
                                          unchanged="{d}/runA/run.json"),
    "compare out extension": _c("2", "compare {d}/runA {d}/runA --out {o}/c.txt", 2,
                                "use .html", absent="{o}/c.txt"),
    "leaderboard figures is a file": _c("2", "leaderboard --accuracies {d}/a.json --figures "
                                        "{d}/a.json", 2, "is a file, not a folder",
                                        unchanged="{d}/a.json"),
    "leaderboard figures read-only": _c("2", "leaderboard --accuracies {d}/a.json --figures "
                                        f"{READ_ONLY}/figs", 2, "cannot write in folder"),
    "demo out-dir read-only": _c("2", f"demo -q --out-dir {READ_ONLY}/demo", 2,
                                 "cannot write in folder"),
    "run folder would replace its data": _c("2", "run {d}/inplace/spec.yaml -q", 2,
                                            "which is the data.path file",
                                            unchanged="{d}/inplace/radii_linf.csv"),
    "run store is its data": _c("2", "run {d}/storedata/spec.yaml -q", 2,
                                "outputs.store", unchanged="{d}/storedata/d.csv",
                                absent="{d}/storedata/out"),
    # -- item 3: columns by name --------------------------------------------------------------
    "columns reordered by the model's names": _c("3", "radius --model {d}/m.skops --data "
                                                 "{d}/d_perm.csv --out {o}/r.csv", 0, "wrote"),
    "missing column named": _c("3", RADIUS.replace("d.csv", "d_missing.csv") + " --out "
                               "{o}/r.csv", 2, "missing column(s) c", absent="{o}/r.csv"),
    "unknown column named": _c("3", RADIUS.replace("d.csv", "d_extra.csv") + " --out "
                               "{o}/r.csv", 2, "unknown column(s) x", absent="{o}/r.csv"),
    "order assumed is said": _c("3", "radius --model {d}/bare.skops --data {d}/d.csv --out "
                                "{o}/r.csv", 0, "column order assumed"),
    "run: missing column named": _c("3", "run {d}/missing/spec.yaml -q", 2,
                                    "missing column(s) c", absent="{d}/missing/out/run.json"),
    # -- item 8: one loader, degenerate data ------------------------------------------------
    "radius reads Parquet": _c("8", "radius --model {d}/m.skops --data {d}/d.parquet --out "
                               "{o}/r.csv", 0, "wrote"),
    "one row without a feature file": _c("8", RADIUS.replace("d.csv", "one.csv") + " --out "
                                         "{o}/r.csv", 2, "one row", absent="{o}/r.csv"),
    "one row with a feature file": _c("8", RADIUS.replace("d.csv", "one.csv") + " --features "
                                      "{d}/feat.yaml --out {o}/r.csv", 0, ""),
    "empty feature file": _c("8", RADIUS + " --features {d}/empty.yaml --out {o}/r.csv", 2,
                             "is empty", absent="{o}/r.csv"),
    "duplicate CSV columns": _c("8", RADIUS.replace("d.csv", "dup.csv") + " --out {o}/r.csv",
                                2, "'a' appear more than once", absent="{o}/r.csv"),
    "duplicate Parquet columns": _c("8", RADIUS.replace("d.csv", "dup.parquet") + " --out "
                                    "{o}/r.csv", 2, "'a' appear more than once"),
    # -- item 11: one line, exit code 2 ----------------------------------------------------
    "empty CSV": _c("11", RADIUS.replace("d.csv", "empty.csv") + " --out {o}/r.csv", 2,
                    "empty.csv: the file is empty", absent="{o}/r.csv"),
    "header-only CSV": _c("11", RADIUS.replace("d.csv", "header.csv") + " --out {o}/r.csv", 2,
                          "no rows (only a header)", absent="{o}/r.csv"),
    "damaged Parquet": _c("11", RADIUS.replace("d.csv", "bad.parquet") + " --out {o}/r.csv",
                          2, "cannot read as Parquet"),
    "data is a folder": _c("11", "radius --model {d}/m.skops --data {d} --out {o}/r.csv", 2,
                           "is a folder, not a file"),
    "truncated XGBoost JSON": _c("11", "radius --model {d}/trunc.json --data {d}/d.csv --out "
                                 "{o}/r.csv", 2, "not a valid XGBoost model",
                                 absent="{o}/r.csv"),
    "truncated XGBoost UBJ": _c("11", "radius --model {d}/trunc.ubj --data {d}/d.csv --out "
                                "{o}/r.csv", 2, "not a valid XGBoost model"),
    "device not on this machine": _c("11", RADIUS + " --out {o}/r.csv --device cuda:99", 2,
                                     "--device cuda:99: not available", absent="{o}/r.csv"),
    "device unknown": _c("11", RADIUS + " --out {o}/r.csv --device nosuch", 2,
                         "unknown device 'nosuch'"),
    "model is a folder": _c("11", "radius --model {d} --data {d}/d.csv --out {o}/r.csv", 2,
                            "is a folder, not a model file"),
    "adversarial-out extension": _c("11", RADIUS + " --out {o}/r.csv --adversarial-out "
                                    "{o}/a.txt", 2, "use .npz", absent="{o}/r.csv {o}/a.txt"),
    "leaderboard accuracies is a folder": _c("11", "leaderboard --accuracies {d}", 2,
                                             "is a folder, not a file"),
    "leaderboard empty accuracies": _c("11", "leaderboard --accuracies {d}/empty.json", 2,
                                       "not valid JSON"),
    "leaderboard db not a store": _c("11", "leaderboard --store {d}/d.csv", 2,
                                     "not a SQLite database"),
    "leaderboard bad sort": _c("11", "leaderboard --accuracies {d}/a.json --sort x", 2,
                               "--sort"),
    "image-grid device": _c("11", GRID + " --out {o}/g.json --device nosuch", 2,
                            "unknown device", absent="{o}/g.json"),
    "image-grid no images": _c("11", GRID.replace("img.npz", "img0.npz") + " --out {o}/g.json",
                               2, "X and y have no rows", absent="{o}/g.json"),
    "image-grid model is a folder": _c("11", GRID.replace("{d}/net.pt", "{d}") + " --out "
                                       "{o}/g.json", 2, "is a folder"),
    "image-grid truncated model": _c("11", GRID.replace("net.pt", "trunc.json") + " --out "
                                     "{o}/g.json", 2, "not a valid XGBoost model"),
    "run on an empty CSV": _c("11", "run {d}/emptydata/spec.yaml -q", 2, "the file is empty"),
    # -- already done items, where the command line shows them -----------------------------
    "1: XGBoost fitted on a DataFrame": _c("1", "radius --model {d}/x.json --data {d}/small.csv "
                                           "--out {o}/r.csv", 0, "wrote"),
    "4: the summary counts satisfied": _c("4", "radius --model {d}/m.skops --data {d}/d.csv "
                                          "--out {o}/r.csv", 0, "satisfied"),
    "6: exact solver on TorchScript ReLU": _c("6", "radius --model {d}/relu.pt --data "
                                              "{d}/small.csv --solver exact --out {o}/r.csv",
                                              0, "wrote"),
    "9: leaderboard with acc* = 0": _c("9", "leaderboard --accuracies {d}/a.json --accuracies "
                                       "{d}/b.json --reference best --attacks linf", 0,
                                       "excluded"),
    "14: pgd on trees warns": _c("14", "radius --model {d}/x.json --data {d}/small.csv --solver "
                                 "pgd --budget 200 --out {o}/r.csv", 0, "wrote",
                                 warns="solver='pgd' is a gradient attack"),
}


# Issue 43 ("What a new user still hits"): one case per item where a command line shows it.
ISSUE_43: dict[str, Case] = {
    "2: a RandomForest in skops loads without --trust-pickle": _c(
        "2", RADIUS.replace("m.skops", "rf.skops") + " --out {o}/r.csv", 0, ""),
    "2: a HistGradientBoosting in skops loads without --trust-pickle": _c(
        "2", RADIUS.replace("m.skops", "hgb.skops") + " --out {o}/r.csv", 0, ""),
    "2: a skops type that is not scikit-learn's own is refused by name": _c(
        "2", RADIUS.replace("m.skops", "neg.skops") + " --out {o}/r.csv", 2,
        "(_operator.neg); pass --trust-pickle", absent="{o}/r.csv"),
    "1: LightGBM's score_7 and a_b are the file's 'score 7' and 'a,b', said": _c(
        "1", "radius --model {d}/lgb.txt --data {d}/lgb.csv --out {o}/r.csv", 0,
        "'score 7' as score_7 (LightGBM stores a space as '_'); 'a,b' as a_b"),
    "1: a column still missing is named as the model spells it": _c(
        "1", "radius --model {d}/lgb.txt --data {d}/lgb_missing.csv --out {o}/r.csv", 2,
        "missing column(s) a_b", absent="{o}/r.csv"),
    "3: flat CSV rows into a CNN are reshaped, and said": _c(
        "3", "radius --model {d}/cnn.pt --data {d}/flat.csv --out {o}/r.csv", 0,
        "rows of 16 values were taken as 1×4×4 inputs, the shape the model takes (its first "
        "layer is a Conv2d of 1 channel(s); square images assumed)"),
    "3: a flat NPZ into an exported CNN is reshaped to its shape": _c(
        "3", "radius --model {d}/cnn.pt2 --data {d}/flat.npz --out {o}/r.csv", 0,
        "rows of 16 values were taken as 1×4×4 inputs, the shape the model takes (the shape "
        "the program was exported with)"),
    "3: flat rows in an image grid": _c(
        "3", GRID.replace("net.pt", "cnn.pt").replace("img.npz", "flat.npz")
        + " --out {o}/g.json", 0, "rows of 16 values were taken as 1×4×4"),
    "3: a run reshapes flat rows and its reference rows": _c(
        "3", "run {d}/flatrun/spec.yaml -q", 0, "report.html"),
    "3: NHWC images into a CNN, one line": _c(
        "3", "radius --model {d}/cnn.pt --data {d}/nhwc.npz -q --out {o}/r.csv", 2,
        "nhwc.npz: X has shape (4, 4, 4, 1); the model takes N×1×H×W (its first "
        "layer is a Conv2d of 1 channel(s)); the images look channels-last", absent="{o}/r.csv"),
    "3: a tabular CSV into a CNN, one line": _c(
        "3", "radius --model {d}/cnn.pt --data {d}/d.csv -q --out {o}/r.csv", 2,
        "X has shape (40, 3); the model takes N×1×H×W", absent="{o}/r.csv"),
    "3: images into an MLP, one line": _c(
        "3", "radius --model {d}/relu.pt --data {d}/img.npz -q --out {o}/r.csv", 2,
        "X has shape (4, 1, 4, 4); the model takes N×3 (its first layer is a Linear of 3 "
        "inputs)", absent="{o}/r.csv"),
    "12: radius --version": _c("12", "radius --version", 0, "robustscope "),
    "12: --version wins over missing options": _c("12", "image-grid --version", 0,
                                                  "robustscope "),
    "10: NaN named by its CSV column": _c(
        "10", RADIUS.replace("d.csv", "nan.csv") + " --out {o}/r.csv", 2,
        "nan.csv: row 2, feature 'score 7' is nan", absent="{o}/r.csv"),
    "10: NaN in a run names its column": _c("10", "run {d}/nan/spec.yaml -q", 2,
                                            "feature 'score 7' is nan"),
    "10: string labels against a model of classes 0, 1 are shown, with a mapping": _c(
        "10", RADIUS.replace("d.csv", "strlab.csv") + " --out {o}/r.csv", 2,
        "which is not one of the model's classes [0, 1] (the labels found: no, yes); write "
        "each label as the class the model was fitted with; numbered in sorted order, as "
        "scikit-learn's LabelEncoder does, that is no=0, yes=1", absent="{o}/r.csv"),
    "10: string labels against a network are shown, with a mapping": _c(
        "10", "radius --model {d}/relu.pt --data {d}/strlab.csv -q --out {o}/r.csv", 2,
        "labels must be class indices 0..1 (the model stores no class names); the labels "
        "found: no, yes; write each label", absent="{o}/r.csv"),
    "10: string labels map where the model knows its classes": _c(
        "10", RADIUS.replace("m.skops", "strlab.skops").replace("d.csv", "strlab.csv")
        + " --out {o}/r.csv", 0, ""),
    "10: images in 0..255 in an NPZ": _c(
        "10", "radius --model {d}/net.pt --data {d}/img255.npz -q --out {o}/r.csv", 2,
        "which looks like 0..255 (8-bit pixels); images must lie in [0, 1]: divide by 255",
        absent="{o}/r.csv"),
    "10: images in 0..255 in an image grid": _c(
        "10", GRID.replace("img.npz", "img255.npz") + " --out {o}/g.json", 2,
        "looks like 0..255", absent="{o}/g.json"),
    "9: a digits grid against CIFAR-10's acc*": _c(
        "9", "leaderboard --accuracies {d}/digits.json", 2,
        "model 'digits-cnn' was evaluated on digits (1×8×8 images), but the reference acc* "
        "(the published MultiRobustBench table) is of CIFAR-10 (3×32×32 images)"),
    "9: images of the same shape but another dataset's name: a warning, and the table": _c(
        "9", "leaderboard --accuracies {d}/digits.json --accuracies {d}/usps.json "
        "--reference best --attacks linf", 0, "usps-cnn",
        warns="model 'usps-cnn' was evaluated on usps .* is of digits"),
    "9: digits grids against each other": _c(
        "9", "leaderboard --accuracies {d}/digits.json --accuracies {d}/digits2.json "
        "--reference best --attacks linf", 0, "digits-cnn"),
}


def _spec(folder: Path, text: str, files: dict[str, pd.DataFrame] | None = None) -> None:
    folder.mkdir()
    for name, frame in (files or {}).items():
        frame.to_csv(folder / name, index=False)
    (folder / "spec.yaml").write_text(text)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """Every input file of the table, small enough that a case runs in about a second."""
    import lightgbm as lgb
    import pyarrow as pa
    import pyarrow.parquet as pq
    import skops.io as sio
    import xgboost as xgb
    from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer

    d = tmp_path_factory.mktemp("inputs")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    y = (X[:, 0] + 0.5 * X[:, 1] - X[:, 2] > 0).astype(int)
    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    sio.dump(LogisticRegression().fit(frame, y), d / "m.skops")      # names a, b, c
    sio.dump(LogisticRegression().fit(X, y), d / "bare.skops")       # no names
    sio.dump(RandomForestClassifier(n_estimators=3, max_depth=2, random_state=0)
             .fit(frame, y), d / "rf.skops")                       # holds sklearn's Tree
    sio.dump(HistGradientBoostingClassifier(max_iter=3, max_depth=2).fit(frame, y),
             d / "hgb.skops")                                      # holds TreePredictor
    sio.dump(make_pipeline(FunctionTransformer(operator.neg), LogisticRegression())
             .fit(frame, y), d / "neg.skops")                      # holds _operator.neg
    booster = xgb.XGBClassifier(n_estimators=3, max_depth=2).fit(frame, y)
    booster.save_model(d / "x.json")
    booster.save_model(d / "x.ubj")
    text = (d / "x.json").read_bytes()
    (d / "trunc.json").write_bytes(text[: len(text) // 2])
    raw = (d / "x.ubj").read_bytes()
    (d / "trunc.ubj").write_bytes(raw[: len(raw) // 2])
    # LightGBM stores 'score 7' as score_7 itself and refuses 'a,b' (renamed a_b to fit)
    lgb_frame = frame.set_axis(["score 7", "a_b", "c"], axis=1)
    lgb.LGBMClassifier(n_estimators=3, num_leaves=4, min_child_samples=2, verbose=-1).fit(
        lgb_frame, y).booster_.save_model(d / "lgb.txt")
    lgb_data = frame.set_axis(["score 7", "a,b", "c"], axis=1).assign(label=y)
    lgb_data.to_csv(d / "lgb.csv", index=False)
    lgb_data.drop(columns="a,b").to_csv(d / "lgb_missing.csv", index=False)
    torch.manual_seed(0)
    relu = torch.nn.Sequential(torch.nn.Linear(3, 6), torch.nn.ReLU(), torch.nn.Linear(6, 2))
    torch.jit.script(relu).save(str(d / "relu.pt"))
    torch.jit.script(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 2))).save(
        str(d / "net.pt"))
    cnn = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Flatten(), torch.nn.Linear(32, 2))
    torch.jit.script(cnn).save(str(d / "cnn.pt"))
    torch.export.save(torch.export.export(cnn, (torch.zeros(2, 1, 4, 4),), dynamic_shapes=(
        {0: torch.export.Dim("batch")},)), str(d / "cnn.pt2"))

    data = frame.assign(label=y)
    data.to_csv(d / "d.csv", index=False)
    data[["c", "a", "b", "label"]].to_csv(d / "d_perm.csv", index=False)
    data[["a", "b", "label"]].to_csv(d / "d_missing.csv", index=False)
    data.assign(x=0.0)[["a", "b", "c", "x", "label"]].to_csv(d / "d_extra.csv", index=False)
    data.iloc[:6].to_csv(d / "small.csv", index=False)
    data.iloc[:1].to_csv(d / "one.csv", index=False)
    data.iloc[:0].to_csv(d / "header.csv", index=False)
    data.to_parquet(d / "d.parquet")
    (d / "empty.csv").write_text("")
    (d / "nan.csv").write_text("a,b,score 7,label\n1,2,3,0\n4,5,6,1\n7,8,,0\n")
    (d / "dup.csv").write_text("a,a,label\n1,2,0\n3,4,1\n")
    pq.write_table(pa.table([pa.array([1.0, 2.0]), pa.array([3.0, 4.0]), pa.array([0, 1])],
                            names=["a", "a", "label"]), d / "dup.parquet")
    (d / "bad.parquet").write_text("not parquet")
    (d / "feat.yaml").write_text("default: {lower: -5, upper: 5}\n")
    (d / "empty.yaml").write_text("# nothing here\n")

    images = rng.uniform(size=(4, 1, 4, 4))
    np.savez(d / "img.npz", X=images, y=np.array([0, 1, 0, 1]))
    np.savez(d / "img0.npz", X=images[:0], y=np.zeros(0, dtype=int))
    np.savez(d / "flat.npz", X=images.reshape(4, 16), y=np.array([0, 1, 0, 1]))
    np.savez(d / "nhwc.npz", X=images.transpose(0, 2, 3, 1), y=np.array([0, 1, 0, 1]))
    pd.DataFrame(images.reshape(4, 16), columns=[f"p{i}" for i in range(16)]).assign(
        label=[0, 1, 0, 1]).to_csv(d / "flat.csv", index=False)
    np.savez(d / "img255.npz", X=np.round(images * 255).astype(np.uint8), y=np.array([0, 1, 0, 1]))
    words = np.array(["no", "yes"])[y]
    frame.assign(label=words).to_csv(d / "strlab.csv", index=False)
    sio.dump(LogisticRegression().fit(frame, words), d / "strlab.skops")  # classes no, yes

    (d / "a.json").write_text(json.dumps({"NoAttack": 90.0, "AutoLinfAttack":
                                          {"0.005": 80.0, "0.5": 0.0}}))
    (d / "b.json").write_text(json.dumps({"NoAttack": 80.0, "AutoLinfAttack":
                                          {"0.005": 60.0, "0.5": 0.0}}))
    (d / "empty.json").write_text("")
    for name, model, clean, dataset in (("digits", "digits-cnn", 97.0, "digits"),
                                        ("digits2", "digits-mlp", 93.0, "digits"),
                                        ("usps", "usps-cnn", 91.0, "usps")):
        (d / f"{name}.json").write_text(json.dumps({
            "NoAttack": clean, "AutoLinfAttack": {"0.005": clean - 10, "0.5": 1.0},
            "details": {"model": model, "dataset": dataset, "input_shape": [1, 8, 8],
                        "inputs": 100}}))
    (d / "runA").mkdir()
    (d / "runA" / "run.json").write_text('{"not": "a finished run"}')

    threats = "threats: [{name: linf, strengths: {max: 1, num: 4}}]\n"
    # the run folder is the data's folder, and the data is named like a radius table
    _spec(d / "inplace", "model: {path: ../m.skops}\ndata: {path: radii_linf.csv}\n"
          + threats + "outputs: {dir: .}\n", {"radii_linf.csv": data})
    _spec(d / "storedata", "model: {path: ../m.skops}\ndata: {path: d.csv}\n" + threats
          + "outputs: {dir: out, store: d.csv}\n", {"d.csv": data})
    _spec(d / "missing", "model: {path: ../m.skops}\ndata: {path: ../d_missing.csv}\n"
          + threats + "outputs: {dir: out}\nexecution: {workers: 1}\n")
    _spec(d / "flatrun", "model: {path: ../cnn.pt}\ndata: {path: ../flat.csv, split: "
          "{test_size: 0.5, stratify: false}}\n" + threats + "outputs: {dir: out}\n"
          "execution: {workers: 1}\n")
    _spec(d / "nan", "model: {path: ../bare.skops}\ndata: {path: ../nan.csv}\n" + threats
          + "outputs: {dir: out}\n")
    _spec(d / "emptydata", "model: {path: ../m.skops}\ndata: {path: ../empty.csv}\n"
          + threats + "outputs: {dir: out}\n")
    return d


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("name", list(CASES))
def test_new_user_table(name: str, inputs: Path, tmp_path: Path) -> None:
    _check(CASES[name], name, inputs, tmp_path)


@pytest.mark.parametrize("name", list(ISSUE_43))
def test_new_user_still_hits(name: str, inputs: Path, tmp_path: Path) -> None:
    _check(ISSUE_43[name], name, inputs, tmp_path)


def _check(case: Case, name: str, inputs: Path, tmp_path: Path) -> None:
    def fill(text: str) -> str:
        return text.format(d=inputs, o=tmp_path)

    unchanged = {Path(fill(p)): _digest(Path(fill(p))) for p in case.unchanged}
    if case.warns:
        with pytest.warns(RobustscopeWarning, match=case.warns):
            result = runner.invoke(app, [fill(a) for a in case.args])
    else:
        result = runner.invoke(app, [fill(a) for a in case.args])
    assert result.exit_code == case.code, f"#{case.item} {name}: {result.output}"
    if case.code == 0:  # the summary may wrap a note at the terminal's width
        assert case.fragment in " ".join(result.output.split()), result.output
    else:
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), result.output
        assert case.fragment in lines[0], lines[0]
    for path in case.absent:
        assert not Path(fill(path)).exists(), f"{path} was written"
    for path, digest in unchanged.items():
        assert _digest(path) == digest, f"{path} was changed"
    assert not list(inputs.glob(".*.tmp*")), "a temporary file was left behind"


def test_a_warning_is_one_line_on_stderr(inputs: Path) -> None:
    """#43 item 9: the leaderboard's dataset warning (any RobustscopeWarning) is printed as
    one line 'warning: ...', not in Python's format (file, line number, source line)."""
    import os
    import subprocess
    import sys

    # a process of its own: pytest records warnings instead of showing them
    done = subprocess.run(
        [sys.executable, "-m", "robustscope.cli.app", "leaderboard", "--accuracies",
         str(inputs / "digits.json"), "--accuracies", str(inputs / "usps.json"),
         "--reference", "best", "--attacks", "linf"], capture_output=True, text=True,
        timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path),
                          "COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "warning: model 'usps-cnn' was evaluated on usps (1×8×8 images), but the reference "
        "acc* (best of the models, with 'digits-cnn') is of digits (1×8×8 images) (check that "
        "they are the same data)"]
    assert "usps-cnn" in done.stdout


def test_every_item_has_a_case() -> None:
    assert {c.item for c in CASES.values()} == {"1", "2", "3", "4", "6", "8", "9", "11", "14"}


def test_every_command_takes_version() -> None:
    """Issue 43 item 12: ``robustscope <command> --version`` as ``robustscope --version``."""
    import typer

    group = typer.main.get_command(app)
    expected = runner.invoke(app, ["--version"]).output
    assert expected.startswith("robustscope ")
    names = group.list_commands(group.make_context("robustscope", ["--help"],
                                                   resilient_parsing=True))
    assert {"radius", "run", "image-grid", "leaderboard", "scores", "compare"} <= set(names)
    for name in names:
        result = runner.invoke(app, [name, "--version"])
        assert result.exit_code == 0 and result.output == expected, (name, result.output)


def test_reordered_columns_give_the_same_radii(inputs: Path, tmp_path: Path) -> None:
    """Item 3: the same data with its columns in another order gives the same table."""
    tables = []
    for name in ("d.csv", "d_perm.csv", "d.parquet"):
        out = tmp_path / f"{name}.csv"
        result = runner.invoke(app, ["radius", "--model", str(inputs / "m.skops"), "--data",
                                     str(inputs / name), "--out", str(out), "-q"])
        assert result.exit_code == 0, result.output
        tables.append(pd.read_csv(out).drop(columns="seconds"))
    pd.testing.assert_frame_equal(tables[0], tables[1])
    pd.testing.assert_frame_equal(tables[0], tables[2])


def test_assumed_order_is_kept_in_the_json_result(inputs: Path, tmp_path: Path) -> None:
    """Item 3: where nothing knows the names, the JSON table says the order was assumed."""
    out = tmp_path / "r.json"
    result = runner.invoke(app, ["radius", "--model", str(inputs / "bare.skops"), "--data",
                                 str(inputs / "d.csv"), "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    assert "column order assumed" in json.loads(out.read_text())["meta"]["columns"]


def test_seed_none_is_refused_in_python(inputs: Path) -> None:
    """Item 11: ``seed=None`` in Python is bad input, named."""
    import skops.io as sio

    from robustscope import radius

    model = sio.load(inputs / "m.skops")
    data = pd.read_csv(inputs / "small.csv")
    with pytest.raises(InputError, match="seed"):
        radius(model, data[["a", "b", "c"]], data["label"].to_numpy(), seed=None)


def test_a_failed_second_output_leaves_neither(inputs: Path, tmp_path: Path, monkeypatch) -> None:
    """Item 2: when writing the counterexamples fails (a full disk, say) after the table
    was written to its temporary file, neither output appears and no temporary is left."""
    from robustscope.core.result import RadiusResult

    def full_disk(self, path):
        Path(path).write_bytes(b"partial")
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(RadiusResult, "save_adversarial", full_disk)
    result = runner.invoke(app, ["radius", "--model", str(inputs / "m.skops"), "--data",
                                 str(inputs / "small.csv"), "--out", str(tmp_path / "r.csv"),
                                 "--adversarial-out", str(tmp_path / "a.npz"), "-q"])
    assert result.exit_code == 1, result.output
    assert "No space left on device" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_run_keeps_the_reshape_in_its_notes(inputs: Path) -> None:
    """#43 item 3: the reshape of flat rows is said in run.json (and so in the report)."""
    result = runner.invoke(app, ["run", str(inputs / "flatrun" / "spec.yaml"), "-q"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((inputs / "flatrun" / "out" / "run.json").read_text())
    assert "rows of 16 values were taken as 1×4×4 inputs" in manifest["notes"]["columns"]
