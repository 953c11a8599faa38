"""Stop on evidence (issue #39): the bookkeeping of the convergence rounds (a radius still
falling is never marked converged; only failures at rtol count; a descent is no evidence),
and the rounds inside ``radius()`` (only tighter than the cascade alone, the ceiling and the
budget hold, a closed bracket spends nothing, the converged column and the summary say what
happened). Tightness lives in ``benchmarks/zoo/stopping.py``."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import robustscope as rs
from robustscope.search.convergence import MAX_MARGIN, cycle, weigh_round
from robustscope.search.plan import SearchConfig

RTOL = 0.01


def _evidence(wins: list[bool], descents: list[bool] | None = None):
    """Feed one input's rounds through :func:`weigh_round`; the failures in a row after
    each round and the margins aimed at."""
    margin = torch.tensor([RTOL], dtype=torch.float64)
    fails = torch.zeros(1, dtype=torch.long)
    counts, margins = [], []
    for i, won in enumerate(wins):
        descend = bool(descents[i]) if descents else False
        margins.append(float(margin))
        margin, fails = weigh_round(torch.tensor([won]), torch.tensor([descend]), margin,
                                    fails, RTOL)
        counts.append(int(fails))
    return counts, margins


@settings(max_examples=60, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=40), st.integers(3, 12))
def test_a_radius_that_keeps_falling_is_never_converged(pattern, patience):
    # a win at least every `patience - 1` rounds: the count never reaches the patience
    wins = [w or (i % (patience - 1) == patience - 2) for i, w in enumerate(pattern)]
    counts, _ = _evidence(wins)
    assert max(counts) < patience


def test_failures_count_only_at_rtol_and_a_win_clears_them():
    counts, margins = _evidence([False, False, True, True, False, False, False])
    assert counts == [1, 2, 0, 0, 0, 1, 2]
    # the margin doubles after each win and falls back to rtol after a failure; the failure
    # at the doubled margin (0.04) counts nothing
    assert margins == pytest.approx([RTOL, RTOL, RTOL, 2 * RTOL, 4 * RTOL, RTOL, RTOL])


def test_the_margin_stops_doubling_at_its_maximum():
    _, margins = _evidence([True] * 12)
    assert max(margins) == pytest.approx(MAX_MARGIN)


def test_a_descent_is_no_evidence():
    counts, _ = _evidence([False, False, False], descents=[False, True, False])
    assert counts == [1, 1, 2]


def test_a_cycle_visits_every_kind_and_caps_the_targets():
    assert cycle(10, 9) == ("targeted",) * 9 + ("random", "minnorm")
    assert cycle(10, 3) == ("targeted",) * 3 + ("random", "minnorm")
    assert cycle(2, 9) == ("targeted", "random", "minnorm")


def _digits_net():
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = (X / 16).astype(np.float32)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    opt = torch.optim.Adam(net.parameters(), 1e-2)
    Xt, yt = torch.as_tensor(X[:1000]), torch.as_tensor(y[:1000])
    for _ in range(100):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(Xt), yt).backward()
        opt.step()
    return net, X[1000:1012], y[1000:1012]


@pytest.fixture(scope="module")
def digits():
    return _digits_net()


@pytest.mark.parametrize("threat", ["linf", "l1"])
def test_rounds_only_tighten_and_mark_what_converged(digits, threat):
    net, X, y = digits
    space = rs.FeatureSpace.box(64)
    plain = rs.radius(net, X, y, threat=threat, space=space,
                      config=SearchConfig(converge_ceiling=None))
    rounds = rs.radius(net, X, y, threat=threat, space=space)      # the default
    passes = rounds.queries
    assert passes.max() <= SearchConfig().converge_ceiling + 2    # + the check alone
    ok = np.isfinite(plain.radius)
    # the same cascade first, then only more counterexamples: never larger (up to the
    # outward push of a counterexample that flips only in a batch)
    assert (rounds.radius[ok] <= plain.radius[ok] * (1 + 1e-4)).all()
    assert (plain.converged == 0).all()            # no rounds: not assessed
    attacked = rounds.status == "attacked"
    assert set(np.unique(rounds.converged[attacked])) <= {1, -1}
    assert "converged" in rounds.to_dataframe().columns
    assert rounds.summary()["not_converged"] == int((rounds.converged == -1).sum())
    # a converged input took at least one whole cycle of rounds beyond the cascade
    cascade = plain.queries
    done = attacked & (rounds.converged == 1)
    assert (passes[done] > cascade[done]).all()


def test_a_ceiling_too_low_for_a_cycle_is_reported_not_converged(digits):
    net, X, y = digits
    res = rs.radius(net, X, y, threat="linf", space=rs.FeatureSpace.box(64),
                    config=SearchConfig(converge_ceiling=450))
    attacked = res.status == "attacked"
    assert attacked.any()
    assert (res.converged[attacked] == -1).all()
    assert res.summary()["not_converged"] == int(attacked.sum())
    assert res.queries.max() <= 452


def test_a_budget_is_the_ceiling_of_the_rounds(digits):
    net, X, y = digits
    res = rs.radius(net, X, y, threat="l2", space=rs.FeatureSpace.box(64), budget=900)
    assert res.queries.max() <= 900
    assert res.meta["passes_by_part"].get("convergence rounds", 0) > 0
    small = rs.radius(net, X, y, threat="l2", space=rs.FeatureSpace.box(64), budget=120)
    assert small.queries.max() <= 120


def test_a_closed_bracket_spends_no_round():
    torch.manual_seed(1)
    lin = torch.nn.Sequential(torch.nn.Linear(5, 3))   # affine: CROWN closes every bracket
    X = np.random.default_rng(0).normal(size=(6, 5)).astype(np.float32)
    y = lin(torch.as_tensor(X)).argmax(1).numpy()
    plain = rs.radius(lin, X, y, threat="l2", config=SearchConfig(converge_ceiling=None))
    rounds = rs.radius(lin, X, y, threat="l2")
    assert (rounds.lower_bound >= (1 - rounds.meta["rtol"]) * rounds.radius).all()
    assert "convergence rounds" not in rounds.meta["passes_by_part"]
    np.testing.assert_array_equal(rounds.queries, plain.queries)
    assert (rounds.converged == 1).all()


def test_black_boxes_are_assessed_by_their_step_down_search():
    from sklearn.linear_model import LogisticRegression

    from robustscope.models.wrap import wrap_model

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4))
    y = (X[:, 0] + X[:, 1] > 0).astype(int)
    clf = LogisticRegression().fit(X, y)
    box = wrap_model(clf.predict_proba, n_classes=2)
    roomy = rs.radius(box, X[:5], y[:5], threat="linf", budget=5000)
    attacked = roomy.status == "attacked"
    assert attacked.any()
    assert (roomy.converged[attacked] == 1).all()
    # a misclassified input's radius is 0 whatever the search: settled
    assert (roomy.converged[roomy.status == "misclassified"] == 1).all()
    assert roomy.summary()["not_converged"] == 0
    # a budget too small to finish: still falling, counted, never converged
    tight = rs.radius(box, X[:5], y[:5], threat="linf", budget=20)
    attacked = tight.status == "attacked"
    assert attacked.any() and (tight.converged[attacked] == -1).all()
    assert tight.summary()["not_converged"] == int(attacked.sum())


@pytest.mark.parametrize("rtol", [0.01, 0.002])
def test_a_black_box_search_stalls_at_the_users_rtol(monkeypatch, rtol):
    """``rtol`` is the step-down search's evidence on a black box too (its step must fall
    below ``rtol / 2`` before an input counts as stalled), not a fixed 1%."""
    from sklearn.linear_model import LogisticRegression

    import robustscope.solvers.attacks.decision.gradient_free as gradient_free
    from robustscope.models.wrap import wrap_model

    seen: list[float] = []
    step_down = gradient_free.step_down_search

    def spy(*args, **kwargs):
        seen.append(kwargs["rtol"])
        return step_down(*args, **kwargs)

    monkeypatch.setattr(gradient_free, "step_down_search", spy)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4))
    y = (X[:, 0] + X[:, 1] > 0).astype(int)
    box = wrap_model(LogisticRegression().fit(X, y).predict_proba, n_classes=2)
    rs.radius(box, X[:3], y[:3], threat="linf", budget=400, rtol=rtol)
    assert seen and set(seen) == {rtol}


def test_rounds_on_images_keep_their_shape():
    torch.manual_seed(0)
    cnn = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                              torch.nn.Linear(4 * 6 * 6, 3))
    X = np.random.default_rng(0).uniform(size=(4, 1, 8, 8)).astype(np.float32)
    y = cnn(torch.as_tensor(X)).argmax(1).numpy()
    res = rs.radius(cnn, X, y, threat="l2", space=rs.FeatureSpace.box((1, 8, 8)),
                    certify="none")
    assert res.meta["passes_by_part"].get("convergence rounds", 0) > 0
    assert res.x_adv.shape == X.shape


def test_the_command_line_counts_and_explains_radii_still_falling(tmp_path, digits):
    import pandas as pd
    from typer.testing import CliRunner

    from robustscope.cli.app import app

    net, X, y = digits
    path = tmp_path / "net.pt"
    torch.jit.script(net).save(str(path))
    np.savez(tmp_path / "data.npz", X=X, y=y)
    out = tmp_path / "radii.csv"
    # 400 passes: the cascade and less than a whole cycle of rounds
    result = CliRunner().invoke(app, ["radius", "--model", str(path), "--data",
                                      str(tmp_path / "data.npz"), "--threat", "linf",
                                      "--budget", "400", "--out", str(out)])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out)
    still = int((table["converged"] == -1).sum())
    assert still == int((table["status"] == "attacked").sum()) > 0
    assert f"{still} radius/radii still falling" in " ".join(result.output.split())
    assert "--budget" in result.output
