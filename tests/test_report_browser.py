"""The report in a real browser (headless Chromium): every figure decodes, no console error,
nothing fetched from outside the file. Skipped, with the reason, where Chromium is absent."""

from __future__ import annotations

from pathlib import Path

import pytest
from browser import chromium_path, open_in_chromium
from report_helpers import tabular_evaluation

from robustscope.report.bracket_figures import has_brackets
from robustscope.report.html import render_report

pytestmark = pytest.mark.skipif(
    chromium_path() is None,
    reason="headless Chromium is not installed (Debian: apt-get install -y chromium)")


def test_probe_catches_broken_images_errors_and_external_fetches(tmp_path: Path):
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><head></head><body>'
                   '<img alt="broken" src="data:image/png;base64,AAAA">'
                   '<img alt="remote" src="http://127.0.0.1:9/x.png">'
                   '<script>console.error("boom")</script></body></html>')
    seen = open_in_chromium(bad)
    assert seen["n_images"] == 2
    assert sorted(seen["broken"]) == ["broken", "remote"]
    assert any("boom" in e for e in seen["errors"])
    assert any("127.0.0.1" in r for r in seen["resources"])
    assert seen["console"]


def test_report_opens_cleanly_with_every_figure(tmp_path: Path):
    ev, _ = tabular_evaluation(n=30, n_bootstrap=50)
    path = render_report(ev, tmp_path / "report.html")
    seen = open_in_chromium(path)
    # per section: flip rate, score scatter, r vs g(loss), accuracy, and the certified
    # brackets where the section has lower bounds; OOD: one per section; overview: radius
    # distribution
    bracketed = sum(has_brackets(sec.result) for sec in ev.sections)
    assert bracketed >= 1  # exact solvers on the tabular models: the figure is exercised
    assert seen["n_images"] == 4 * len(ev.sections) + bracketed + len(ev.sections) + 1
    assert seen["broken"] == []
    assert seen["errors"] == []
    assert seen["resources"] == []
    assert seen["console"] == []


def test_comparison_opens_cleanly(tmp_path: Path):
    from robustscope.report.html import render_compare
    from robustscope.scores.comparison import RunView, ThreatView, compare_runs

    def view(name: str, n: int) -> RunView:
        ev, _ = tabular_evaluation(n=n, n_bootstrap=0)
        run = RunView(name, f"memory:{name}")
        for sec in ev.sections:
            r = sec.result
            run.threats[sec.name] = ThreatView(sec.name, r.radius, r.status.astype(str), r.loss,
                                               r.queries.astype(float), r.max_radius,
                                               sec.strengths)
        return run

    cmp = compare_runs(view("A", 20), view("B", 30), n_bootstrap=0)
    seen = open_in_chromium(render_compare(cmp, tmp_path / "cmp.html"))
    assert seen["n_images"] == 2 * len(cmp.shared)
    assert seen["broken"] == [] and seen["errors"] == [] and seen["resources"] == []
    assert seen["console"] == []
