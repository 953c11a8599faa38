"""Relations between features: parsing, projection, verification, exact LP, clean inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from robustscope import radius
from robustscope.core.errors import FeatureSpaceError, InputError
from robustscope.core.relations import Relations, parse_constraint
from robustscope.core.space import FeatureSpace
from robustscope.solvers.exact.linear.closed_form import exact_linear_radius
from robustscope.threats import get_threat

NAMES = ["income", "debt", "savings", "total"]


def credit_like(n: int = 120, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Rows with debt <= 0.6 income and total == debt + savings; label from the debt ratio."""
    rng = np.random.default_rng(seed)
    income = rng.uniform(20, 100, n)
    debt = rng.uniform(0.3, 0.6, n) * income
    savings = rng.uniform(0, 50, n)
    X = np.c_[income, debt, savings, debt + savings]
    y = (debt / income + rng.normal(0, 0.05, n) > 0.45).astype(int)
    return X, y


def constrained_space(X: np.ndarray) -> FeatureSpace:
    return FeatureSpace.from_data(X, names=NAMES).constrain(
        ["debt <= 0.6 * income", "debt + savings == total"])


# -- parsing --------------------------------------------------------------------------------
def test_parse_rows_chains_and_quoted_names():
    names = ["a", "b", "late payments"]
    rows = parse_constraint("0 <= `late payments` <= 2 * a - b / 4 + 1", names)
    assert [r[0] for r in rows] == ["<=", "<="]
    np.testing.assert_allclose(rows[0][1], [0, 0, -1])
    assert rows[0][2] == 0
    np.testing.assert_allclose(rows[1][1], [-2, 0.25, 1])
    assert rows[1][2] == 1
    (kind, coef, rhs), = parse_constraint("a + b == 3 * (a - 1)", names)
    assert kind == "==" and rhs == -3
    np.testing.assert_allclose(coef, [-2, 1, 0])
    (kind, coef, rhs), = parse_constraint("a >= b", names)
    np.testing.assert_allclose(coef, [-1, 1, 0])


@pytest.mark.parametrize("text, message", [
    ("debt <= 0.6 * salary", "unknown feature 'salary'"),
    ("debt * income <= 3", "not linear"),
    ("debt / income <= 3", "not linear"),
    ("debt < income", "strict"),
    ("__import__('os').system('true') <= 1", "is not allowed"),
    ("debt", "comparison"),
    ("2 <= 3", "names no feature"),
    ("debt <=", "not a valid expression"),
])
def test_parse_errors_name_the_constraint(text, message):
    with pytest.raises(FeatureSpaceError) as err:
        parse_constraint(text, NAMES)
    assert message in str(err.value) and text.strip() in str(err.value)


def test_yaml_constraints_and_arrays_and_predicate(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text("default: {lower: 0, upper: 200}\n"
                    "constraints:\n  - debt <= 0.6 * income\n  - debt + savings == total\n")
    space = FeatureSpace.from_yaml(path, 4, names=NAMES)
    rel = space.relations
    assert rel.A.shape == (1, 4) and rel.C.shape == (1, 4)
    assert rel.labels_ub == ["debt <= 0.6 * income"]
    path.write_text("constraints:\n  - debt <= wage\n")
    with pytest.raises(FeatureSpaceError, match="space.yaml.*'debt <= wage'.*'wage'"):
        FeatureSpace.from_yaml(path, 4, names=NAMES)
    same = space.unconstrained().constrain(
            inequalities=(np.array([[-0.6, 1, 0, 0]]), np.array([0.0])),
            equalities=(np.array([[0, 1, 1, -1]]), np.array([0.0])),
            valid=lambda X: X[:, 0] > 25)
    X = np.array([[50, 30, 5, 35], [50, 31, 5, 36], [50, 30, 5, 36], [20, 10, 0, 10.0]])
    np.testing.assert_array_equal(space.relations_hold(X), [True, False, False, True])
    np.testing.assert_array_equal(same.relations_hold(X), [True, False, False, False])
    broken = dict(same.relations.broken(X))
    assert list(broken["valid(X)"]) == [3]
    with pytest.raises(InputError, match="inequalities"):
        space.constrain(inequalities=(np.ones((1, 3)), [0.0]))


# -- projection -----------------------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000))
def test_projection_lands_in_box_and_relations(seed):
    rng = np.random.default_rng(seed)
    X, _ = credit_like(20, seed=seed % 7)
    space = FeatureSpace.from_data(X, names=NAMES, immutable=["income"]).constrain(
        ["debt <= 0.6 * income", "debt + savings == total", "savings <= 2 * debt"])
    X = X[space.relations_hold(X)]
    x = torch.as_tensor(X)
    cand = x + torch.as_tensor(rng.normal(0, 30, X.shape))
    p = space.project(cand, x).numpy()
    assert space.relations_hold(p).all()
    assert (p >= space.lower - 1e-9).all() and (p <= space.upper + 1e-9).all()
    np.testing.assert_array_equal(p[:, 0], X[:, 0])  # immutable income


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.01, 0.3))
def test_linf_proposals_stay_in_their_ball_through_the_relations(seed, radius_):
    """The black-box oracle holds the relations' projection in each proposal's Linf ball:
    without ``within`` the projection moves real features out of it (total follows debt)."""
    from robustscope.solvers.attacks.decision.scaled_oracle import ScaledOracle

    rng = np.random.default_rng(seed)
    X, _ = credit_like(12, seed=seed % 5)
    space = constrained_space(X)
    x = torch.as_tensor(X[space.relations_hold(X)])
    oracle = ScaledOracle(None, x, torch.zeros(len(x), dtype=torch.long), space,
                          get_threat("linf"))
    # vertices of the ball: every feature at +-r, which the equality cannot keep
    u = torch.as_tensor(rng.choice([-1.0, 1.0], (len(x), 3, 4)) * radius_)
    u_valid, x_valid = oracle.project(np.arange(len(x)), u)
    norms = u_valid.abs().amax(dim=2)
    assert (norms <= u.abs().amax(dim=2) * (1 + 1e-9) + 1e-12).all()
    assert space.relations_hold(x_valid.numpy()).all()
    flat = x.repeat_interleave(3, dim=0)
    loose = (space.project(flat + u.reshape(-1, 4) * oracle.scale, flat) - flat) / oracle.scale
    assert (loose.abs().amax(dim=1) > radius_ * (1 + 1e-6)).any()  # what the ball prevents


