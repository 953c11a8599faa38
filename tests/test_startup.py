"""The command line starts without the heavy libraries (issue 13): ``robustscope --help``,
every command's ``--help`` and ``robustscope scores`` on a radius table import none of them.

Each check runs the commands in a fresh interpreter and reads ``sys.modules`` afterwards; no
timing is asserted (``benchmarks/startup.py`` measures the seconds).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

#: Libraries that the start-up and the ``scores`` command must not import.
HEAVY = ("torch", "matplotlib", "ray", "sqlalchemy", "sklearn", "scipy", "pandas", "numba")

#: Runs each command line of argv[1] (JSON) in turn in this interpreter; prints, as JSON, the
#: heavy libraries imported after each (cumulative) and the exit codes.
_PROBE = """
import json, sys
from robustscope.cli.app import app
heavy, out = {heavy!r}, []
for args in json.loads(sys.argv[1]):
    try:
        app(args, prog_name="robustscope")
        code = 0
    except SystemExit as exc:
        code = exc.code or 0
    out.append([args, code, sorted({{m.split(".")[0] for m in sys.modules}} & set(heavy))])
print(json.dumps(out))
"""


def _run(*command_lines: list[str]) -> list[tuple[list[str], int, list[str]]]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run([sys.executable, "-c", _PROBE.format(heavy=HEAVY),
                           json.dumps(command_lines)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_help_imports_no_heavy_library():
    import typer

    from robustscope.cli.app import app

    commands = sorted(typer.main.get_command(app).commands)  # every registered command
    assert {"radius", "scores", "leaderboard", "image-grid", "run", "compare"} <= set(commands)
    results = _run(["--help"], *[[c, "--help"] for c in commands])
    assert [args for args, _, _ in results] == [["--help"]] + [[c, "--help"] for c in commands]
    for args, code, heavy in results:
        assert code == 0, args
        assert heavy == [], f"robustscope {' '.join(args)} imported {', '.join(heavy)}"


@pytest.fixture()
def radius_table(tmp_path) -> Path:
    path = tmp_path / "radii.csv"
    with open(path, "w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["sample", "label", "prediction", "radius", "lower_bound", "status", "loss",
                      "queries", "seconds"])
        for i in range(12):
            status, radius, loss = "attacked", 0.1 * (i + 1), 0.05 * (12 - i)
            if i == 0:
                status, radius = "censored", "inf"
            elif i == 11:
                status, radius, loss = "misclassified", 0.0, 1.5
            out.writerow([i, 0, 0, radius, 0.0, status, loss, 10, 0.01])
    return path


def test_scores_imports_no_heavy_library(radius_table):
    [(args, code, heavy)] = _run(["scores", str(radius_table), "--json", "--n-bootstrap", "20"])
    assert code == 0
    assert heavy == [], f"robustscope scores imported {', '.join(heavy)}"
