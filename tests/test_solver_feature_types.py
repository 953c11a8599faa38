"""Every candidate of the gradient-free solvers satisfies the feature space: bounds, integer
and binary values, one-hot groups, immutable features (property test over random spaces)."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from robustscope.core.space import FeatureSpace
from robustscope.models.blackbox import ProbaClassifier
from robustscope.solvers.attacks.decision.cube_search import cube_search
from robustscope.solvers.attacks.decision.gradient_free import gradient_free
from robustscope.solvers.attacks.decision.hop_skip_jump import hop_skip_jump
from robustscope.solvers.attacks.decision.step_down import step_down_search


@st.composite
def problems(draw):
    n_real = draw(st.integers(1, 4))
    n_int = draw(st.integers(0, 3))
    n_bin = draw(st.integers(0, 2))
    group = draw(st.sampled_from([0, 3]))
    seed = draw(st.integers(0, 10_000))
    rng = np.random.default_rng(seed)
    d = n_real + n_int + n_bin + group
    types = ["real"] * n_real + ["integer"] * n_int + ["binary"] * n_bin + ["categorical"] * group
    lower = np.r_[rng.uniform(-5, 0, n_real), rng.integers(-5, 0, n_int), np.zeros(n_bin + group)]
    upper = np.r_[rng.uniform(1, 5, n_real), rng.integers(1, 6, n_int), np.ones(n_bin + group)]
    mutable = rng.random(d) < 0.75
    groups = [np.arange(d - group, d)] if group else []
    space = FeatureSpace.from_arrays(lower, upper, types=types, mutable=mutable, groups=groups)
    n = 4
    x = rng.uniform(lower, upper, size=(n, d))
    x[:, n_real:n_real + n_int] = np.round(x[:, n_real:n_real + n_int])
    x[:, n_real + n_int:n_real + n_int + n_bin] = rng.integers(0, 2, (n, n_bin))
    if group:
        x[:, d - group:] = np.eye(group)[rng.integers(0, group, n)]
    w = rng.normal(size=(3, d))

    def proba(a):
        z = a @ w.T
        e = np.exp(z - z.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    threat = draw(st.sampled_from(["linf", "l2"]))
    return ProbaClassifier(proba, 3, (d,)), space, torch.as_tensor(x), threat, seed


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(), st.sampled_from(["hsj", "cube", "step", "cascade"]))
def test_candidates_respect_feature_types(problem, solver):
    model, space, x, threat, seed = problem
    y = model.predict(x)
    fn = {"hsj": hop_skip_jump, "cube": cube_search, "step": step_down_search,
          "cascade": gradient_free}[solver]
    run = fn(model, x, y, space, threat, budget=150, generator=torch.Generator().manual_seed(seed))
    cand = run.x_adv.numpy()
    space.check_data(cand, "candidates")  # bounds, integers, binaries, one-hot groups
    frozen = ~space.mutable
    assert np.array_equal(cand[:, frozen], x.numpy()[:, frozen])
    found = run.found
    assert (model.predict(run.x_adv).numpy()[found] != y.numpy()[found]).all()
    assert (run.forward_queries <= 150).all()
    # sizes are measured on the projected candidate the model saw
    u = space.scaled_delta(run.x_adv, x)
    norm = torch.linalg.vector_norm(u, ord=float("inf") if threat == "linf" else 2, dim=1)
    assert np.allclose(norm.numpy()[found], run.radius[found])


def test_integer_feature_radius_is_exact_on_the_lattice():
    """One integer feature in [0, 10] (scale 10) and a real one that cannot help: the model
    flips at k >= 6, so from k = 3 the radius is exactly 0.3, never a fraction of a step."""
    space = FeatureSpace.from_arrays([0, 0], [10, 1], types=["integer", "real"])

    def proba(a):
        p1 = 1 / (1 + np.exp(-(a[:, 0] - 5.5) * 4 - 0.01 * a[:, 1]))
        return np.stack([1 - p1, p1], axis=1)

    model = ProbaClassifier(proba, 2, (2,))
    x = torch.tensor([[3.0, 0.5], [1.0, 0.2]], dtype=torch.float64)
    y = model.predict(x)
    exact = np.array([0.3, 0.5])
    for fn in (hop_skip_jump, cube_search, step_down_search):
        run = fn(model, x, y, space, "linf", budget=800)
        # never below the lattice radius; above it only by the solver's tolerance (1%)
        assert (run.radius >= exact - 1e-12).all() and (run.radius <= exact * 1.01).all()
        assert np.array_equal(run.x_adv[:, 0].numpy(), [6.0, 6.0])