def test_projection_keeps_integers_and_one_hot():
    # late <= payments over integers, a one-hot group that a relation reads
    names = ["payments", "late", "debt", "g0", "g1"]
    X = np.array([[10, 2, 5.0, 1, 0], [20, 5, 8.0, 0, 1], [15, 0, 1.0, 1, 0]])
    space = FeatureSpace.from_arrays(
        [0, 0, 0, 0, 0], [30, 30, 20, 1, 1], types=["integer", "integer", "real",
                                                    "categorical", "categorical"],
        names=names, groups=[[3, 4]]).constrain(["late <= payments", "debt <= 10 + 5 * g1"])
    rng = np.random.default_rng(1)
    x = torch.as_tensor(X)
    for _ in range(20):
        cand = x + torch.as_tensor(rng.normal(0, 8, X.shape))
        p = space.project(cand, x).numpy()
        assert space.relations_hold(p).all()
        space.check_data(p)  # integral, in bounds, one-hot


# -- the verifier and every search path -------------------------------------------------------
def test_counterexamples_satisfy_relations_on_every_path():
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier

    X, y = credit_like()
    space = constrained_space(X)
    lr = LogisticRegression(max_iter=2000).fit(X, y)
    mlp = MLPClassifier((8,), max_iter=300, random_state=0).fit(X / 100, y)

    class BlackBox:  # predict_proba only: the gradient-free cascade
        def predict_proba(self, Z):
            return lr.predict_proba(np.asarray(Z))

    runs = [(lr, "exact", 15), (lr, "pgd", 15), (lr, "minnorm", 15), (BlackBox(), "auto", 4)]
    for model, solver, n in runs:
        res = radius(model, X[:n], y[:n], space=space, solver=solver, threat="linf",
                     budget=600 if solver == "auto" else None)
        assert res.found.sum() >= n - 2, solver
        assert space.relations_hold(res.x_adv[res.found]).all(), solver
    space_mlp = FeatureSpace.from_data(X / 100, names=NAMES).constrain(
        ["debt <= 0.6 * income", "debt + savings == total"])
    res = radius(mlp, X[:6] / 100, y[:6], space=space_mlp, threat="l2")
    assert space_mlp.relations_hold(res.x_adv[res.found]).all()


