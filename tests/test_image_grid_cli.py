"""The ``image-grid`` command (registered on a fresh typer app, as cli.py does)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import typer
from typer.testing import CliRunner

from robustscope.cli.image_grid import register
from robustscope.cli.leaderboard import register as register_leaderboard
from robustscope.models.toy import RandomTrunk, stripes_dataset, train_tiny_cnn


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    torch.set_num_threads(1)
    d = tmp_path_factory.mktemp("grid")
    net = train_tiny_cnn(steps=100)
    torch.jit.script(net).save(str(d / "net.pt"))
    torch.jit.script(RandomTrunk()).save(str(d / "trunk.pt"))
    x, y = stripes_dataset(4, seed=5)
    np.savez(d / "data.npz", X=x.numpy(), y=y.numpy())
    return d


def _app():
    app = typer.Typer()
    register(app)
    register_leaderboard(app)
    return app


def test_image_grid_writes_accuracy_json(files):
    d = files
    res = CliRunner().invoke(_app(), [
        "image-grid", "--model", str(d / "net.pt"), "--data", str(d / "data.npz"),
        "--out", str(d / "acc.json"), "--threats", "linf,lpips,Hue", "--feature-network",
        str(d / "trunk.pt"), "--steps", "3", "--levels-out", str(d / "levels.csv")])
    assert res.exit_code == 0, res.output
    acc = json.loads((d / "acc.json").read_text())
    # the grid, and its details (issue 43 item 9): the model and the dataset it was read on
    assert set(acc) == {"NoAttack", "AutoLinfAttack", "LPIPSAttack", "Hue", "details"}
    assert acc["details"]["model"] == "net" and acc["details"]["dataset"] == "data"
    assert len(acc["Hue"]) == 20
    assert len((d / "levels.csv").read_text().strip().splitlines()) == 1 + 3 * 4


def test_image_grid_errors(files):
    d = files
    base = ["image-grid", "--model", str(d / "net.pt"), "--data", str(d / "data.npz"),
            "--out", str(d / "x.json")]
    # bad input: exit code 2 and one line (the policy of robustscope.cli.common)
    res = CliRunner().invoke(_app(), base + ["--threats", "lpips"])
    assert res.exit_code == 2 and "feature network" in res.stderr
    assert len(res.stderr.splitlines()) == 1
    res = CliRunner().invoke(_app(), base + ["--threats", "linf,jpeg"])
    assert res.exit_code == 2 and "not known" in res.stderr and "jpeg-linf" in res.stderr
    assert not (d / "x.json").exists()


def test_image_grid_all_runs_every_threat_and_corruption(files):
    d = files
    res = CliRunner().invoke(_app(), [
        "image-grid", "--model", str(d / "net.pt"), "--data", str(d / "data.npz"),
        "--out", str(d / "all.json"), "--threats", "all", "--steps", "2", "--batch-size",
        "auto"])
    assert res.exit_code == 0, res.output
    acc = json.loads((d / "all.json").read_text())
    from robustscope.threats.corruptions import CORRUPTIONS
    from robustscope.threats.registry import THREATS

    # every attack type but LPIPS (no feature network given), every corruption (frost too)
    expected = {e.attack_name for e in THREATS if not e.needs_features} | \
        set(CORRUPTIONS) | {"NoAttack", "details"}
    assert set(acc) == expected
    assert set(acc["frost"]) == {"1", "2", "3", "4", "5"}
    assert "skipped lpips" in res.output and "not produced" not in res.output
    # the file holds every unforeseen point: the leaderboard scores it without --allow-missing
    res = CliRunner().invoke(_app(), ["leaderboard", "--accuracies", str(d / "all.json"),
                                      "--attacks", "unforeseen", "--json"])
    assert res.exit_code == 0, res.output
    row = json.loads(res.stdout)[0]
    assert row["CR_ind_avg"] > 0


def test_image_grid_bad_batch_size(files):
    d = files
    res = CliRunner().invoke(_app(), [
        "image-grid", "--model", str(d / "net.pt"), "--data", str(d / "data.npz"),
        "--out", str(d / "b.json"), "--threats", "linf", "--batch-size", "lots"])
    assert res.exit_code == 2 and "--batch-size" in res.stderr
