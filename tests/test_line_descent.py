"""The Linf line descent of the gradient-free cascade on tree-like (piecewise-constant) models
whose nearest counterexample needs a feature inside a narrow interval."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from robustscope.core.checks import make_generator
from robustscope.core.errors import InputError
from robustscope.core.space import FeatureSpace
from robustscope.models.base import QueryLedger
from robustscope.models.blackbox import ProbaClassifier
from robustscope.models.metered import MeteredModel
from robustscope.solvers.attacks.decision.line_descent import (
    descend,
    line_descent,
    search_lines,
)
from robustscope.solvers.attacks.decision.scaled_oracle import ScaledOracle
from robustscope.threats import get_threat

D = 5


def _needle_model(a: float, lo: float, hi: float, far: float) -> ProbaClassifier:
    """Trees' sum of votes: +1 for ``x0 >= a``, +1 for ``x1 >= lo``, -0.8 for ``x1 >= hi``
    and +2 for ``x2 >= far``; class 1 above 1.5. The nearest counterexample (Linf, from 0)
    has ``x0 = a`` and ``x1`` in ``[lo, hi)``, a piece every vertex of a larger ball
    overshoots; ``x2 = far`` is a counterexample further away."""

    def proba(z):
        z = np.asarray(z)
        votes = (1.0 * (z[:, 0] >= a) + 1.0 * (z[:, 1] >= lo) - 0.8 * (z[:, 1] >= hi)
                 + 2.0 * (z[:, 2] >= far))
        p1 = 1 / (1 + np.exp(-4 * (votes - 1.5)))
        return np.stack([1 - p1, p1], axis=1)

    return ProbaClassifier(proba, 2, (D,))


def _recording(inner: ProbaClassifier) -> tuple[ProbaClassifier, list[np.ndarray]]:
    """``inner`` as a model that keeps a copy of every batch of rows it is asked about."""
    calls: list[np.ndarray] = []

    def proba(z):
        calls.append(np.array(z, copy=True))
        return inner.probabilities_numpy(z)

    return ProbaClassifier(proba, 2, (D,)), calls


def _oracle(model, n: int = 1, budget: int | None = None, ledger=None) -> ScaledOracle:
    space = FeatureSpace.from_arrays([-1.0] * D, [1.0] * D, scale=np.ones(D))
    x = torch.zeros(n, D, dtype=torch.float64)
    return ScaledOracle(model, x, torch.zeros(n, dtype=torch.long), space, get_threat("linf"),
                        budget=budget, ledger=ledger)


def _hold_far(oracle: ScaledOracle, far: float) -> None:
    u = torch.zeros(oracle.n, 1, D, dtype=torch.float64)
    u[:, 0, 2] = far
    adv, _, _, _ = oracle.query(np.arange(oracle.n), u)
    assert adv.all()


def test_line_descent_finds_the_narrow_piece_the_vertices_overshoot():
    a, lo, hi, far = 0.1, 0.06, 0.065, 0.3
    model = _needle_model(a, lo, hi, far)
    ledger = QueryLedger(1)
    oracle = _oracle(MeteredModel(model, ledger, np.arange(1)), budget=3000)
    _hold_far(oracle, far)
    line_descent(oracle, make_generator(0))
    u = oracle.best_u[0].numpy()
    assert a <= oracle.best_r[0] <= 1.05 * a  # the exact radius is a
    assert lo <= u[1] < hi  # inside the piece
    assert model.predict(oracle.candidates())[0] == 1  # the model confirms it
    assert ledger.forward[0] == oracle.used[0] <= 3000


def test_vertices_of_the_same_ball_miss_the_piece():
    """What the descent is for: a random vertex of a ball 1.05x the exact radius never
    lands in the piece (x1 at +-r overshoots it), so the step-down's vertex proposals fail."""
    a, lo, hi, far = 0.1, 0.06, 0.065, 0.3
    model = _needle_model(a, lo, hi, far)
    signs = torch.randint(0, 2, (2000, D), generator=make_generator(1)).double() * 2 - 1
    assert model.predict(signs * 1.05 * a).sum() == 0