def test_relations_raise_radii_and_exact_matches_independent_lp():
    from sklearn.linear_model import LogisticRegression

    X, y = credit_like()
    space = constrained_space(X)
    lr = LogisticRegression(max_iter=2000).fit(X, y)
    w = np.vstack([-lr.coef_[0], lr.coef_[0]]) / 2
    b = np.array([-lr.intercept_[0], lr.intercept_[0]]) / 2
    pred = lr.predict(X[:20])
    free = exact_linear_radius(w, b, X[:20], pred, space.unconstrained(), get_threat("linf"))
    for p in ("linf", "l1"):
        res = exact_linear_radius(w, b, X[:20], pred, space, get_threat(p))
        assert space.relations_hold(res.x_adv[res.found]).all()
        for i in range(20):
            assert math.isclose(res.radius[i], _independent_lp(w, b, X[i], pred[i], space, p),
                                rel_tol=1e-6, abs_tol=1e-9)
    grown = exact_linear_radius(w, b, X[:20], pred, space, get_threat("linf")).radius
    assert (grown >= free.radius * (1 - 1e-9)).all() and (grown > free.radius * 1.01).any()
    l2 = exact_linear_radius(w, b, X[:20], pred, space, get_threat("l2"))
    assert space.relations_hold(l2.x_adv[l2.found]).all()
    assert (l2.radius >= exact_linear_radius(w, b, X[:20], pred, space,
                                             get_threat("linf")).radius * (1 - 1e-9)).all()


def _independent_lp(w, b, x0, yi, space, p):
    """The radius in raw units with scipy's linprog (x' and |x' - x| / scale as variables)."""
    d = len(x0)
    j = 1 - yi
    g = w[j] - w[yi]
    rel = space.relations
    s = space.scale
    k = 1 if p == "linf" else d
    # variables: x' (d), t (k)
    c = np.r_[np.zeros(d), np.ones(k)]
    T = np.ones((d, 1)) if k == 1 else np.eye(d)
    A_ub = [np.r_[-g, np.zeros(k)][None, :], np.c_[np.diag(1 / s), -T], np.c_[-np.diag(1 / s), -T],
            np.c_[rel.A, np.zeros((len(rel.b), k))]]
    margin = (w[yi] - w[j]) @ x0 + b[yi] - b[j]
    b_ub = np.r_[b[j] - b[yi] - margin * 1e-9, x0 / s, -x0 / s, rel.b]
    A_eq = np.c_[rel.C, np.zeros((len(rel.d), k))]
    bounds = [(lo, hi) for lo, hi in zip(space.lower, space.upper, strict=True)] + [(0, None)] * k
    out = linprog(c, A_ub=np.vstack(A_ub), b_ub=b_ub, A_eq=A_eq, b_eq=rel.d, bounds=bounds,
                  method="highs")
    return out.fun if out.status == 0 else math.inf


# -- clean inputs that break a relation -------------------------------------------------------
def test_invalid_clean_inputs_error_or_status():
    from sklearn.linear_model import LogisticRegression

    X, y = credit_like(40)
    space = constrained_space(X)
    lr = LogisticRegression(max_iter=2000).fit(X, y)
    X = X.copy()
    X[[3, 7], 1] = X[[3, 7], 0] * 0.59
    X[7, 3] = X[7, 1] + X[7, 2] + 1  # total no longer the sum
    X[[3, 7], 1] = X[[3, 7], 0] * 0.7  # debt above 0.6 income
    with pytest.raises(InputError) as err:
        radius(lr, X, y, space=space)
    text = str(err.value)
    assert "'debt <= 0.6 * income'" in text and "3, 7" in text
    assert "'debt + savings == total'" in text
    res = radius(lr, X, y, space=space, invalid="status")
    assert list(np.flatnonzero(res.status == "invalid")) == [3, 7]
    assert np.isnan(res.radius[[3, 7]]).all() and not res.found[[3, 7]].any()
    assert res.queries[[3, 7]].sum() == 0
    assert np.isfinite(res.robust_accuracy(0.01)).all()
    with pytest.raises(InputError, match="invalid"):
        radius(lr, X, y, space=space, invalid="skip")


def test_verifier_rejects_without_a_query():
    from sklearn.linear_model import LogisticRegression

    from robustscope.core.statement import DECISION_CHANGE
    from robustscope.models.base import QueryLedger
    from robustscope.models.wrap import wrap_model
    from robustscope.search.verify import Verifier

    X, y = credit_like(30)
    lr = LogisticRegression(max_iter=2000).fit(X, y)
    rel = Relations.build(NAMES, valid=lambda Z: Z[:, 2] < 40)
    space = FeatureSpace.from_data(X, names=NAMES)
    space = FeatureSpace(space.lower, space.upper, space.scale, space.types, space.mutable,
                         space.names, relations=rel)
    keep = space.relations_hold(X)
    X, y = X[keep][:2], y[keep][:2]
    model = wrap_model(lr, example=X)
    ledger = QueryLedger(2, None)
    x = torch.as_tensor(X)
    logits = model.logits(x).detach().double()
    ver = Verifier(model, space, get_threat("linf"), DECISION_CHANGE, ledger, x,
                   torch.as_tensor(lr.predict(X)), np.arange(2), logits,
                   torch.zeros(2, dtype=torch.bool))
    cand = x.clone()
    cand[:, 2] = 45.0  # breaks the predicate
    assert not ver.check(torch.arange(2), cand).any()
    assert ledger.forward.sum() == 0 and ver.rejected.tolist() == [1, 1]


