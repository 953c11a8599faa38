"""Competitiveness ratios: the published MultiRobustBench leaderboard, properties, errors."""

import fnmatch
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from refdata_helpers import (
    ACC_STAR,
    DEFENCES,
    leaderboard_rows,
    refdata_json,
    refdata_path,
)

from robustscope.core.errors import InputError
from robustscope.core.result import RadiusResult
from robustscope.scores.accuracy_grid import AccuracyGrid, read_accuracy_file
from robustscope.scores.multiattack import (
    best_reference,
    competitiveness,
    grid_from_radii,
    load_reference,
    point_table,
    published_reference,
    stability_constant,
)
from robustscope.threats.registry import RANKED_ATTACKS, default_grid


# -- the published leaderboard (package data: robustscope/refdata) ------------------------------
def test_packaged_reference_is_the_published_table():
    shipped = published_reference()
    assert shipped == AccuracyGrid.from_dict(refdata_json(ACC_STAR))
    assert load_reference(refdata_path(ACC_STAR)) == shipped
    # two figures of the published table, as its leaderboard shows them
    assert shipped.clean == pytest.approx(94.2033, abs=1e-4)
    assert shipped.attacks["LPIPSAttack"][0.5] == pytest.approx(18.41)
    assert set(shipped.attacks) >= set(RANKED_ATTACKS)


@pytest.mark.parametrize("row", leaderboard_rows(), ids=lambda r: r["defense"])
def test_reproduces_published_leaderboard(row):
    models = {m.name: m for m in read_accuracy_file(refdata_path(DEFENCES))}
    m = models[row["defense"]]
    rep = competitiveness(m.grid, refdata_path(ACC_STAR), trained_on=m.trained_on,
                          missing="skip", model=m.name)
    got = {"clean": rep.clean, "CR_ind_avg": rep.cr_ind_avg, "CR_ind_worst": rep.cr_ind_worst,
           "SC": rep.sc, "pct_seen": rep.pct_seen, "CR_in_avg": rep.cr_in_avg,
           "CR_out_avg": rep.cr_out_avg, "CR_in_worst": rep.cr_in_worst,
           "CR_out_worst": rep.cr_out_worst}
    for attack in RANKED_ATTACKS:
        got[f"single_avg_{attack}"] = rep.single[attack]["avg"]
        got[f"single_worst_{attack}"] = rep.single[attack]["worst"]
    numeric = [c for c in row if c == "clean" or c.startswith(("CR_", "SC", "pct_", "single_"))]
    assert len(numeric) == 27  # 9 aggregate columns + 9 attacks x (avg, worst)
    for col in numeric:
        assert got[col] == pytest.approx(float(row[col]), abs=0.01), col
    assert rep.worst_point == row["worst_point"]


def test_published_leaderboard_has_every_defence():
    names = {m.name for m in read_accuracy_file(refdata_path(DEFENCES))}
    assert names == {r["defense"] for r in leaderboard_rows()} and len(names) == 21


def test_reference_data_ships_as_package_data():
    # every file of robustscope/refdata is declared package data, so a wheel carries it
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    root = Path(__file__).resolve().parents[1]
    config = tomllib.loads((root / "pyproject.toml").read_text())
    globs = config["tool"]["setuptools"]["package-data"]["robustscope"]
    refdata = root / "src" / "robustscope" / "refdata"
    shipped = sorted(f.relative_to(refdata).as_posix() for f in refdata.rglob("*")
                     if f.is_file() and "__pycache__" not in f.parts)
    assert {ACC_STAR, DEFENCES, "leaderboard.csv", "README.md", "frost/frost1.png",
            "frost/LICENSE"} <= set(shipped)
    for name in shipped:
        assert any(fnmatch.fnmatch(f"refdata/{name}", g) for g in globs), name


def test_missing_points_error_names_them():
    croce = {m.name: m for m in read_accuracy_file(refdata_path(DEFENCES))}[
        "Croce2022Adversarial_Linf"]
    with pytest.raises(InputError, match=r"Croce2022Adversarial_Linf.*AutoLinfAttack \(all 20"):
        competitiveness(croce.grid, model=croce.name)
    # dropping one strength of a present attack names that strength
    grid = AccuracyGrid(croce.grid.clean, {a: dict(c) for a, c in croce.grid.attacks.items()})
    del grid.attacks["ElasticAttack"][0.35]
    with pytest.raises(InputError, match=r"ElasticAttack at strength 0\.35"):
        competitiveness(grid, attacks=["elastic"], model="x")
    rep = competitiveness(grid, attacks=["elastic"], missing="skip")
    assert rep.to_dict()["missing"] == ["ElasticAttack@0.35"]
    assert len(rep.table.acc) == 20 and rep.table.n_points == 21


