"""The convergence rounds' stopping logic (issue #39, opt-in): a radius still falling is
never marked converged, agreement of independent rounds is needed, a closed bracket spends
nothing, the ceiling holds. Tightness lives in benchmarks/zoo/convergence.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import robustscope as rs
from robustscope.search.convergence import weigh_round
from robustscope.search.plan import SearchConfig


def _run(radii_per_round: list[float], sizes: list[float], tol=0.01, patience=3):
    """Feed one input's best radius after each round (and the round's own size) through
    :func:`weigh_round`; returns the converged flag after each round."""
    since = torch.zeros(1, dtype=torch.long)
    agree = torch.zeros(1, dtype=torch.long)
    before = torch.tensor([math.inf], dtype=torch.float64)
    flags = []
    for r, s in zip(radii_per_round, sizes, strict=True):
        after = torch.tensor([r], dtype=torch.float64)
        since, agree, done = weigh_round(before, after, torch.tensor([s], dtype=torch.float64),
                                         since, agree, tol, patience)
        flags.append(bool(done))
        before = after
    return flags


@settings(max_examples=50, deadline=None)
@given(st.floats(0.015, 0.5), st.integers(5, 40))
def test_a_radius_still_falling_is_never_converged(drop, rounds):
    radii = [1.0 * (1 - drop) ** k for k in range(rounds)]
    assert not any(_run(radii, radii))


def test_flat_and_agreeing_rounds_converge_after_the_patience():
    radii = [1.0] * 6
    assert _run(radii, radii) == [False, False, False, True, True, True]


def test_rounds_that_never_reach_the_best_do_not_converge():
    radii = [1.0] * 8
    sizes = [1.0] + [1.5] * 7          # only the first round found the best
    assert not any(_run(radii, sizes))


def test_an_improvement_starts_the_count_again():
    radii = [1.0, 1.0, 1.0, 0.9, 0.9, 0.9, 0.9]
    assert _run(radii, radii) == [False, False, False, False, False, False, True]


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


@pytest.mark.parametrize("ceiling", [700, 3000])
def test_rounds_only_tighten_and_keep_under_the_ceiling(ceiling):
    net, X, y = _digits_net()
    space = rs.FeatureSpace.box(64)
    plain = rs.radius(net, X, y, threat="linf", space=space)
    rounds = rs.radius(net, X, y, threat="linf", space=space,
                       config=SearchConfig(converge_ceiling=ceiling))
    passes = rounds.forward_queries + rounds.backward_queries
    assert passes.max() <= ceiling + 2          # + the check alone's reserve
    ok = np.isfinite(plain.radius)
    # the same cascade first, then only more counterexamples: never larger (up to the
    # outward push of a counterexample that flips only in a batch)
    assert (rounds.radius[ok] <= plain.radius[ok] * (1 + 1e-4)).all()
    converged = np.asarray(rounds.meta["converged"])
    assert converged.shape == (len(X),)
    if ceiling == 700:          # 300 planned + at most 3 rounds: never enough evidence
        assert not converged[rounds.status == "attacked"].any()
    assert "converged" not in plain.meta


def test_a_closed_bracket_spends_no_round():
    torch.manual_seed(1)
    lin = torch.nn.Sequential(torch.nn.Linear(5, 3))   # affine: CROWN closes every bracket
    X = np.random.default_rng(0).normal(size=(6, 5)).astype(np.float32)
    y = lin(torch.as_tensor(X)).argmax(1).numpy()
    plain = rs.radius(lin, X, y, threat="l2")
    rounds = rs.radius(lin, X, y, threat="l2", config=SearchConfig(converge_ceiling=3000))
    assert (rounds.lower_bound >= (1 - rounds.meta["rtol"]) * rounds.radius).all()
    assert "convergence rounds" not in rounds.meta["passes_by_part"]
    np.testing.assert_array_equal(rounds.forward_queries + rounds.backward_queries,
                                  plain.forward_queries + plain.backward_queries)
    assert np.asarray(rounds.meta["converged"]).all()


def test_rounds_on_images_keep_their_shape():
    torch.manual_seed(0)
    cnn = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                              torch.nn.Linear(4 * 6 * 6, 3))
    X = np.random.default_rng(0).uniform(size=(4, 1, 8, 8)).astype(np.float32)
    y = cnn(torch.as_tensor(X)).argmax(1).numpy()
    res = rs.radius(cnn, X, y, threat="l2", space=rs.FeatureSpace.box((1, 8, 8)),
                    config=SearchConfig(converge_ceiling=800))
    assert res.meta["passes_by_part"].get("convergence rounds", 0) > 0
    assert res.x_adv.shape == X.shape