def test_an_attempt_in_a_ball_too_small_fails_and_spends_little():
    a, lo, hi, far = 0.1, 0.06, 0.065, 0.3
    oracle = _oracle(_needle_model(a, lo, hi, far))
    _hold_far(oracle, far)
    before = oracle.best_r.clone()
    found = descend(oracle, np.arange(1), torch.tensor([0.09], dtype=torch.float64),
                    make_generator(0))
    assert not found[0] and torch.equal(oracle.best_r, before)
    # one start, then at most three sweeps of (grid + bisection) over the features
    assert oracle.used[0] <= 1 + 1 + 3 * D * (9 + 6)


def test_inputs_without_a_counterexample_or_budget_are_left_alone():
    a, lo, hi, far = 0.1, 0.06, 0.065, 0.3
    oracle = _oracle(_needle_model(a, lo, hi, far), n=3, budget=400)
    u = torch.zeros(3, 1, D, dtype=torch.float64)
    u[:2, 0, 2] = far
    oracle.query(np.arange(3), u)  # inputs 0, 1 hold a counterexample, input 2 none
    oracle.used[1] = 400 - 299  # fewer than min_left=300 queries left
    used = oracle.used.copy()
    line_descent(oracle, make_generator(0), min_left=300)
    assert oracle.used[0] > used[0]
    assert oracle.used[1] == used[1] and oracle.used[2] == used[2]
    assert (oracle.used <= 400).all()


@settings(max_examples=20, deadline=None)
@given(st.floats(0.05, 0.4), st.floats(0.1, 0.9), st.floats(0.01, 0.3), st.integers(0, 99))
def test_line_descent_never_goes_below_exact_and_keeps_a_verified_point(a, lo_share, width,
                                                                        seed):
    lo = a * lo_share
    hi = lo + width * a
    far = min(3 * a, 0.95)
    model = _needle_model(a, lo, hi, far)
    oracle = _oracle(model, budget=2000)
    _hold_far(oracle, far)
    before = float(oracle.best_r[0])
    line_descent(oracle, make_generator(seed))
    exact = a  # lo < a: the piece is inside the ball of radius a
    assert exact * (1 - 1e-9) <= oracle.best_r[0] <= before
    assert oracle.best_r[0] <= 1.1 * exact  # from 3x away to the piece's ball
    assert model.predict(oracle.candidates())[0] == 1
    assert oracle.used[0] <= 2000


def test_the_linf_cascade_runs_the_descent_and_reaches_the_piece():
    from robustscope.solvers.attacks.decision.gradient_free import gradient_free

    a, lo, hi, far = 0.1, 0.06, 0.065, 0.3
    model = _needle_model(a, lo, hi, far)
    space = FeatureSpace.from_arrays([-1.0] * D, [1.0] * D, scale=np.ones(D))
    x = torch.zeros(2, D, dtype=torch.float64)
    start = x.clone()
    start[:, 2] = far
    out = gradient_free(model, x, torch.zeros(2, dtype=torch.long), space, "linf",
                        generator=make_generator(0), budget=3000, x_init=start)
    assert (out.radius <= 1.05 * a).all() and (out.radius >= a).all()
    assert (model.predict(out.x_adv) == 1).all()
    assert (out.forward_queries <= 3000).all()


def test_an_attempt_from_the_input_starts_there():
    """The second schedule's attempts start from the input, not from the counterexample
    held: the first row the model sees is the input itself."""
    a, lo, hi, far = 0.1, 0.06, 0.065, 0.3
    model, seen = _recording(_needle_model(a, lo, hi, far))
    oracle = _oracle(model)
    _hold_far(oracle, far)
    seen.clear()
    found = descend(oracle, np.arange(1), torch.tensor([0.2], dtype=torch.float64),
                    make_generator(0), from_input=True)
    assert np.array_equal(seen[0], np.zeros((1, D)))
    assert found[0] and oracle.best_r[0] <= 0.2


