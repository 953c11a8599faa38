"""The black-box cascade's convergence verdict reads the last stretch of each input's budget:
a radius that a late stage was still lowering is reported as still falling (-1), never as
converged, whatever the step-down search concluded earlier (issue #39)."""

from __future__ import annotations

import math

import numpy as np
import torch
from blackbox_helpers import logistic_box

from robustscope.solvers.attacks.decision import gradient_free as gradient_free_module
from robustscope.solvers.attacks.decision.gradient_free import gradient_free, still_moving
from robustscope.solvers.attacks.decision.scaled_oracle import ScaledOracle
from robustscope.threats import get_threat

D = 4


def _linear(n: int = 4, seed: int = 0):
    """A logistic black box on ``D`` features (:func:`blackbox_helpers.logistic_box`)."""
    return logistic_box(n, D, seed)


def test_the_oracle_reads_the_radius_held_when_its_queries_reach_the_mark():
    model, space, x, y, step = _linear()
    oracle = ScaledOracle(model, x, y, space, get_threat("l2"), budget=100)
    oracle.mark = 10
    idx = np.array([0, 1])
    far = (2.0 * step[idx]).unsqueeze(1)
    oracle.query(idx, far.repeat(1, 5, 1))  # 5 queries each, radius 2 |step|
    assert torch.isnan(oracle.radius_at_mark).all()  # nobody has reached the mark yet
    oracle.query(idx[:1], (1.1 * step[:1]).unsqueeze(1).repeat(1, 6, 1))  # 5 -> 11: crosses
    r = step.norm(dim=1)
    # the radius held just before the request that reached the mark, not the one it found
    assert torch.isclose(oracle.radius_at_mark[0], 2 * r[0])
    assert torch.isclose(oracle.best_r[0], 1.1 * r[0])
    assert torch.isnan(oracle.radius_at_mark[1:]).all()
    assert still_moving(oracle, 0.01).tolist() == [True, False, False, False]
    # a fall smaller than rtol is not movement; inf at the mark (nothing held) is not either
    assert not still_moving(oracle, 0.5)[0]
    oracle.radius_at_mark[1] = math.inf
    assert not still_moving(oracle, 0.01)[1]


def test_a_late_stage_that_still_lowers_the_radius_is_reported_as_still_falling(monkeypatch):
    """Every input's step-down search says converged. After it, a stand-in for the last
    stage spends each input's queries up to the mark (80% of 1,000) and then, for input 0,
    finds a counterexample a third smaller (-1); for input 1 nothing smaller (1); for input
    2 one 0.5% smaller, under rtol (1); for input 3 the smaller one before the mark (1)."""
    model, space, x, y, step = _linear()
    n = len(x)

    def converged_at_one_and_a_half(*args, oracle=None, **kwargs):
        oracle.query(np.arange(n), (1.5 * step).unsqueeze(1))
        out = oracle.output()
        out.meta["converged"] = np.ones(n, dtype=np.int8)
        return out

    def late_stage(oracle):
        ids = np.arange(n)
        oracle.query(ids[3:], (1.01 * step[3:]).unsqueeze(1))  # input 3: before the mark
        filler = oracle.mark - oracle.used  # the input itself: never a counterexample
        for i in ids:
            oracle.query(ids[i:i + 1], torch.zeros(1, int(filler[i]), D, dtype=x.dtype))
        assert (oracle.used == oracle.mark).all()
        after = torch.tensor([1.0, 1.5, 1.4925, 1.01], dtype=x.dtype).unsqueeze(1) * step
        oracle.query(ids, after.unsqueeze(1))

    monkeypatch.setattr(gradient_free_module, "step_down_search", converged_at_one_and_a_half)
    monkeypatch.setattr(gradient_free_module, "hop_skip_jump", lambda *a, **k: None)
    monkeypatch.setattr(gradient_free_module, "polish", late_stage)
    run = gradient_free(model, x, y, space, "l2", budget=1000, linear_steps=False,
                        crossings=False, rtol=0.01)
    assert run.found.all()
    assert run.meta["converged"].tolist() == [-1, 1, 1, 1]
    assert np.allclose(run.radius, [1.0, 1.5, 1.4925, 1.01] * step.norm(dim=1).numpy())


def test_the_mark_is_read_when_it_falls_inside_a_restart(monkeypatch):
    """Under Linf the restarts run on an oracle of their own: where an input's queries reach
    the mark during one, the radius held then is still read (the better of the one held
    before the restart and the one it had reached), never left unread."""
    model, space, x, y, _ = _linear(n=6, seed=3)
    rng = np.random.default_rng(1)
    pool = torch.as_tensor(rng.normal(size=(60, D)) * 2)
    made: list[ScaledOracle] = []

    class Recorded(ScaledOracle):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(gradient_free_module, "ScaledOracle", Recorded)
    monkeypatch.setattr(gradient_free_module, "hop_skip_jump", lambda *a, **k: None)
    run = gradient_free(model, x, y, space, "linf", budget=1200, X_pool=pool,
                        y_pool=model.predict(pool), restarts=3, descent=False,
                        linear_steps=False, generator=torch.Generator().manual_seed(0))
    main, restarts = made[0], made[1:]
    assert restarts  # the restarts ran
    crossed_inside = np.zeros(len(x), dtype=bool)
    for fresh in restarts:
        crossed_inside |= ~torch.isnan(fresh.radius_at_mark).numpy()
    assert crossed_inside.any()
    reached = main.used >= main.mark
    assert not torch.isnan(main.radius_at_mark[torch.as_tensor(reached)]).any()
    held = main.radius_at_mark[torch.as_tensor(reached)]
    assert (held >= torch.as_tensor(run.radius[reached]) * (1 - 1e-12)).all()
