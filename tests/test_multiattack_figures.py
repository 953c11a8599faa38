"""Multi-attack figures: Figures with the right panels and contents, PNG files."""

import pytest
from matplotlib.figure import Figure

from robustscope.core.errors import InputError
from robustscope.report.multiattack_figures import (
    accuracy_curves_figure,
    seen_unseen_figure,
    single_cr_figure,
    sorted_points_figure,
    write_multiattack_figures,
)
from robustscope.scores.accuracy_grid import AccuracyGrid
from robustscope.scores.multiattack import competitiveness

REF = AccuracyGrid(90.0, {"A": {0.1: 60.0, 0.2: 30.0}, "B": {1.0: 70.0, 2.0: 50.0},
                          "C": {0.5: 80.0, 1.0: 20.0}})
MODELS = {
    "m1": AccuracyGrid(85.0, {"A": {0.1: 55.0, 0.2: 10.0}, "B": {1.0: 60.0, 2.0: 40.0},
                              "C": {0.5: 70.0, 1.0: 5.0}}),
    "m2": AccuracyGrid(80.0, {"A": {0.1: 65.0, 0.2: 35.0}, "B": {1.0: 30.0, 2.0: 10.0},
                              "C": {0.5: 50.0, 1.0: 25.0}}),
}
ATT = ["A", "B", "C"]


def _reports(trained=True):
    return [competitiveness(g, REF, ATT, trained_on={"A": 0.1} if trained else None, model=n)
            for n, g in MODELS.items()]


def test_accuracy_curves():
    fig = accuracy_curves_figure(MODELS, REF, ATT, ncols=2)
    assert isinstance(fig, Figure)
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in visible] == ATT
    # acc* + 2 models per panel; the acc* line starts at the clean reference accuracy
    for ax, attack in zip(visible, ATT, strict=True):
        lines = ax.get_lines()
        assert len(lines) == 3
        assert list(lines[0].get_ydata()) == [90.0, *REF.attacks[attack].values()]
        assert list(lines[1].get_xdata()) == [0.0, *MODELS["m1"].attacks[attack]]


def test_sorted_points():
    fig = sorted_points_figure(_reports())
    (ax,) = fig.axes
    star, m1, _ = ax.get_lines()
    assert list(star.get_ydata()) == sorted([90, 60, 30, 70, 50, 80, 20], reverse=True)
    # m1's accuracy at the point of rank 0 (clean, acc* 90) and rank 1 (C@0.5, acc* 80)
    assert list(m1.get_ydata()[:2]) == [85.0, 70.0]


def test_bar_figures():
    reports = _reports()
    fig = single_cr_figure(reports)
    top, bottom = fig.axes
    heights = [p.get_height() for p in top.patches]
    assert heights[0] == pytest.approx(reports[0].single["A"]["avg"])
    assert len(top.patches) == len(bottom.patches) == 6
    fig = seen_unseen_figure(reports)
    left, _ = fig.axes
    assert [p.get_height() for p in left.patches] == pytest.approx(
        [r.cr_in_avg for r in reports] + [r.cr_out_avg for r in reports])
    with pytest.raises(InputError, match="seen/unseen"):
        seen_unseen_figure(_reports(trained=False))
    with pytest.raises(InputError, match="at least one"):
        single_cr_figure([])
    with pytest.raises(InputError, match="at least one"):
        accuracy_curves_figure({}, REF, ATT)


def test_write_pngs(tmp_path):
    paths = write_multiattack_figures(_reports(), MODELS, tmp_path / "figs", REF, ATT)
    assert [p.name for p in paths] == ["accuracy_curves.png", "points_by_acc_star.png",
                                       "single_cr.png", "cr_in_out.png"]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    paths = write_multiattack_figures(_reports(False), MODELS, tmp_path / "f2", REF, ATT)
    assert len(paths) == 3