def test_discrete_features_that_cannot_move_cost_no_query():
    """Integer features whose step (1 raw unit = 1 scaled here) exceeds the ball are never
    queried: their 9 grid values would all round back to the point held."""
    a, lo, hi, far = 0.1, 0.06, 0.065, 0.3
    model, calls = _recording(_needle_model(a, lo, hi, far))
    space = FeatureSpace.from_arrays([-1.0] * D, [1.0] * D, scale=np.ones(D),
                                     types=["real", "real", "real", "integer", "integer"])
    oracle = ScaledOracle(model, torch.zeros(1, D, dtype=torch.float64),
                          torch.zeros(1, dtype=torch.long), space, get_threat("linf"))
    _hold_far(oracle, far)
    calls.clear()
    descend(oracle, np.arange(1), torch.tensor([0.09], dtype=torch.float64), make_generator(0))
    grids = [rows for rows in calls if len(rows) == 9]
    assert grids  # the real features were searched
    assert all(len(np.unique(rows, axis=0)) == 9 for rows in grids)  # no grid of repeats


@pytest.mark.parametrize("bad", [dict(shrinks=()), dict(shrinks=(0.3, 0.0)),
                                 dict(shrinks=(1.0,)), dict(grid=1), dict(sweeps=0),
                                 dict(steps=-1)])
def test_bad_settings_are_refused(bad):
    oracle = _oracle(_needle_model(0.1, 0.06, 0.065, 0.3))
    with pytest.raises(InputError):
        line_descent(oracle, make_generator(0), **bad)


def test_an_image_sized_input_leaves_its_budget_to_the_next_stage():
    """One grid pass over a 3x32x32 image's 3,072 features costs more than the budget left:
    no attempt starts. (Its lines are sparse: built as dense vectors, 3,072 of them took
    minutes and gigabytes before a query was asked.)"""
    d = 3 * 32 * 32
    model = ProbaClassifier(lambda z: np.tile([0.2, 0.8], (len(z), 1)), 2, (d,))
    space = FeatureSpace.from_arrays([0.0] * d, [1.0] * d)
    oracle = ScaledOracle(model, torch.full((1, d), 0.5, dtype=torch.float64),
                          torch.zeros(1, dtype=torch.long), space, get_threat("linf"),
                          budget=5000)
    oracle.query(np.arange(1), torch.full((1, 1, d), 0.3, dtype=torch.float64))
    line_descent(oracle, make_generator(0))
    assert oracle.used[0] == 1


def _sum_space() -> FeatureSpace:
    """Three features ``savings + investments == assets`` (scales 1, 2 and 3)."""
    space = FeatureSpace.from_arrays([0.0] * 3, [4.0] * 3, scale=np.array([1.0, 2.0, 3.0]),
                                     names=["savings", "investments", "assets"])
    return space.constrain(["savings + investments == assets"])


def test_relation_lines_keep_the_rows_they_slide_along():
    """One line per mutable feature, then one per pair of features of a relation row, each
    keeping that row's value; none moves an immutable or categorical feature."""
    names = ["a", "b", "c", "d", "h1", "h2"]
    space = FeatureSpace.from_arrays([0.0] * 6, [10.0] * 6, names=names,
                                     scale=np.array([1.0, 2.0, 4.0, 1.0, 1.0, 1.0]),
                                     types=["real", "real", "integer", "real", "categorical",
                                            "categorical"],
                                     mutable=[True, True, True, False, True, True],
                                     groups=[[4, 5]])
    space = space.constrain(["a + b == c", "a <= 2 * b", "d <= a", "c <= 5 * h1"])
    oracle = ScaledOracle(_needle_model(0.1, 0.06, 0.065, 0.3), torch.ones(1, 6),
                          torch.zeros(1, dtype=torch.long), space, get_threat("linf"))
    directions = np.zeros((0, 6))
    for line in search_lines(oracle):
        v = np.zeros(6)
        v[line.support.numpy()] = line.coef.numpy()
        directions = np.vstack([directions, v])
    assert np.allclose(np.abs(directions).max(axis=1), 1.0)
    assert all(len(line.support) == len(line.coef) <= 2 for line in search_lines(oracle))
    coordinate = [v for v in directions if np.count_nonzero(v) == 1]
    assert len(coordinate) == 5  # a, b, c and the two arms; d is immutable
    pairs = [v for v in directions if np.count_nonzero(v) == 2]
    assert len(pairs) == 4  # (a, b), (a, c), (b, c) of the sum; (a, b) of a <= 2 b
    rows = np.vstack([space.relations.C, space.relations.A[:1]])
    raw = np.stack(pairs) * space.scale  # scaled -> raw units
    for v in raw:  # each holds a row over both its features at the same value
        assert any(abs(row @ v) < 1e-12 for row in rows if np.count_nonzero(row * v) == 2)
    assert not np.any(directions[:, 3]) and not np.any(np.stack(pairs)[:, 4:])


