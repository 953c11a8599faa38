"""The exact projection onto the L1 ball ∩ box (``threats.lp.project_l1_box``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from robustscope.threats.lp import project_l1_ball, project_l1_box


def _t(a) -> torch.Tensor:
    return torch.as_tensor(np.asarray(a, dtype=np.float64))


def _reference(u: np.ndarray, eps: float, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """One row by bisection on the threshold of the prox form (float64, 200 halvings): an
    independent way to the same KKT point."""
    def at(theta: float) -> np.ndarray:
        return np.clip(np.sign(u) * np.maximum(np.abs(u) - theta, 0.0), lo, hi)

    if np.abs(at(0.0)).sum() <= eps:
        return at(0.0)
    a, b = 0.0, float(np.abs(u).max())
    for _ in range(200):
        mid = 0.5 * (a + b)
        a, b = (mid, b) if np.abs(at(mid)).sum() > eps else (a, mid)
    return at(b)


def _random_case(rng: np.random.Generator, n: int, d: int):
    u = rng.normal(size=(n, d)) * rng.choice([0.1, 1.0, 5.0], size=(n, 1))
    lo = -rng.uniform(0, 2, size=(n, d)) * (rng.uniform(size=(n, d)) < 0.8)
    hi = rng.uniform(0, 2, size=(n, d)) * (rng.uniform(size=(n, d)) < 0.8)
    eps = rng.uniform(0, 3, size=n)
    return u, eps, lo, hi


def test_matches_bisection_reference():
    rng = np.random.default_rng(0)
    u, eps, lo, hi = _random_case(rng, 200, 12)
    got = project_l1_box(_t(u), _t(eps), _t(lo), _t(hi)).numpy()
    want = np.stack([_reference(u[i], eps[i], lo[i], hi[i]) for i in range(len(u))])
    np.testing.assert_allclose(got, want, atol=1e-10)


def test_matches_a_generic_qp_solver():
    """SLSQP on ``min ||v - u||^2`` with ``v = p - q``, ``p, q >= 0`` (the L1 norm linear)."""
    rng = np.random.default_rng(1)
    u, eps, lo, hi = _random_case(rng, 8, 6)
    got = project_l1_box(_t(u), _t(eps), _t(lo), _t(hi)).numpy()
    d = u.shape[1]
    for i in range(len(u)):
        def obj(z, i=i):
            return float(((z[:d] - z[d:] - u[i]) ** 2).sum())

        def jac(z, i=i):
            g = 2 * (z[:d] - z[d:] - u[i])
            return np.concatenate([g, -g])

        bounds = [(0, hi[i, j]) for j in range(d)] + [(0, -lo[i, j]) for j in range(d)]
        cons = [{"type": "ineq", "fun": lambda z, i=i: eps[i] - z.sum(),
                 "jac": lambda z: -np.ones_like(z)}]
        res = minimize(obj, np.zeros(2 * d), jac=jac, bounds=bounds, constraints=cons,
                       method="SLSQP", options={"ftol": 1e-12, "maxiter": 500})
        v = np.clip(res.x[:d] - res.x[d:], lo[i], hi[i])  # SLSQP may stray by rounding
        assert ((got[i] - u[i]) ** 2).sum() <= ((v - u[i]) ** 2).sum() + 1e-9
        np.testing.assert_allclose(got[i], v, atol=1e-5)


def test_kkt_conditions_hold():
    """v_i = clip(soft(u_i, theta)) for one theta >= 0 per row, and theta > 0 only where the
    L1 constraint is tight."""
    rng = np.random.default_rng(2)
    u, eps, lo, hi = _random_case(rng, 100, 9)
    v = project_l1_box(_t(u), _t(eps), _t(lo), _t(hi)).numpy()
    for i in range(len(u)):
        moved = (np.abs(v[i]) > 1e-12) & (v[i] > lo[i] + 1e-12) & (v[i] < hi[i] - 1e-12)
        shrink = np.abs(u[i]) - np.abs(v[i])
        if moved.any():
            theta = shrink[moved]
            assert np.ptp(theta) < 1e-9  # the same threshold on every free coordinate
            assert theta[0] >= -1e-12
            if theta[0] > 1e-9:
                assert abs(np.abs(v[i]).sum() - eps[i]) < 1e-9
        assert (np.sign(v[i]) * np.sign(u[i]) >= 0).all()


def test_feasible_and_idempotent():
    rng = np.random.default_rng(3)
    u, eps, lo, hi = (_t(a) for a in _random_case(rng, 300, 20))
    v = project_l1_box(u, eps, lo, hi)
    assert (v.abs().sum(1) <= eps * (1 + 1e-12) + 1e-12).all()
    assert (v >= lo).all() and (v <= hi).all()
    torch.testing.assert_close(project_l1_box(v, eps, lo, hi), v, atol=1e-12, rtol=0)


def test_edge_cases():
    u = _t([[0.5, -2.0, 3.0, 0.0], [0.1, -0.1, 0.2, 0.0], [4.0, 1.0, -1.0, 2.0]])
    lo = _t([[-1.0, -1.0, 0.0, -1.0], [-1.0] * 4, [0.0, -1.0, -1.0, 0.0]])
    hi = _t([[1.0, 1.0, 0.0, 1.0], [1.0] * 4, [0.0, 1.0, 1.0, 0.0]])
    # eps = 0: the origin
    zero = project_l1_box(u, torch.zeros(3, dtype=u.dtype), lo, hi)
    assert torch.equal(zero.abs(), torch.zeros_like(u))
    # already inside: unchanged
    eps = _t([10.0, 1.0, 10.0])
    out = project_l1_box(u, eps, lo, hi)
    torch.testing.assert_close(out[1], u[1])
    # a zero-width coordinate (lo = hi = 0, immutable) stays 0 whatever u says
    assert out[0, 2] == 0 and out[2, 0] == 0 and out[2, 3] == 0
    # box only active (eps large): plain clip
    torch.testing.assert_close(out[0], _t([0.5, -1.0, 0.0, 0.0]))
    # an infinite radius: the box alone
    free = project_l1_box(u, torch.full((3,), float("inf"), dtype=u.dtype), lo, hi)
    torch.testing.assert_close(free, torch.minimum(torch.maximum(u, lo), hi))
    # a coordinate far outside its box keeps its cap while the threshold is below |u| - cap
    row = project_l1_box(_t([[5.0, 0.5]]), _t([1.2]), _t([[-1.0, -1.0]]), _t([[1.0, 1.0]]))
    torch.testing.assert_close(row, _t([[1.0, 0.2]]))


def test_infinite_box_is_the_l1_ball():
    rng = np.random.default_rng(4)
    u = _t(rng.normal(size=(50, 30)))
    eps = _t(rng.uniform(0, 5, size=50))
    inf = torch.full_like(u, float("inf"))
    torch.testing.assert_close(project_l1_box(u, eps, -inf, inf), project_l1_ball(u, eps),
                               atol=1e-10, rtol=0)


def test_float32_and_device_of_the_input():
    rng = np.random.default_rng(5)
    u, eps, lo, hi = (torch.as_tensor(a, dtype=torch.float32)
                      for a in _random_case(rng, 20, 40))
    v = project_l1_box(u, eps, lo, hi)
    assert v.dtype == torch.float32 and v.device == u.device
    assert (v.abs().sum(1) <= eps * (1 + 1e-5) + 1e-6).all()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_on_cuda_matches_cpu():
    rng = np.random.default_rng(6)
    u, eps, lo, hi = (_t(a) for a in _random_case(rng, 64, 100))
    got = project_l1_box(u.cuda(), eps.cuda(), lo.cuda(), hi.cuda())
    assert got.is_cuda
    torch.testing.assert_close(got.cpu(), project_l1_box(u, eps, lo, hi), atol=1e-12, rtol=0)


_row = st.integers(1, 8).flatmap(lambda d: st.tuples(
    st.lists(st.floats(-5, 5), min_size=d, max_size=d),
    st.lists(st.floats(0, 3), min_size=d, max_size=d),
    st.lists(st.floats(0, 3), min_size=d, max_size=d),
    st.floats(0, 6),
    st.lists(st.floats(0, 1), min_size=d, max_size=d),
))


@settings(max_examples=200, deadline=None)
@given(_row)
def test_projection_is_the_closest_feasible_point(case):
    u, lo_mag, hi_mag, eps, mix = (np.asarray(a, dtype=np.float64) for a in case)
    lo, hi = -lo_mag, hi_mag
    v = project_l1_box(_t([u]), _t([eps]), _t([lo]), _t([hi])).numpy()[0]
    assert np.abs(v).sum() <= eps + 1e-9 and (v >= lo).all() and (v <= hi).all()
    # a feasible w: a point of the box, shrunk into the ball
    w = lo + mix * (hi - lo)
    norm = np.abs(w).sum()
    if norm > eps:
        w = w * (eps / norm)
    assert np.linalg.norm(u - v) <= np.linalg.norm(u - w) + 1e-9
    assert float(np.dot(u - v, w - v)) <= 1e-9
