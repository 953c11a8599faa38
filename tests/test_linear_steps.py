"""The boundary projection of the gradient-free cascade: its linear step, the Newton steps and
the segment bisection that follow it where a curved boundary puts the linear optimum short."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from robustscope.core.space import FeatureSpace
from robustscope.models.base import QueryLedger
from robustscope.models.blackbox import ProbaClassifier
from robustscope.models.metered import MeteredModel
from robustscope.solvers.attacks.decision.linear_steps import (
    bisect_segment,
    boundary_steps,
    newton_steps,
    unit_step,
)
from robustscope.solvers.attacks.decision.scaled_oracle import ScaledOracle
from robustscope.threats import get_threat

NORMS = {math.inf: 1.0, 2.0: 2.0, 1.0: math.inf}  # the dual norm of each threat


@settings(max_examples=50, deadline=None)
@given(arrays(np.float64, (3, 5), elements=st.floats(-10, 10)).filter(
    lambda g: (np.abs(g).max(1) > 1e-3).all()), st.sampled_from([math.inf, 2.0, 1.0]))
def test_unit_step_raises_the_linear_margin_by_one_at_the_smallest_norm(g, p):
    """``g · s = 1`` and ``||s||_p = 1 / ||g||_q`` (``q`` dual to ``p``): Hoelder's bound, met."""
    gt = torch.as_tensor(g)
    s = unit_step(p, gt)
    assert torch.allclose((gt * s).sum(1), torch.ones(3, dtype=torch.float64))
    norm = torch.linalg.vector_norm(s, ord=p, dim=1)
    dual = torch.linalg.vector_norm(gt, ord=NORMS[p], dim=1)
    assert torch.allclose(norm * dual, torch.ones(3, dtype=torch.float64))


def _curved(a: float = 0.4, d: int = 4) -> ProbaClassifier:
    """Class 1 where ``x_0 - a·||x_1:||² >= 1``, a convex cap: from the origin the nearest
    point under L2 is ``e_0`` (radius 1), and the projection of the origin on any other
    tangent plane of the boundary lies outside the cap, short of the boundary."""
    def proba(x):
        x = np.asarray(x, dtype=np.float64)
        s = x[:, 0] - a * (x[:, 1:] ** 2).sum(1) - 1
        p1 = 1 / (1 + np.exp(-4 * s))
        return np.stack([1 - p1, p1], axis=1)
    return ProbaClassifier(proba, 2, (d,))


def _oracle(model, n: int, d: int = 4, threat: str = "l2", ledger=None):
    space = FeatureSpace.from_arrays([-5.0] * d, [5.0] * d, scale=np.ones(d))
    x = torch.zeros(n, d, dtype=torch.float64)
    return ScaledOracle(model, x, torch.zeros(n, dtype=torch.long), space, get_threat(threat),
                        ledger=ledger)


def test_newton_steps_remove_the_margin_a_curved_boundary_leaves():
    model = _curved()
    oracle = _oracle(model, 2)
    idx = np.arange(2)
    # the linear optimum of a tangent plane far from e_0 falls short of the boundary
    u = torch.tensor([[0.5, 0.3, 0.0, 0.0], [0.2, 0.0, 0.4, 0.0]], dtype=torch.float64)
    adv, margin, _, _ = oracle.query(idx, u.unsqueeze(1))
    assert not adv.any() and (margin[:, 0] > 0).all()
    # the margin (log-odds of the input's class 0) is -4 s: its gradient along x_0 is -4
    g = torch.tensor([[-4.0, 0, 0, 0], [-4.0, 0, 0, 0]], dtype=torch.float64)
    step = unit_step(2.0, g)
    last, hit = newton_steps(oracle, idx, u, margin[:, 0], step, 5, 0.02)
    assert hit.all()
    assert model.predict(oracle.candidates()).eq(1).all()  # verified again
    assert (oracle.used <= 1 + 5).all()
    # a point already past the boundary costs nothing more
    before = oracle.used.copy()
    newton_steps(oracle, idx, last, torch.full((2,), -1.0, dtype=torch.float64), step, 5, 0.02)
    assert (oracle.used == before).all()


