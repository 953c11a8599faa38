"""The documentation: its Python examples run, its spec examples validate, and
``mkdocs build --strict`` succeeds (offline).

Every ```` ```python ```` block of every page in ``docs/tutorials/`` runs, in order, in one
namespace (:func:`test_every_tutorial_runs`); a new tutorial is picked up without a test of
its own. A block that needs the network, or that shows a run too long for the suite, is left
out by the line ``<!-- docs-test: skip -->`` (:data:`SKIP_MARK`) right before its opening
fence; a tutorial whose blocks take more than about 10 s is listed in :data:`SLOW_TUTORIALS`
(marked ``slow``: ``pytest -m slow`` runs it). What a page's text claims of its numbers is
checked in :data:`TUTORIAL_CHECKS`."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from robustscope.runs.spec import parse_spec

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


#: The line before a code block that the tests must not run (network, a long run).
SKIP_MARK = "<!-- docs-test: skip -->"
TUTORIALS = sorted(p.relative_to(DOCS).as_posix() for p in (DOCS / "tutorials").glob("*.md"))
#: Tutorials whose blocks take more than about 10 s (run with ``pytest -m slow``).
SLOW_TUTORIALS = {"tutorials/images-pytorch.md"}


def code_blocks(page: str, language: str) -> list[str]:
    """The ``language`` blocks of ``page``, but those right after :data:`SKIP_MARK`."""
    blocks, block, previous = [], None, ""
    for line in (DOCS / page).read_text().splitlines(keepends=True):
        if block is None:
            if line.rstrip() == f"```{language}" and previous.strip() != SKIP_MARK:
                block = []
            elif line.startswith("```"):
                block = False  # another language, or a block marked to skip
            previous = line
        elif line.rstrip() == "```":
            if block is not False:
                blocks.append("".join(block))
            block, previous = None, line
        elif block is not False:
            block.append(line)
    return blocks


def run_page(page: str, tmp_path: Path, monkeypatch) -> dict:
    """Run every ```python block of ``page`` in order, in one namespace, in ``tmp_path``."""
    monkeypatch.chdir(tmp_path)
    blocks = code_blocks(page, "python")
    assert blocks, f"{page} has no python example"
    namespace: dict = {"__name__": "__docs__"}
    for k, block in enumerate(blocks):
        exec(compile(block, f"{page} (block {k + 1})", "exec"), namespace)
    return namespace


def test_getting_started_example_runs(tmp_path, monkeypatch):
    ns = run_page("getting-started.md", tmp_path, monkeypatch)
    assert (tmp_path / "radii.csv").is_file() and (tmp_path / "adv.npz").is_file()
    assert len(ns["result"]) == 40


@pytest.mark.parametrize("page", ["getting-started.md", "evaluations.md"])
def test_spec_examples_validate(page):
    specs = [b for b in code_blocks(page, "yaml") if re.search(r"^model:", b, flags=re.M)]
    assert specs
    for block in specs:
        parse_spec(block, page)


def test_tutorial_specs_validate():
    text = (DOCS / "tutorials/tabular-xgboost.md").read_text()
    spec = re.search(r'write_text\("""(.*?)"""\)', text, flags=re.S).group(1)
    parse_spec(spec, "tabular-xgboost.md")


@pytest.mark.skipif(shutil.which("mkdocs") is None and
                    importlib.util.find_spec("mkdocs") is None,
                    reason="mkdocs is not installed (pip install 'robustscope[docs]')")
def test_mkdocs_build_strict(tmp_path):
    if importlib.util.find_spec("mkdocstrings") is None:
        pytest.skip("mkdocstrings is not installed (pip install 'robustscope[docs]')")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "site" / "api" / "search" / "index.html").is_file()


def test_certified_page_example_runs(tmp_path, monkeypatch):
    ns = run_page("certified.md", tmp_path, monkeypatch)
    assert (ns["result"].lower_bound > 0).any()


def _scores_tutorial(ns: dict, tmp_path: Path) -> None:
    assert ns["scores"].R_nu > 0


def _xgboost_tutorial(ns: dict, tmp_path: Path) -> None:
    assert ns["outcome"].report.is_file()
    # the page says the trees are read and solved exactly, not attacked as a black box
    assert (ns["result"].status == "exact").sum() >= 35


def _images_tutorial(ns: dict, tmp_path: Path) -> None:
    assert (tmp_path / "fragile-digits.png").is_file()
    assert (tmp_path / "digits-report.html").is_file()


def _relations_tutorial(ns: dict, tmp_path: Path) -> None:
    effect = ns["effect"]
    # the numbers the page quotes
    assert int(ns["searched"].sum()) == 20 and int(ns["breaks"].sum()) == 20
    assert effect["unconstrained_invalid"] == effect["unconstrained_found"] == 20
    # both spaces have integer and one-hot features: the exact linear MILP on both
    assert (ns["con"].status[ns["searched"]] == "exact").all()
    assert any("MILP per class" in n for n in ns["con"].notes)
    assert abs(effect["median_growth"] - 1.047) < 1e-3 and effect["grew"] == 19
    assert abs(effect["mean_growth"] - 1.060) < 1e-3
    # not at 0.1: an input's exact radius is 0.1 itself (integer features move in tenths of
    # their scale), and which side of 0.1 its float lands on changed with the environment
    np.testing.assert_allclose(ns["free"].robust_accuracy([0.02, 0.05, 0.09]),
                               [0.6, 0.4667, 0.1667], atol=1e-3)
    np.testing.assert_allclose(ns["con"].robust_accuracy([0.02, 0.05, 0.09]),
                               [0.6, 0.4667, 0.2], atol=1e-3)
    x, adv, names = ns["X_test"][ns["i"]], ns["free"].x_adv[ns["i"]], ns["CREDIT_FEATURES"]
    income, debt = names.index("income"), names.index("consumer_debt")
    assert (round(x[income], 1), round(adv[income], 1)) == (13.0, 10.3)
    assert (round(x[debt], 2), round(adv[debt], 1)) == (2.95, 13.4)
    assert round(adv[names.index("mortgage_balance")]) == 60
    assert ns["res"].status[0] == "invalid"
    text = ns["space"].relations.broken(ns["free"].x_adv[ns["i"]:ns["i"] + 1])
    assert {c for c, _ in text} >= {"consumer_debt <= 0.6 * income",
                                    "mortgage_balance <= 600 * housing_mortgage"}


#: What each tutorial's text claims of its outputs, checked after its blocks ran.
TUTORIAL_CHECKS = {
    "tutorials/scores.md": _scores_tutorial,
    "tutorials/tabular-xgboost.md": _xgboost_tutorial,
    "tutorials/images-pytorch.md": _images_tutorial,
    "tutorials/relations.md": _relations_tutorial,
}


@pytest.mark.parametrize("page", [
    pytest.param(p, marks=[pytest.mark.slow] if p in SLOW_TUTORIALS else []) for p in TUTORIALS])
def test_every_tutorial_runs(page: str, tmp_path, monkeypatch):
    ns = run_page(page, tmp_path, monkeypatch)
    check = TUTORIAL_CHECKS.get(page)
    if check is not None:
        check(ns, tmp_path)


def test_the_skip_mark_leaves_out_one_block(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text("```python\na = 1\n```\n\n" + SKIP_MARK + "\n```python\nraise SystemExit\n"
                    "```\n```yaml\nk: v\n```\n```python\nb = a + 1\n```\n")
    monkeypatch.setattr(sys.modules[__name__], "DOCS", tmp_path)
    assert code_blocks("page.md", "python") == ["a = 1\n", "b = a + 1\n"]
    assert code_blocks("page.md", "yaml") == ["k: v\n"]
    assert set(TUTORIAL_CHECKS) <= set(TUTORIALS)
