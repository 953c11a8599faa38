"""The solver registry: every solver declared once, one calling convention, one output type,
and the names the search, the command line, the spec and the docs accept come from it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from robustscope.core.space import FeatureSpace
from robustscope.core.statement import DECISION_CHANGE
from robustscope.models.linear import LinearClassifier
from robustscope.solvers.output import SolverOutput
from robustscope.solvers.problem import SolverProblem
from robustscope.solvers.registry import KINDS, SEARCH_SOLVERS, SOLVERS, get_solver
from robustscope.threats import get_threat

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _linear_problem(n: int = 5, d: int = 6, seed: int = 0):
    rng = np.random.default_rng(seed)
    w = np.vstack([np.zeros(d), rng.normal(size=d)])
    b = np.array([0.0, 0.1])
    model = LinearClassifier(w, b)
    x = torch.as_tensor(rng.uniform(0.3, 0.7, size=(n, d)))
    y = model.predict(x)
    return model, w, b, x, y, FeatureSpace.box(d)


def test_every_entry_resolves_and_has_a_kind():
    for name, info in SOLVERS.items():
        assert info.name == name and info.kind in KINDS
        assert callable(info.run), name


def test_unknown_solver_lists_the_registered_ones():
    with pytest.raises(ValueError, match="minnorm"):
        get_solver("fgsm")


@pytest.mark.parametrize("name", [n for n, s in SOLVERS.items()
                                  if s.kind in ("minimum-norm", "fixed-strength",
                                                "decision-based")])
def test_attack_solvers_share_the_calling_convention(name):
    model, w, b, x, y, space = _linear_problem()
    threat = get_threat("l2")
    exact = get_solver("exact-linear").solve(SolverProblem(model, x, torch.as_tensor(y), space,
                                                          threat))
    eps = torch.as_tensor(exact.radius * 1.5)
    extra = {"budget": 800} if SOLVERS[name].kind == "decision-based" else {}
    problem = SolverProblem(model, x, torch.as_tensor(y), space, threat, DECISION_CHANGE, eps,
                            generator=torch.Generator().manual_seed(0))
    out = SOLVERS[name].solve(problem, **extra)
    assert isinstance(out, SolverOutput) and len(out) == len(x)
    assert out.x_adv.shape == x.shape
    found = torch.as_tensor(out.found)
    assert found.any(), name
    assert (model.predict(out.x_adv)[found] != y[found]).all()
    # no solver beats the exact radius
    assert (out.radius[out.found] >= exact.radius[out.found] * (1 - 1e-6)).all()


def test_exact_solver_outputs_bracket_the_radius():
    model, w, b, x, y, space = _linear_problem()
    out = get_solver("exact-linear").solve(SolverProblem(model, x, torch.as_tensor(y), space,
                                                        get_threat("linf")))
    assert isinstance(out, SolverOutput)
    assert (out.lower_bound <= out.radius).all() and out.closed.all()


def test_cli_and_spec_accept_exactly_the_search_solvers():
    from robustscope.cli.app import SolverName
    from robustscope.runs.spec import SolverSpec

    assert [s.value for s in SolverName] == list(SEARCH_SOLVERS)
    for name in SEARCH_SOLVERS:
        assert SolverSpec(name=name).name == name
    with pytest.raises(ValueError, match="not a solver"):
        SolverSpec(name="cube")


def test_the_architecture_docs_name_every_solver():
    text = (DOCS / "architecture.md").read_text()
    missing = [name for name in SOLVERS if f"`{name}`" not in text]
    assert not missing, f"docs/architecture.md does not list {missing}"