def test_reference_without_attack_is_an_error():
    ref = AccuracyGrid(90.0, {"A": {0.1: 50.0}})
    with pytest.raises(InputError, match="reference: no acc\\* values for attack 'B'"):
        competitiveness(AccuracyGrid(80.0, {"A": {0.1: 40.0}}), ref, attacks=["B"])
    # acc* = 0 is no error: the point is excluded (test below)
    rep = competitiveness(AccuracyGrid(80.0, {"A": {0.1: 0.0}}),
                          AccuracyGrid(90.0, {"A": {0.1: 0.0}}), attacks=["A"])
    assert rep.table.excluded == [("A", 0.1)]
    with pytest.raises(InputError, match="missing"):
        competitiveness(AccuracyGrid(80.0), ref, attacks=["A"], missing="ignore")
    with pytest.raises(InputError, match="training strength of 'A'"):
        competitiveness(AccuracyGrid(80.0, {"A": {0.1: 40.0}}), ref, ["A"], {"A": "big"})
    with pytest.raises(InputError, match="trained_on: expected a mapping"):
        competitiveness(AccuracyGrid(80.0, {"A": {0.1: 40.0}}), ref, ["A"], ["A"])


def test_small_example_by_hand():
    ref = AccuracyGrid(80.0, {"A": {0.1: 40.0, 0.2: 20.0}, "B": {1.0: 50.0}})
    model = AccuracyGrid(40.0, {"A": {0.1: 40.0, 0.2: 5.0}, "B": {1.0: 25.0}})
    rep = competitiveness(model, ref, attacks=["A", "B"], trained_on={"A": 0.1})
    # ratios: clean 50, A@0.1 100, A@0.2 25, B@1.0 50
    assert rep.cr_ind_avg == pytest.approx(56.25)
    assert (rep.cr_ind_worst, rep.worst_point) == (pytest.approx(25.0), "A@0.2")
    assert rep.single["A"] == {"avg": pytest.approx(175 / 3), "worst": pytest.approx(25.0)}
    assert rep.single["B"] == {"avg": pytest.approx(50.0), "worst": pytest.approx(50.0)}
    assert rep.pct_seen == pytest.approx(50.0)  # clean and A@0.1 of 4 points
    assert rep.cr_in_avg == pytest.approx(75.0) and rep.cr_in_worst == pytest.approx(50.0)
    assert rep.cr_out_avg == pytest.approx(37.5) and rep.cr_out_worst == pytest.approx(25.0)
    # no pair of points has 0 < |acc* difference| < 3
    assert math.isnan(rep.sc) and rep.to_dict()["SC"] is None
    ref2 = AccuracyGrid(80.0, {"A": {0.1: 78.0, 0.2: 20.0}})
    model2 = AccuracyGrid(40.0, {"A": {0.1: 30.0, 0.2: 5.0}})
    rep2 = competitiveness(model2, ref2, attacks=["A"], trained_on={})
    assert rep2.sc == pytest.approx(10.0 / 2.0)  # clean vs A@0.1: |40-30| / |80-78|
    assert rep2.pct_seen == pytest.approx(100 / 3)


def test_untrained_report_has_no_seen_metrics():
    ref = AccuracyGrid(80.0, {"A": {0.1: 40.0}})
    d = competitiveness(AccuracyGrid(60.0, {"A": {0.1: 20.0}}), ref, attacks=["A"]).to_dict()
    assert set(d) == {"model", "clean", "CR_ind_avg", "CR_ind_worst", "worst_point", "single",
                      "missing", "excluded", "n_excluded"}