def test_bisect_segment_ends_within_its_resolution_of_the_boundary():
    model = _curved(a=0.0)  # a flat boundary: x_0 = 1
    oracle = _oracle(model, 1)
    near = torch.tensor([[0.0, 0.5, 0.0, 0.0]], dtype=torch.float64)
    far = torch.tensor([[2.0, 0.5, 0.0, 0.0]], dtype=torch.float64)
    oracle.query(np.arange(1), far.unsqueeze(1))
    bisect_segment(oracle, np.arange(1), near, far, 6)
    x0 = float(oracle.best_u[0, 0])
    assert 1.0 <= x0 <= 1.0 + 2.0 / 2**6
    assert oracle.used[0] == 1 + 6


def test_the_stage_lands_near_the_radius_of_a_curved_boundary_and_charges_every_row():
    """From far counterexamples, the linear step alone stalls on the bend; with the Newton
    steps and the segment bisection the stage ends close to the radius 1."""
    d, n = 4, 6
    model = _curved(d=d)
    starts = torch.tensor([[2.9, 2.0, 0.0, 0.0], [3.0, 0.0, 2.2, 0.0], [3.0, 1.0, 1.0, 1.0],
                           [2.5, -1.5, 0.8, 0.0], [2.8, 0.0, 0.0, -2.0], [2.6, 1.2, -0.5, 0.3]],
                          dtype=torch.float64)
    radii = {}
    for newton, segment in ((0, 0), (3, 4)):
        ledger = QueryLedger(n)
        oracle = _oracle(MeteredModel(model, ledger, np.arange(n)), n, d, ledger=None)
        oracle.query(np.arange(n), starts.unsqueeze(1))
        assert torch.isfinite(oracle.best_r).all()
        boundary_steps(oracle, newton=newton, segment_steps=segment)
        assert (ledger.forward == oracle.used).all()
        assert model.predict(oracle.candidates()).eq(1).all()
        radii[newton] = oracle.best_r.numpy()
    assert (radii[3] >= 1 - 1e-9).all()
    assert np.median(radii[3]) < 1.05
    assert np.median(radii[3]) < np.median(radii[0])


def _wedge(k: float, d: int) -> ProbaClassifier:
    """Class 1 where ``x_0 - k·|x_1| >= 1`` (other features unused): a convex wedge whose
    apex ``e_0`` is the nearest counterexample under L2 (radius 1). From a point on one
    face, the linear optimum lies past the apex, on the other face's wrong side."""
    def proba(x):
        x = np.asarray(x, dtype=np.float64)
        s = x[:, 0] - k * np.abs(x[:, 1]) - 1
        p1 = 1 / (1 + np.exp(-4 * s))
        return np.stack([1 - p1, p1], axis=1)
    return ProbaClassifier(proba, 2, (d,))


