"""The exact linear radius over mixed-type features (a MILP per class on HiGHS) against brute
force: every value of the integer, binary and one-hot features enumerated, the real features'
part solved by an independent LP (scipy's linprog) or a 1-D closed form."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.optimize import linprog

from robustscope import FeatureSpace
from robustscope.search.engine import radius
from robustscope.solvers.exact.linear.closed_form import exact_linear_radius
from robustscope.threats import L1, L2, LINF

ORD = {"linf": np.inf, "l1": 1.0, "l2": 2.0}
NAMES = ["income", "debt", "age", "n_acc", "flag", "r_a", "r_b", "r_c"]


def _table(seed: int, relations: bool = True, n: int = 10):
    """Two real features (income, debt; ``debt <= income``), an immutable integer age, an
    integer count in 0..4, a binary flag and a 3-arm one-hot group; a 3-class linear model."""
    rng = np.random.default_rng(seed)
    space = FeatureSpace.from_arrays(
        [0, 0, 18, 0, 0, 0, 0, 0], [1, 1, 80, 4, 1, 1, 1, 1],
        types=["real", "real", "integer", "integer", "binary"] + ["categorical"] * 3,
        mutable=[True, True, False, True, True, True, True, True], names=NAMES,
        groups=[[5, 6, 7]])
    if relations:
        space = space.constrain(["debt <= income"])
    inc = rng.uniform(0, 1, n)
    X = np.column_stack([inc, inc * rng.uniform(0, 1, n), rng.integers(18, 81, n),
                         rng.integers(0, 5, n), rng.integers(0, 2, n),
                         np.eye(3)[rng.integers(0, 3, n)]]).astype(float)
    W = rng.normal(size=(3, 8))
    W[:, 2] *= 0.05
    return space, X, W, rng.normal(size=3)


def _brute_force(space, X, W, b, p, relations):
    """Per input: min over every valid (n_acc, flag, arm) and class of the norm, the real
    part (income, debt) solved by linprog (Linf / L1 epigraphs)."""
    out = []
    for x in X:
        z = W @ x + b
        y = int(z.argmax())
        best = math.inf
        for n_acc, flag, arm in itertools.product(range(5), range(2), range(3)):
            xd = x.copy()
            xd[3], xd[4], xd[5:8] = n_acc, flag, np.eye(3)[arm]
            dn = np.linalg.norm((xd - x) / space.scale, ord=p)
            for j in set(range(3)) - {y}:
                c = W[j] - W[y]
                need = z[y] - z[j] - c @ (xd - x)  # what the real features must still gain
                a_ub, b_ub = [[-c[0], -c[1]]], [-need]
                if relations:  # debt + e1 <= income + e0
                    a_ub.append([-1.0, 1.0])
                    b_ub.append(x[0] - x[1])
                box = [(-x[k], 1 - x[k]) for k in range(2)]
                if p == np.inf:
                    cost = [0, 0, 1]
                    rows = [r + [0] for r in a_ub] + [[1, 0, -1], [-1, 0, -1], [0, 1, -1],
                                                      [0, -1, -1]]
                    bounds = box + [(0, None)]
                else:
                    cost = [0, 0, 1, 1]
                    rows = [r + [0, 0] for r in a_ub] + [[1, 0, -1, 0], [-1, 0, -1, 0],
                                                         [0, 1, 0, -1], [0, -1, 0, -1]]
                    bounds = box + [(0, None)] * 2
                res = linprog(cost, A_ub=rows, b_ub=b_ub + [0] * 4, bounds=bounds,
                              method="highs")
                if res.status == 0:
                    best = min(best, max(dn, res.fun) if p == np.inf else dn + res.fun)
        out.append(best)
    return np.array(out)


@pytest.mark.parametrize("relations", [True, False])
@pytest.mark.parametrize("threat", [LINF, L1])
def test_mixed_types_match_brute_force(threat, relations):
    for seed in range(2):
        space, X, W, b = _table(seed, relations, n=8)
        y = (X @ W.T + b).argmax(1)
        out = exact_linear_radius(W, b, X, y, space, threat)
        ref = _brute_force(space, X, W, b, ORD[threat.name], relations)
        finite = np.isfinite(ref)
        assert np.array_equal(np.isfinite(out.radius), finite)
        assert np.allclose(out.radius[finite], ref[finite], rtol=1e-7, atol=1e-10)
        assert (out.status[finite] == "exact").all()
        assert (out.lower_bound <= out.radius).all()
        assert (out.lower_bound[finite] >= ref[finite] * (1 - 1e-7)).all()
        x_adv = out.x_adv.numpy()
        space.check_data(x_adv)  # integers integral, binary 0/1, one-hot, in bounds
        assert np.array_equal(x_adv[:, 2], X[:, 2])  # the immutable age
        assert space.relations_hold(x_adv).all()
        assert ((x_adv @ W.T + b).argmax(1)[finite] != y[finite]).all()


def test_l2_with_integers_matches_brute_force():
    """L2 through tangent cuts: one real feature (a 1-D closed form) beside an integer, a
    binary and a one-hot group, enumerated."""
    rng = np.random.default_rng(7)
    space = FeatureSpace.from_arrays([0, 0, 0, 0, 0, 0], [1, 6, 1, 1, 1, 1],
                                     types=["real", "integer", "binary"] + ["categorical"] * 3,
                                     groups=[[3, 4, 5]])
    n = 12
    X = np.column_stack([rng.uniform(0, 1, n), rng.integers(0, 7, n), rng.integers(0, 2, n),
                         np.eye(3)[rng.integers(0, 3, n)]]).astype(float)
    W, b = rng.normal(size=(3, 6)), rng.normal(size=3)
    y = (X @ W.T + b).argmax(1)
    out = exact_linear_radius(W, b, X, y, space, L2)
    ref = np.full(n, np.inf)
    for i, x in enumerate(X):
        z = W @ x + b
        for k, flag, arm in itertools.product(range(7), range(2), range(3)):
            xd = x.copy()
            xd[1], xd[2], xd[3:] = k, flag, np.eye(3)[arm]
            dn2 = float(np.sum(((xd - x) / space.scale) ** 2))
            for j in set(range(3)) - {int(y[i])}:
                c = W[j] - W[y[i]]
                need = z[y[i]] - z[j] - c @ (xd - x)
                if need < 0:
                    e = 0.0
                elif c[0] != 0 and 0 <= x[0] + need / c[0] <= 1:
                    e = need / c[0]
                else:
                    continue
                ref[i] = min(ref[i], math.sqrt(dn2 + e ** 2))
    finite = np.isfinite(ref)
    assert np.array_equal(np.isfinite(out.radius), finite)
    assert np.allclose(out.radius[finite], ref[finite], rtol=1e-6)
    assert (out.status[finite] == "exact").all()
    assert (out.lower_bound[finite] >= ref[finite] * (1 - 1e-6)).all()


@pytest.mark.parametrize("threat", ["linf", "l1"])
def test_affine_pipeline_on_a_mixed_table_is_exact(threat):
    """A scaler + logistic regression on the typed table: ``radius`` keeps status ``exact``
    for every input, each counterexample valid and confirmed by the model."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    space, X, _, _ = _table(0)
    train = np.vstack([_table(s, n=20)[1] for s in range(10, 30)])
    labels = (train[:, 0] - 2 * train[:, 1] + 0.3 * train[:, 3] + train[:, 5] > 0.5).astype(int)
    model = make_pipeline(StandardScaler(), LogisticRegression()).fit(train, labels)
    res = radius(model, X, model.predict(X), space=space, threat=threat)
    assert res.meta["exact_solver"] == "linear"
    assert (res.status == "exact").all()
    space.check_data(res.x_adv)
    assert space.relations_hold(res.x_adv).all()
    assert (model.predict(res.x_adv) != model.predict(X)).all()