def test_points_where_the_best_reference_is_zero_are_excluded_and_reported():
    """--reference best: at the top strengths every stored model is at 0 accuracy."""
    a = AccuracyGrid(80.0, {"A": {0.1: 40.0, 0.2: 0.0, 0.3: 0.0}})
    b = AccuracyGrid(70.0, {"A": {0.1: 50.0, 0.2: 0.0, 0.3: 0.0}})
    star = best_reference([a, b])
    rep = competitiveness(a, star, attacks=["A"], trained_on={"A": 0.2})
    assert rep.table.excluded == [("A", 0.2), ("A", 0.3)]
    assert rep.cr_ind_avg == pytest.approx((100 + 80) / 2)  # clean and A@0.1 only
    assert rep.cr_ind_worst == pytest.approx(80.0) and rep.worst_point == "A@0.1"
    assert rep.single["A"] == {"avg": pytest.approx(90.0), "worst": pytest.approx(80.0)}
    assert rep.pct_seen == pytest.approx(100 * 3 / 4)  # the full point set still counts
    d = rep.to_dict()
    assert d["excluded"] == ["A@0.2", "A@0.3"] and d["n_excluded"] == 2
    with pytest.raises(InputError, match="accuracies lie in"):
        competitiveness(a, AccuracyGrid(80.0, {"A": {0.1: -1.0}}), attacks=["A"])


# -- properties ----------------------------------------------------------------------------
_ATTACKS = ("A", "B", "C")
_EPS = (0.1, 0.2, 0.3, 0.4)


@st.composite
def ref_and_model(draw):
    # accuracies on a 0.01 grid, as published tables are: acc* differences then never fall to
    # float noise, where SC (a ratio of differences) would be dominated by rounding
    acc = st.integers(50, 10000).map(lambda k: k / 100)
    ref = AccuracyGrid(draw(acc), {a: {e: draw(acc) for e in _EPS} for a in _ATTACKS})
    frac = st.floats(0.0, 1.0, allow_nan=False)
    model = AccuracyGrid(draw(frac) * 100, {a: {e: draw(frac) * 100 for e in _EPS}
                                            for a in _ATTACKS})
    trained = draw(st.dictionaries(st.sampled_from(_ATTACKS), st.sampled_from(_EPS + (0.05,))))
    return ref, model, trained


def _naive_sc(table, window=3.0):
    best = float("nan")
    for i in range(len(table.acc)):
        if not table.seen[i]:
            continue
        for j in range(len(table.acc)):
            d = abs(table.acc_star[i] - table.acc_star[j])
            if i != j and 0 < d < window:
                v = abs(table.acc[i] - table.acc[j]) / d
                best = v if math.isnan(best) else max(best, v)
    return best


@settings(max_examples=60, deadline=None)
@given(ref_and_model())
def test_properties(data):
    ref, model, trained = data
    rep = competitiveness(model, ref, attacks=_ATTACKS, trained_on=trained)
    n = 1 + len(_ATTACKS) * len(_EPS)
    assert rep.cr_ind_worst <= rep.cr_ind_avg + 1e-9
    assert rep.cr_ind_worst == pytest.approx(min(s["worst"] for s in rep.single.values()))
    # the average over all points from the single-attack averages (clean counted once)
    r_clean = 100 * model.clean / ref.clean
    total = sum(s["avg"] * (len(_EPS) + 1) for s in rep.single.values())
    assert rep.cr_ind_avg * n == pytest.approx(total - (len(_ATTACKS) - 1) * r_clean)
    # seen/unseen split the points
    k = round(rep.pct_seen / 100 * n)
    assert 1 <= k <= n and k == rep.table.seen.sum()
    out = 0.0 if k == n else rep.cr_out_avg * (n - k)
    assert rep.cr_in_avg * k + out == pytest.approx(rep.cr_ind_avg * n)
    assert min(rep.cr_in_worst, rep.cr_out_worst if k < n else math.inf) == pytest.approx(
        rep.cr_ind_worst)
    naive = _naive_sc(rep.table)
    assert (math.isnan(rep.sc) and math.isnan(naive)) or rep.sc == pytest.approx(naive)


