"""benchmarks/regenerate.py: one command runs a benchmark and assembles RESULTS.md."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def regenerate():
    spec = importlib.util.spec_from_file_location("regenerate", ROOT / "benchmarks" /
                                                  "regenerate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["regenerate"] = module
    spec.loader.exec_module(module)
    return module


def test_every_section_names_an_existing_script(regenerate):
    keys = [s.key for s in regenerate.SECTIONS]
    assert len(keys) == len(set(keys))
    for section in regenerate.SECTIONS:
        assert (ROOT / section.args[0]).is_file(), section.args[0]


def test_stdout_becomes_the_section_and_stderr_stays_out(regenerate, tmp_path, monkeypatch):
    script = tmp_path / "bench.py"
    script.write_text("import sys\nprint('progress', file=sys.stderr)\n"
                      "print('| measured | 42 |')\n")
    fake = regenerate.Section("demo", "Demo and report (issue 6)", (str(script),),
                              "What is measured.", 0)
    monkeypatch.setattr(regenerate, "SECTIONS", (fake,))
    regenerate.main(["--sections-dir", str(tmp_path / "s"), "--results",
                     str(tmp_path / "R.md")])
    text = (tmp_path / "R.md").read_text()
    assert "## Demo and report (issue 6)" in text and "What is measured." in text
    assert "| measured | 42 |" in text and "progress" not in text
    assert "*Measured " in text


def test_one_section_is_run_and_assembled(regenerate, tmp_path):
    sections, results = tmp_path / "sections", tmp_path / "RESULTS.md"
    regenerate.main(["--only", "leaderboard", "--sections-dir", str(sections),
                     "--results", str(results)])
    text = results.read_text()
    assert text.startswith("# Benchmark results")
    part = (sections / "leaderboard.md").read_text()
    assert part in text
    assert part.startswith("*Measured ")
    assert "Regenerate: `python benchmarks/regenerate.py --only leaderboard`" in text
    assert "| parse `defences.json` (21 models) |" in part
    assert "matches to its rounding" in part  # computed from the run, not written by hand
    # sections never run say so instead of showing stale or invented numbers
    assert "Not measured yet: run `python benchmarks/regenerate.py --only core`" in text


def test_a_failing_benchmark_keeps_the_previous_section(regenerate, tmp_path, monkeypatch):
    sections = tmp_path / "sections"
    sections.mkdir()
    (sections / "demo.md").write_text("## Demo and report (issue 6)\n\nold numbers\n")
    broken = regenerate.Section("demo", "Demo and report (issue 6)",
                                ("benchmarks/regenerate.py", "--only", "nonexistent"), "x", 0)
    monkeypatch.setattr(regenerate, "SECTIONS", (broken,))
    with pytest.raises(RuntimeError, match="demo: .* exited with 2"):
        regenerate.main(["--only", "demo", "--sections-dir", str(sections),
                         "--results", str(tmp_path / "R.md")])
    assert "old numbers" in (sections / "demo.md").read_text()
