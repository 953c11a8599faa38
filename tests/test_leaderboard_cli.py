"""``robustscope leaderboard``: JSON keys, sources, and clear errors."""

import json

import pytest
import typer
from refdata_helpers import DEFENCES, refdata_path
from typer.testing import CliRunner

from robustscope.cli.leaderboard import register
from robustscope.runs.store import open_store

PUBLISHED = refdata_path(DEFENCES)  # the 21 published defences (package data)


@pytest.fixture(scope="module")
def app():
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """test app"""

    register(app)
    return app


def run(app, *args):
    return CliRunner().invoke(app, ["leaderboard", *map(str, args)], env={"COLUMNS": "400"})


KEYS = {"model", "clean", "CR_ind_avg", "CR_ind_worst", "worst_point", "single"}
SEEN_KEYS = {"CR_in_avg", "CR_in_worst", "CR_out_avg", "CR_out_worst", "pct_seen", "SC"}


def test_json_output_ranks_and_has_keys(app):
    res = run(app, "--accuracies", PUBLISHED, "--allow-missing", "--json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert len(rows) == 21
    for r in rows:
        assert KEYS | SEEN_KEYS <= set(r)
        assert set(r["single"]) == {"AutoLinfAttack", "AutoL2Attack", "AutoL1Attack",
                                    "ElasticAttack", "JPEGLinfAttack", "JPEGL1Attack",
                                    "ReColorAdvAttack", "StAdvAttack", "LPIPSAttack"}
        assert set(r["single"]["ElasticAttack"]) == {"avg", "worst"}
    avgs = [r["CR_ind_avg"] for r in rows]
    assert avgs == sorted(avgs, reverse=True)
    assert rows[0]["model"] == "Dai2023MultiRobustBench_LPIPS"
    assert rows[0]["CR_ind_avg"] == pytest.approx(69.14, abs=0.01)
    worst = run(app, "--accuracies", PUBLISHED, "--allow-missing", "--json",
                "--sort", "worst")
    ws = [r["CR_ind_worst"] for r in json.loads(worst.stdout)]
    assert ws == sorted(ws, reverse=True)


def test_table_output(app):
    res = run(app, "--accuracies", PUBLISHED, "--allow-missing", "--single")
    assert res.exit_code == 0, res.output
    assert "Dai2023MultiRobustBench_LPIPS" in res.stdout and "CR_ind-avg" in res.stdout


def test_single_model_file_named_by_stem_and_attack_subset(app, tmp_path):
    f = tmp_path / "mynet.json"
    f.write_text(json.dumps({"NoAttack": 90.0, "AutoLinfAttack": {"0.005": 80.0},
                             "AutoL2Attack": {"0.125": 85.0}}))
    ref = tmp_path / "star.json"
    ref.write_text(json.dumps({"NoAttack": 90.0, "AutoLinfAttack": {"0.005": 40.0},
                               "AutoL2Attack": {"0.125": 85.0}}))
    res = run(app, "--accuracies", f, "--reference", ref, "--attacks", "linf,l2", "--json")
    assert res.exit_code == 0, res.output
    [row] = json.loads(res.stdout)
    # no Attacks Used: no seen metrics
    assert row["model"] == "mynet" and set(row) == KEYS | {"missing", "excluded", "n_excluded"}
    assert row["CR_ind_avg"] == pytest.approx((100 + 200 + 100) / 3)
    assert row["CR_ind_worst"] == pytest.approx(100.0)
    assert row["worst_point"] == "NoAttack"
    # the same with --attacks repeated and with the best-of-models reference
    res = run(app, "--accuracies", f, "--reference", "best", "--attacks", "linf",
              "--attacks", "AutoL2Attack", "--json")
    assert json.loads(res.stdout)[0]["CR_ind_avg"] == pytest.approx(100.0)


def test_from_store(app, tmp_path):
    db = tmp_path / "results.sqlite"
    with open_store(db) as store:
        store.import_accuracies({"NoAttack": 80.0, "ElasticAttack": {"0.05": 40.0}}, name="s1")
    ref = tmp_path / "star.json"
    ref.write_text(json.dumps({"NoAttack": 100.0, "ElasticAttack": {"0.05": 50.0}}))
    for where in (db, f"sqlite:///{db}"):  # a path, or a database URL (as for PostgreSQL)
        res = run(app, "--store", where, "--reference", ref, "--attacks", "elastic", "--json")
        assert res.exit_code == 0, res.output
        [row] = json.loads(res.stdout)
        assert row["model"] == "s1" and row["CR_ind_avg"] == pytest.approx(80.0)


def _bad(app, tmp_path, content, *extra):
    f = tmp_path / "bad.json"
    f.write_text(content)
    res = run(app, "--accuracies", f, *extra)
    assert res.exit_code == 2  # bad input
    assert "Traceback" not in res.output
    return res.stderr


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "expected a non-empty JSON object"),
    ('{"m": {"x": 1}}', "entry 'm' has no 'accuracies'"),
    ('{"NoAttack": 90, "AutoLinfAttack": {"0.005": "high"}}',
     "AutoLinfAttack at strength '0.005'"),
    ('{"NoAttack": 90, "AutoLinfAttack": {"0.005": 50}}', "AutoL2Attack \\(all 20 strengths\\)"),
    ('{"m": {"accuracies": {"NoAttack": 90}, "details": {"Attacks Used": {"l2": "big"}}}}',
     "'Attacks Used' strength of 'l2'"),
])
def test_bad_files_give_clear_errors(app, tmp_path, content, message):
    import re

    err = _bad(app, tmp_path, content)
    assert err.startswith("error:") and re.search(message, err), err


def test_other_errors(app, tmp_path):
    res = run(app)
    assert res.exit_code == 2 and "no models" in res.stderr
    res = run(app, "--accuracies", tmp_path / "missing.json")
    assert res.exit_code == 2 and "not found" in res.stderr
    res = run(app, "--store", tmp_path / "missing.sqlite")
    assert res.exit_code == 2 and "no such file" in res.stderr
    f = tmp_path / "a.json"
    f.write_text('{"NoAttack": 90}')
    res = run(app, "--accuracies", f, "--accuracies", f)
    assert res.exit_code == 2 and "more than once: a" in res.stderr
    res = run(app, "--accuracies", f, "--attacks", "Nope", "--allow-missing")
    assert res.exit_code == 2 and "no acc* values for attack 'Nope'" in res.stderr
    res = run(app, "--accuracies", f, "--reference", tmp_path / "nostar.json")
    assert res.exit_code == 2 and "nostar.json: not found" in res.stderr
    res = run(app, "--accuracies", f, "--sort", "median")
    assert res.exit_code == 2 and "--sort" in res.stderr


def test_figures_option(app, tmp_path):
    f = tmp_path / "m.json"
    f.write_text(json.dumps({"m": {"accuracies": {"NoAttack": 90.0,
                                                  "AutoLinfAttack": {"0.005": 80.0}},
                                   "details": {"Attacks Used": {"AutoLinfAttack": 0.005}}}}))
    ref = tmp_path / "star.json"
    ref.write_text(json.dumps({"NoAttack": 95.0, "AutoLinfAttack": {"0.005": 85.0}}))
    out = tmp_path / "figs"
    res = run(app, "--accuracies", f, "--reference", ref, "--attacks", "linf", "--json",
              "--figures", out)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)[0]["pct_seen"] == pytest.approx(100.0)
    assert sorted(p.name for p in out.iterdir()) == [
        "accuracy_curves.png", "cr_in_out.png", "points_by_acc_star.png", "single_cr.png"]