def test_the_descent_slides_along_an_equality_a_single_feature_cannot_follow():
    """Class 1 needs investments up by 0.1 with savings held: under ``savings + investments
    == assets`` only investments and assets moving together get there (Linf radius 0.05 in
    scaled units, investments' scale being 2). A single feature's move is projected back onto
    the relation by moving savings too, so the coordinate lines alone find nothing."""
    def proba(z):
        z = np.asarray(z)
        hit = (z[:, 1] >= 1.6) & (z[:, 0] >= 1.0 - 1e-3)
        return np.stack([~hit, hit], axis=1).astype(float)

    model = ProbaClassifier(proba, 2, (3,))
    x = torch.tensor([[1.0, 1.5, 2.5]], dtype=torch.float64)
    r = torch.tensor([0.08], dtype=torch.float64)

    def attempt(lines) -> tuple[bool, ScaledOracle]:
        oracle = ScaledOracle(model, x, torch.zeros(1, dtype=torch.long), _sum_space(),
                              get_threat("linf"))
        oracle.best_u[0], oracle.best_r[0] = torch.tensor([0.0, 0.5, 0.5]), 0.5  # held far
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr("robustscope.solvers.attacks.decision.line_descent.search_lines",
                       lambda o: lines(o))
            found = descend(oracle, np.arange(1), r, make_generator(0), from_input=True)
        return bool(found[0]), oracle

    found, oracle = attempt(search_lines)
    assert found and oracle.best_r[0] <= 0.08
    x_adv = oracle.candidates().numpy()
    assert model.predict(oracle.candidates())[0] == 1
    assert _sum_space().relations_hold(x_adv).all()
    found_alone, _ = attempt(lambda o: [ln for ln in search_lines(o) if len(ln.support) == 1])
    assert not found_alone


def _pair_lines(constraints: list[str], d: int = 6, types=None) -> list:
    names = [f"f{j}" for j in range(d)]
    space = FeatureSpace.from_arrays([0.0] * d, [10.0] * d, names=names,
                                     scale=np.arange(1.0, d + 1), types=types)
    model = ProbaClassifier(lambda z: np.tile([0.8, 0.2], (len(z), 1)), 2, (d,))
    oracle = ScaledOracle(model, torch.ones(1, d, dtype=torch.float64),
                          torch.zeros(1, dtype=torch.long),
                          space.constrain(constraints), get_threat("linf"))
    return [line for line in search_lines(oracle) if len(line.support) == 2]


def test_rows_over_the_same_pair_at_other_ratios_keep_a_line_each():
    """``2 f0 <= f1`` and ``4 f0 <= f1`` slide along different directions: two lines; the
    same row written twice, or scaled, or with its features' roles swapped, is one."""
    assert len(_pair_lines(["2 * f0 <= f1", "4 * f0 <= f1"])) == 2
    assert len(_pair_lines(["2 * f0 <= f1", "4 * f0 <= 2 * f1", "-2 * f0 >= -f1"])) == 1


def test_a_wide_row_gets_a_chain_of_pairs_that_keep_it():
    """A sum over 6 features: 5 lines (each feature with the next), not 15, each keeping it."""
    lines = _pair_lines(["f0 + f1 + f2 + f3 + f4 == f5"])
    assert [line.support.tolist() for line in lines] == [[j, j + 1] for j in range(5)]
    row = np.array([1.0, 1, 1, 1, 1, -1])
    scale = np.arange(1.0, 7)
    for line in lines:
        v = np.zeros(6)
        v[line.support.numpy()] = line.coef.numpy()
        assert abs(row @ (v * scale)) < 1e-12


def test_a_pair_of_integer_features_is_checked_for_moves_but_bisected_to_the_end():
    """A pair of integers: its points may all round back (checked before a query), but the
    two features cross their integer steps at different places, so the bisection is not
    cut short by one feature's step."""
    (line,) = _pair_lines(["f0 <= 2 * f1"], types=["integer"] * 6)
    assert line.discrete and line.unit is None