# -- what the relations change: scores, the run summary and the report -------------------------
RUN_SPEC = """\
name: relations
seed: 0
model: {builtin: breast-cancer-logreg}
data: {builtin: breast-cancer, limit: 8}
features:
  constraints:
    - "`worst radius` >= `mean radius`"
    - "`worst area` >= `mean area`"
    - "`worst texture` >= `mean texture`"
  compare_unconstrained: true
threats:
  - name: linf
    strengths: {max: 0.3, num: 6}
scores: {n_bootstrap: 20}
outputs: {dir: out}
execution: {workers: 1}
"""


@pytest.mark.slow
def test_run_summary_and_report_show_what_relations_change(tmp_path):
    import typer
    from typer.testing import CliRunner

    from robustscope.cli import run as run_cmd

    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """test app"""

    run_cmd.register(app)
    (tmp_path / "spec.yaml").write_text(RUN_SPEC)
    result = CliRunner().invoke(app, ["run", str(tmp_path / "spec.yaml")])
    assert result.exit_code == 0, result.output
    assert "relations between features" in result.output
    assert "break a relation" in result.output
    html = (tmp_path / "out" / "report.html").read_text()
    assert 'id="relations-table"' in html


def test_relation_effect_counts_and_growth():
    from sklearn.linear_model import LogisticRegression

    from robustscope.scores.relation_effect import relation_effect

    X, y = credit_like(60)
    space = constrained_space(X)
    lr = LogisticRegression(max_iter=2000).fit(X, y)
    res = radius(lr, X[:25], y[:25], space=space, compare_unconstrained=True)
    free = radius(lr, X[:25], y[:25], space=space.unconstrained())
    effect = relation_effect(res)
    searched = ~np.isin(res.status, ("misclassified", "satisfied"))
    assert effect["n"] == searched.sum()
    breaks = free.found & ~space.relations_hold(free.x_adv) & searched
    assert effect["unconstrained_invalid"] == breaks.sum() > 0
    np.testing.assert_allclose(res.meta["unconstrained_radius"], free.radius)
    both = searched & np.isfinite(res.radius) & np.isfinite(free.radius) & (free.radius > 0)
    assert math.isclose(effect["median_growth"],
                        float(np.median(res.radius[both] / free.radius[both])))
    assert effect["median_growth"] >= 1 - 1e-9
    assert relation_effect(free) is None


def test_cli_radius_with_constraints(tmp_path):
    import pickle

    import pandas as pd
    from sklearn.linear_model import LogisticRegression
    from typer.testing import CliRunner

    from robustscope.cli.app import app

    X, y = credit_like(40)
    lr = LogisticRegression(max_iter=2000).fit(X, y)
    frame = pd.DataFrame(X, columns=NAMES)
    frame["label"] = y
    frame.loc[2, "total"] += 5  # breaks the sum
    frame.to_csv(tmp_path / "data.csv", index=False)
    (tmp_path / "model.pkl").write_bytes(pickle.dumps(lr))
    lows, highs = X.min(axis=0), X.max(axis=0) + 5
    lines = ["features:"] + [f"  - {{name: {n}, lower: {lo}, upper: {hi}}}"
                             for n, lo, hi in zip(NAMES, lows, highs, strict=True)]
    lines += ["constraints:", "  - debt <= 0.6 * income", "  - debt + savings == total"]
    (tmp_path / "space.yaml").write_text("\n".join(lines) + "\n")
    base = ["radius", "--model", str(tmp_path / "model.pkl"), "--trust-pickle", "--data",
            str(tmp_path / "data.csv"), "--features", str(tmp_path / "space.yaml"),
            "--out", str(tmp_path / "r.csv")]
    result = CliRunner().invoke(app, base)
    assert result.exit_code == 2 and "'debt + savings == total'" in result.output
    result = CliRunner().invoke(app, [*base, "--invalid", "status", "--compare-unconstrained"])
    assert result.exit_code == 0, result.output
    assert "unconstrained counterexamples break one" in result.output
    table = pd.read_csv(tmp_path / "r.csv")
    assert table["status"][2] == "invalid"
