"""Evaluation specs: valid specs parse; every error names the key and the YAML line."""

from __future__ import annotations

from pathlib import Path

import pytest

from robustscope.runs.spec import SpecError, load_spec, parse_spec

VALID = """\
name: demo
seed: 3
model: {builtin: breast-cancer-logreg}
data: {builtin: breast-cancer, limit: 20}
features:
  default: {lower: 0, upper: 10}
threats:
  - name: linf
    strengths: {max: 0.4, num: 4}
  - name: L2
    strengths: [0.5, 0.1, 0.5]
    solver: {name: pgd, budget: 500}
solver: {budget: 1000, rtol: 0.02}
scores: {n_bootstrap: 50, cr: {reference: acc.json}}
outputs: {dir: out, store: results.sqlite}
"""


def _error(text: str) -> str:
    with pytest.raises(SpecError) as info:
        parse_spec(text, "spec.yaml")
    return str(info.value)


def test_valid_spec_parses_with_grids_and_solvers():
    spec = parse_spec(VALID)
    assert spec.seed == 3 and spec.data.limit == 20
    linf, l2 = spec.threats
    assert linf.strength_values() == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert l2.name == "l2" and l2.strength_values() == [0.1, 0.5]  # sorted, deduplicated
    assert spec.solver_for(linf).budget == 1000 and spec.solver_for(linf).rtol == 0.02
    assert spec.solver_for(l2).name == "pgd" and spec.solver_for(l2).budget == 500
    assert spec.features.inline() == {"default": {"lower": 0, "upper": 10}}


def test_relative_paths_resolve_against_the_spec_folder(tmp_path: Path):
    (tmp_path / "spec.yaml").write_text(VALID)
    spec = load_spec(tmp_path / "spec.yaml")
    assert spec.outputs.dir == tmp_path / "out"
    assert spec.outputs.store == str(tmp_path / "results.sqlite")
    assert spec.scores.cr.reference == str(tmp_path / "acc.json")


@pytest.mark.parametrize(("text", "expected"), [
    # a bad value deep in a list: key path and its own line
    ("model: {builtin: breast-cancer-gbm}\ndata: {builtin: breast-cancer}\nthreats:\n"
     "  - name: linf\n  - name: l2\n    solver:\n      budget: 0\n",
     "spec.yaml, line 7: threats[1].solver.budget: Input should be greater than 0"),
    # an unknown key is reported on its line
    ("model: {builtin: breast-cancer-gbm}\ndata: {builtin: breast-cancer}\nthreats:\n"
     "  - name: linf\n    colour: red\n",
     "spec.yaml, line 5: threats[0].colour: unknown key"),
    # an unknown threat
    ("model: {builtin: breast-cancer-gbm}\ndata: {builtin: breast-cancer}\n\n"
     "threats: [{name: jpeg}]\n",
     "spec.yaml, line 4: threats[0].name: threat 'jpeg' is not known"),
    # a missing required key points at the mapping that lacks it
    ("data: {builtin: breast-cancer}\nthreats: [{name: linf}]\n",
     "spec.yaml, line 1: model: missing required key"),
    # model needs exactly one source
    ("model:\n  path: m.json\n  builtin: breast-cancer-gbm\ndata: {builtin: breast-cancer}\n"
     "threats: [{name: linf}]\n",
     "spec.yaml, line 2: model: give exactly one of 'path'"),
    # negative strength in a list
    ("model: {builtin: breast-cancer-gbm}\ndata: {builtin: breast-cancer}\nthreats:\n"
     "  - name: linf\n    strengths: [0.1,\n      -2]\n",
     "spec.yaml, line 5: threats[0].strengths: strengths must be finite and > 0"),
    # a grid beyond max_radius
    ("model: {builtin: breast-cancer-gbm}\ndata: {builtin: breast-cancer}\nthreats:\n"
     "  - {name: l1, max_radius: 1, strengths: {max: 2}}\n",
     "spec.yaml, line 4: threats[0]: largest strength 2 exceeds max_radius 1"),
    # report name
    ("model: {builtin: breast-cancer-gbm}\ndata: {builtin: breast-cancer}\n"
     "threats: [{name: linf}]\noutputs:\n  report: out.pdf\n",
     "spec.yaml, line 5: outputs.report: report must be a file name ending in .html"),
    # YAML syntax error: its line
    ("model: {builtin: breast-cancer-gbm}\ndata: [1,\n", "spec.yaml, line 3: not valid YAML"),
    ("- 1\n- 2\n", "spec.yaml, line 1: the spec must be a mapping"),
])
def test_errors_name_key_and_line(text: str, expected: str):
    assert expected in _error(text)


def test_every_error_is_reported_once():
    text = ("model: {builtin: nope}\ndata: {builtin: breast-cancer}\n"
            "threats: [{name: linf, strengths: 3}]\n")
    lines = _error(text).splitlines()
    assert lines[0].startswith("spec.yaml, line 1: model.builtin:")
    assert all(line.startswith("spec.yaml, line 3: threats[0].strengths") for line in lines[1:])
    assert len(lines) == len(set(lines))


def test_missing_spec_file(tmp_path: Path):
    with pytest.raises(SpecError, match="does not exist"):
        load_spec(tmp_path / "absent.yaml")