@settings(max_examples=40, deadline=None)
@given(ref_and_model(), st.floats(0.01, 1.0))
def test_reference_scores_100_and_scaling(data, c):
    ref, _, trained = data
    me = competitiveness(ref, ref, attacks=_ATTACKS, trained_on=trained)
    assert me.cr_ind_avg == pytest.approx(100) and me.cr_ind_worst == pytest.approx(100)
    assert all(s == {"avg": pytest.approx(100), "worst": pytest.approx(100)}
               for s in me.single.values())
    assert math.isnan(me.sc) or me.sc == pytest.approx(1.0)
    scaled = AccuracyGrid(ref.clean * c, {a: {e: v * c for e, v in cur.items()}
                                          for a, cur in ref.attacks.items()})
    rep = competitiveness(scaled, ref, attacks=_ATTACKS, trained_on=trained)
    assert rep.cr_ind_avg == pytest.approx(100 * c) and rep.cr_ind_worst == pytest.approx(100 * c)
    assert math.isnan(rep.sc) or rep.sc == pytest.approx(c)


@settings(max_examples=30, deadline=None)
@given(st.lists(ref_and_model(), min_size=1, max_size=4))
def test_best_reference_bounds_every_model(items):
    grids = [r for r, _, _ in items]  # accuracies in [0.5, 100], so acc* > 0
    star = best_reference(grids)
    for g in grids:
        t = point_table(g, star, attacks=_ATTACKS)
        assert t.ratio.max() <= 100 + 1e-9
    best = max(g.clean for g in grids)
    assert star.clean == best


def test_stability_constant_window_is_open():
    ref = AccuracyGrid(80.0, {"A": {0.1: 77.0, 0.2: 79.0}})
    model = AccuracyGrid(80.0, {"A": {0.1: 50.0, 0.2: 70.0}})
    t = point_table(model, ref, attacks=["A"], trained_on={})
    # clean-A@0.1 differ by exactly 3 (excluded); clean-A@0.2 by 1: |80-70|/1
    assert stability_constant(t) == pytest.approx(10.0)


# -- grids from radii ----------------------------------------------------------------------
def _result(radius, status, max_radius=1.0):
    n = len(radius)
    z = np.zeros(n)
    return RadiusResult(radius=np.asarray(radius, float), lower_bound=z, status=np.asarray(status),
                        x_adv=np.zeros((n, 2)), label=np.zeros(n, int),
                        prediction=np.zeros(n, int), adv_prediction=np.ones(n, int),
                        proba=np.zeros((n, 2)), proba_adv=np.zeros((n, 2)), loss=z,
                        forward_queries=np.zeros(n, int), backward_queries=np.zeros(n, int),
                        seconds=z, threat="linf", solver="pgd", max_radius=max_radius)


def test_grid_from_radii():
    res = _result([0.0, 0.01, 0.05, np.inf], ["misclassified", "attacked", "exact", "censored"])
    grid = grid_from_radii({"linf": res})
    assert grid.clean == 75.0
    curve = grid.attacks["AutoLinfAttack"]
    assert list(curve) == list(default_grid("linf"))
    # robust at eps iff radius > eps: radius 0.01 is broken at eps = 0.01
    assert curve[0.005] == 75.0 and curve[0.01] == 50.0 and curve[0.045] == 50.0
    assert curve[0.05] == 25.0 and curve[0.1] == 25.0
    with pytest.raises(InputError, match="exceeds the largest strength"):
        grid_from_radii({"linf": _result([0.2], ["censored"], max_radius=0.05)})
    with pytest.raises(InputError, match="same inputs"):
        grid_from_radii({"linf": res, "l2": _result([0.1], ["exact"])})
    custom = grid_from_radii({"linf": res}, strengths={"linf": [0.02]})
    assert custom.attacks == {"AutoLinfAttack": {0.02: 50.0}}


# -- the accuracy format ---------------------------------------------------------------------
@pytest.mark.parametrize("doc, match", [
    ({"A": {"0.1": 3}}, "no 'NoAttack'"),
    ({"NoAttack": "high"}, "must be a number"),
    ({"NoAttack": 101.0}, r"outside \[0, 100\]"),
    ({"NoAttack": 90, "A": [1, 2]}, "attack 'A' must map"),
    ({"NoAttack": 90, "A": {"x": 3}}, "A at strength 'x'"),
    ({"NoAttack": 90, "A": {"0.1": None}}, "A at strength '0.1'.*number"),
    ({"NoAttack": 90, "A": {"0.1": 3, "0.100001": 4}}, "given twice"),
])
def test_bad_grids_are_named(doc, match):
    with pytest.raises(InputError, match=match):
        AccuracyGrid.from_dict(doc)
