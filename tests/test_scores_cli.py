"""The ``scores`` command: JSON keys, table, clear errors on bad CSVs."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from robustscope.cli.scores import register
from robustscope.core.result import CSV_COLUMNS
from robustscope.scores.intrinsic import g_of_loss

KEYS = ("R_m", "R_w", "R_nu", "slope", "intercept", "r2", "rel_var_R_m", "rel_var_R_nu")


@pytest.fixture()
def app() -> typer.Typer:
    a = typer.Typer()

    @a.callback()
    def main() -> None:
        """test app"""

    register(a)
    return a


def _csv(path, n=40, seed=0, censored=2):
    rng = np.random.default_rng(seed)
    margin = rng.uniform(0.05, 6.0, size=n)
    loss = np.logaddexp(0, -margin)
    radius = margin / 2.0
    status = np.full(n, "exact", dtype=object)
    radius[:censored] = np.inf
    status[:censored] = "censored"
    radius[-3:] = 0.0
    status[-3:] = "misclassified"
    loss[-3:] = 1.2
    df = pd.DataFrame({"sample": np.arange(n), "label": 0, "prediction": 0, "radius": radius,
                       "lower_bound": 0.0, "status": status, "loss": loss, "queries": 10,
                       "seconds": 0.01})[CSV_COLUMNS]
    df.to_csv(path, index=False)
    return df


def test_json_has_numeric_keys(app, tmp_path):
    path = tmp_path / "radii.csv"
    df = _csv(path)
    out = CliRunner().invoke(app, ["scores", str(path), "--json", "--n-bootstrap", "200"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    for key in KEYS:
        assert isinstance(doc[key], (int, float)) and not isinstance(doc[key], bool), key
    assert doc["n_censored"] == 2
    ok = df.status == "exact"
    g = g_of_loss(df.loss[ok])
    assert doc["R_nu"] == pytest.approx((df.radius[ok] / g).sum() / (len(df) - 2), rel=1e-9)
    assert doc["slope"] == pytest.approx(0.5, rel=1e-9) and doc["r2"] == pytest.approx(1.0)
    assert doc["R_m_low"] <= doc["R_m"] <= doc["R_m_high"]


def test_table_output(app, tmp_path):
    path = tmp_path / "radii.csv"
    _csv(path)
    out = CliRunner().invoke(app, ["scores", str(path), "--n-bootstrap", "50"])
    assert out.exit_code == 0, out.output
    assert "R_nu" in out.output and "censored" in out.output


@pytest.mark.parametrize("mutate,message", [
    (lambda df: df.drop(columns=["loss"]), "missing column(s) loss"),
    (lambda df: df.assign(status=df.status.where(df.index != 5, "broken")), "row 5"),
    (lambda df: df.assign(radius=df.radius.astype(object).where(df.index != 7, "abc")),
     "row 7, column 'radius'"),
])
def test_bad_csv_is_a_clear_error(app, tmp_path, mutate, message):
    path = tmp_path / "radii.csv"
    df = _csv(path)
    mutate(df).to_csv(path, index=False)
    out = CliRunner().invoke(app, ["scores", str(path), "--json"])
    assert out.exit_code == 2  # bad input (robustscope.cli.common)
    assert message in out.output
    assert "Traceback" not in out.output


def test_missing_file(app, tmp_path):
    out = CliRunner().invoke(app, ["scores", str(tmp_path / "nope.csv")])
    assert out.exit_code == 2 and "no such file" in out.output


@pytest.mark.parametrize("text,message", [
    ("", "cannot read it as CSV (the file is empty)"),
    ("radius,loss,status\n1,0.5,exact\n2,0.4,exact,extra\n", "row 1 has 4 fields"),
    ("radius,loss,status\n1,,exact\n2,0.4,exact\n", "row 0, column 'loss' = ''"),
    ("radius,loss,status\nnan,0.5,exact\n2,0.4,exact\n", "row 0, column 'radius' = 'nan'"),
])
def test_csv_reader_errors(app, tmp_path, text, message):
    path = tmp_path / "radii.csv"
    path.write_text(text)
    out = CliRunner().invoke(app, ["scores", str(path), "--json"])
    assert out.exit_code == 2 and message in out.output, out.output


def test_csv_reader_reads_what_pandas_reads(app, tmp_path):
    # a byte-order mark, a blank line, padded statuses, quoted cells and inf: as pandas reads
    # them (the command reads with the csv module so as not to import pandas)
    path = tmp_path / "radii.csv"
    path.write_bytes(b'\xef\xbb\xbfsample,radius,loss,status\n0,inf,0.1,censored\n\n'
                     b'1,"0.5",0.2, exact \n2,0.25,0.3,attacked\n3,0,1.5,misclassified\n')
    out = CliRunner().invoke(app, ["scores", str(path), "--json", "--n-bootstrap", "20"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    df = pd.read_csv(path)
    assert doc["n"] == len(df) == 4 and doc["n_censored"] == 1 and doc["n_misclassified"] == 1
    assert doc["R_m"] == pytest.approx((0.5 + 0.25 + 0) / 3)
