"""Every candidate of the gradient-free solvers satisfies the feature space: bounds, integer
and binary values, one-hot groups, immutable features (property test over random spaces)."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from robustscope.models.blackbox import ProbaClassifier
from robustscope.solvers.boundary import hop_skip_jump_run
from robustscope.solvers.random_search import cube_search_run
from robustscope.space import FeatureSpace


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
@given(problems(), st.sampled_from(["hsj", "cube"]))
def test_candidates_respect_feature_types(problem, solver):
    model, space, x, threat, seed = problem
    y = model.predict(x)
    fn = {"hsj": hop_skip_jump_run, "cube": cube_search_run}[solver]
    run = fn(model, x, y, space, threat, budget=150, generator=torch.Generator().manual_seed(seed))
    cand = run.x_adv.numpy()
    space.check_data(cand, "candidates")  # bounds, integers, binaries, one-hot groups
    frozen = ~space.mutable
    assert np.array_equal(cand[:, frozen], x.numpy()[:, frozen])
    found = run.found
    assert (model.predict(run.x_adv).numpy()[found] != y.numpy()[found]).all()
    assert (run.queries <= 150).all()