def test_summary_notes_say_which_solver_ran_and_why():
    """The exact linear solver's program for each space, and the attack cascade where the
    exact solver does not take the statement."""
    from sklearn.linear_model import LogisticRegression

    from robustscope import Statement

    space, X, _, _ = _table(0)
    train = np.vstack([_table(s, n=20)[1] for s in range(10, 20)])
    labels = (train[:, 0] - 2 * train[:, 1] + train[:, 5] > 0.3).astype(int)
    binary = LogisticRegression(max_iter=1000).fit(train, labels)
    res = radius(binary, X, binary.predict(X), space=space)
    assert any("MILP per class" in n and "integer" in n and "one-hot" in n for n in res.notes)
    real = FeatureSpace.from_arrays(space.lower, space.upper, names=NAMES).constrain(
        ["debt <= income"])
    res = radius(binary, X, binary.predict(X), space=real)
    assert any("LP / QP per class" in n for n in res.notes)
    res = radius(binary, X, binary.predict(X), space=real.unconstrained())
    assert res.notes == []
    three = LogisticRegression(max_iter=1000).fit(train, np.digitize(train[:, 0], [0.3, 0.6]))
    keep = three.predict(X) != 2
    res = radius(three, X[keep][:2], three.predict(X[keep][:2]), space=space,
                 statement=Statement(target=2), budget=300)
    assert any("exact-linear skipped" in n for n in res.notes)
    assert any("continuous relaxation" in n for n in res.notes)


def test_command_line_on_a_typed_table_is_exact_and_says_why(tmp_path):
    """The validator's setting of issue 40: a scaler + logistic regression saved with skops,
    a feature file with an immutable integer, an integer, a binary, a one-hot group and a
    relation; ``robustscope radius`` gives every input status ``exact`` and its summary says
    which program ran."""
    import pandas as pd
    import skops.io as sio
    import yaml
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from typer.testing import CliRunner

    from robustscope.cli.app import app

    _, X, _, _ = _table(0)
    train = np.vstack([_table(s, n=20)[1] for s in range(10, 30)])
    labels = (train[:, 0] - 2 * train[:, 1] + 0.3 * train[:, 3] + train[:, 5] > 0.5).astype(int)
    model = make_pipeline(StandardScaler(), LogisticRegression()).fit(train, labels)
    sio.dump(model, tmp_path / "lr.skops")
    frame = pd.DataFrame(X, columns=NAMES)
    frame["label"] = model.predict(X)
    frame.to_csv(tmp_path / "data.csv", index=False)
    spec = {"features": [
        {"name": "income", "lower": 0, "upper": 1}, {"name": "debt", "lower": 0, "upper": 1},
        {"name": "age", "lower": 18, "upper": 80, "type": "integer", "mutable": False},
        {"name": "n_acc", "lower": 0, "upper": 4, "type": "integer"},
        {"name": "flag", "lower": 0, "upper": 1, "type": "binary"}]
        + [{"name": n, "lower": 0, "upper": 1, "type": "categorical", "group": "r"}
           for n in ("r_a", "r_b", "r_c")],
        "constraints": ["debt <= income"]}
    (tmp_path / "features.yaml").write_text(yaml.safe_dump(spec))
    out = tmp_path / "radii.csv"
    result = CliRunner().invoke(app, [
        "radius", "--model", str(tmp_path / "lr.skops"), "--data", str(tmp_path / "data.csv"),
        "--features", str(tmp_path / "features.yaml"), "--threat", "linf", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert (pd.read_csv(out)["status"] == "exact").all()
    assert "exact-linear: a MILP per class on HiGHS" in " ".join(result.output.split())