def _wedge_run(threat: str, damped, d: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Radii and queries of the stage on the wedge ``k = 1`` from four points on its faces."""
    model = _wedge(1.0, d)
    side = torch.tensor([[1.0], [-0.8], [0.5], [1.5]], dtype=torch.float64)
    starts = torch.cat([1.2 + side.abs(), side, torch.zeros(4, d - 2, dtype=torch.float64)], 1)
    ledger = QueryLedger(4)
    oracle = _oracle(MeteredModel(model, ledger, np.arange(4)), 4, d, threat)
    oracle.query(np.arange(4), starts.unsqueeze(1))
    boundary_steps(oracle, damped=damped)
    assert (ledger.forward == oracle.used).all()
    assert model.predict(oracle.candidates()).eq(1).all()
    return oracle.best_r.numpy(), oracle.used.copy()


def test_damped_moves_reach_the_apex_where_full_steps_crawl():
    """Each full step lands past the apex, Newton's way back gains little, and the rounds
    stop; shorter moves along the face reach the apex (radius 1)."""
    plain, _ = _wedge_run("l2", ())
    damped, _ = _wedge_run("l2", (0.5, 0.25, 0.125))
    assert (damped >= 1 - 1e-9).all()
    assert np.median(plain) > 1.2
    assert np.median(damped) < 1.06
    assert (damped <= plain + 1e-12).all()


def test_damped_moves_stay_off_where_they_were_not_measured_to_help():
    """Not under Linf, and not where a feature's difference read zero (as on a tree, whose
    differences mostly fall within one leaf): the same rows as without them."""
    for threat, d in (("linf", 2), ("l2", 3)):
        plain = _wedge_run(threat, (), d)
        damped = _wedge_run(threat, (0.5, 0.25, 0.125), d)
        assert np.array_equal(plain[0], damped[0]) and np.array_equal(plain[1], damped[1])


W = np.array([[1.0, 0.1, 0.1, 0.1], [0.1, 1.0, 0.1, 0.1]])  # classes 1 and 2
B = np.array([1.0, 0.5])
DUAL = {"l2": 2, "linf": 1}


def _three_planes() -> ProbaClassifier:
    """Three classes with linear logits ``(0, W_0 · x - 1, W_1 · x - 0.5)``, every feature in
    each: from the origin (class 0) the boundary with class ``j`` is ``B_j / ||W_j||_*``
    away, class 2's nearer than class 1's in every norm."""
    def proba(x):
        x = np.asarray(x, dtype=np.float64)
        z = np.concatenate([np.zeros((len(x), 1)), x @ W.T - B], axis=1)
        e = np.exp(z - z.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)
    return ProbaClassifier(proba, 3, (4,))


@pytest.mark.parametrize("threat", ["l2", "linf"])
@pytest.mark.parametrize("nearest", [True, False])
def test_the_linear_step_heads_for_the_nearest_class_not_the_runner_up(monkeypatch, threat,
                                                                        nearest):
    """From a counterexample of class 1 the boundary point lies on class 1's boundary, where
    class 1 is the runner-up; the nearest boundary from the input is class 2's. With
    NEAREST_CLASS, one round of the stage steps there (its radius and the 2% overshoot);
    with the runner-up's plane alone it stays at class 1's."""
    import robustscope.solvers.attacks.decision.linear_steps as linear_steps

    monkeypatch.setattr(linear_steps, "NEAREST_CLASS", nearest)
    oracle = _oracle(_three_planes(), 1, threat=threat)
    far = torch.tensor([[[3.0, 0.0, 0.0, 0.0]]], dtype=torch.float64)
    adv, _, _, _ = oracle.query(np.arange(1), far)
    assert adv.all() and float(oracle.best_r[0]) == 3.0
    boundary_steps(oracle, rounds=1)
    r = float(oracle.best_r[0])
    exact = B / np.linalg.norm(W, ord=DUAL[threat], axis=1)  # class 1's, class 2's
    assert exact[1] < exact[0] / 1.5
    if nearest:
        assert exact[1] * (1 - 1e-9) <= r <= exact[1] * 1.03
        assert int(oracle.model.predict(oracle.x + oracle.best_u)[0]) == 2
    else:
        assert exact[0] * (1 - 1e-9) <= r <= exact[0] * 1.03


def test_the_nearest_class_plane_reads_every_class_from_the_same_probes():
    """``query_scores`` returns every class's score, from which each class's boundary is
    linearised: the nearer one (class 2's) replaces the margin's gradient and value on the
    rows asked for, and the other rows keep theirs (where not every coordinate moved the
    margin the stage does not ask: a tree's)."""
    from robustscope.solvers.attacks.decision.linear_steps import nearest_class_plane

    oracle = _oracle(_three_planes(), 2)
    probes = torch.zeros(2, 5, 4, dtype=torch.float64)
    probes[:, :, 0] = 1.0  # the boundary point, on class 1's boundary, and its differences
    for j in range(4):
        probes[:, 1 + j, j] += 1e-3
    _, marg, u_valid, asked, scores = oracle.query_scores(np.arange(2), probes)
    assert asked.all() and scores.shape == (2, 5, 3) and torch.isfinite(scores).all()
    cols = torch.arange(4)
    moved = torch.full((2, 4), 1e-3, dtype=torch.float64)
    g = torch.ones(2, 4, dtype=torch.float64)
    base = marg[:, :1]
    where = torch.tensor([True, False])
    g2, base2 = nearest_class_plane(oracle, np.arange(2), scores, u_valid, cols, moved, g,
                                    base, where)
    # the first row takes class 2's plane: z_0 - z_2 = 0.5 - W_1 · x, gradient -W_1
    assert torch.allclose(g2[0], -torch.as_tensor(W[1]), atol=1e-6)
    assert torch.allclose(base2[0], torch.tensor([0.4], dtype=torch.float64))  # 0.5 - 0.1
    assert torch.equal(g2[1], g[1]) and torch.equal(base2[1], base[1])  # not asked to
