"""Every solver, declared once: its name, kind, calling convention, what it needs.

The search (:mod:`robustscope.search`), the command line, spec validation and the docs read
this table; the search calls every solver through it
(``get_solver(name).solve(problem, **options)``, :class:`~robustscope.solvers.problem.
SolverProblem`), never by importing a solver module. Adding a solver is one module with one
``solve`` function and one entry here.

Kinds:

- ``minimum-norm``: looks for the smallest counterexample directly (``eps`` is only the
  largest radius of interest);
- ``fixed-strength``: looks for any counterexample within ``eps`` (per input); the search
  brackets the radius with it by doubling and bisection;
- ``decision-based``: minimum-norm from decisions only (no gradients);
- ``exact``: returns a certified ``lower_bound`` beside its candidate;
- ``image``: fixed-strength search over an image threat's parameters (grid search).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from robustscope.core.errors import InputError

KINDS = ("minimum-norm", "fixed-strength", "decision-based", "exact", "image")


@dataclass(frozen=True)
class SolverInfo:
    """One solver: ``solve(problem, **options)`` returns a
    :class:`~robustscope.solvers.output.SolverOutput` for a
    :class:`~robustscope.solvers.problem.SolverProblem`, attacks and exact solvers alike;
    ``needs`` says what the model must offer: ``gradients`` (autograd), ``queries`` (any
    model), ``linear``, ``trees``, ``relu`` or ``network`` (a torch module that
    :mod:`robustscope.solvers.bounds.graph` reads). ``reader`` (``"module:function"``, or
    empty) returns what the solver reads from a model, ``None`` where it cannot serve it.
    """

    name: str
    kind: str
    #: ``"module:function"`` under ``robustscope.solvers``, imported on first use (so that
    #: reading the names, as the command line does at start-up, imports no solver)
    function: str
    needs: str
    threats: tuple[str, ...]
    summary: str
    reader: str = ""

    @property
    def solve(self) -> Callable:
        """The solver's ``solve(problem, **options) -> SolverOutput``."""
        return _resolve(self.function)

    #: the same function, under the name of the registry's first calling convention
    run = solve

    def read(self, model: object) -> object | None:
        """What the solver reads from ``model`` (its ``reader``), ``None`` where it cannot
        serve it; the model itself for a solver without a reader."""
        return _resolve(self.reader)(model) if self.reader else model


def _resolve(function: str) -> Callable:
    module, name = function.split(":")
    return getattr(importlib.import_module(f"robustscope.solvers.{module}"), name)


_LP = ("linf", "l2", "l1")

SOLVERS: dict[str, SolverInfo] = {s.name: s for s in (
    SolverInfo("minnorm", "minimum-norm",
               "attacks.gradient.minnorm:solve", "gradients", _LP,
               "FMN-style minimum-norm steps with an adaptive strength"),
    SolverInfo("pgd", "fixed-strength",
               "attacks.gradient.pgd:solve", "gradients", _LP,
               "projected gradient descent in the threat's ball, restarts aimed at runner-ups"),
    SolverInfo("cube-search", "decision-based",
               "attacks.decision.cube_search:solve", "queries", _LP,
               "random search in shrinking balls (Square-attack style)"),
    SolverInfo("step-down", "decision-based",
               "attacks.decision.step_down:solve", "queries", _LP,
               "score-guided random search stepping the radius down, stops on evidence"),
    SolverInfo("hop-skip-jump", "decision-based",
               "attacks.decision.hop_skip_jump:solve", "queries", _LP,
               "boundary walk from decisions only (HopSkipJump)"),
    SolverInfo("gradient-free", "decision-based",
               "attacks.decision.gradient_free:solve", "queries", _LP,
               "step-down search, (Linf) line descent, then HopSkipJump on one budget "
               "(L2 / L1: then a polish)"),
    SolverInfo("random-directions", "fixed-strength",
               "attacks.decision.random_directions:solve", "queries", _LP,
               "random directions of norm eps (the paper's estimator)"),
    SolverInfo("exact-linear", "exact",
               "exact.linear.solve:solve", "linear", _LP,
               "closed form with feature bounds (sorted breakpoints / knapsack); an LP / QP "
               "per class under relations, a MILP per class with integer, binary or one-hot "
               "features (HiGHS)"),
    SolverInfo("exact-trees", "exact",
               "exact.trees.solve:solve", "trees", _LP,
               "tree-aware bracket, then a mixed-integer program over the predicates "
               "within it (HiGHS)"),
    SolverInfo("exact-relu", "exact",
               "exact.relu.solve:solve", "relu", ("linf", "l1"),
               "mixed-integer program over the ball of an attack's radius (HiGHS)",
               reader="exact.relu.solve:relu_network"),
    SolverInfo("bound-propagation", "exact",
               "bounds.solve:solve", "network", _LP,
               "certified radius by IBP / CROWN / alpha-CROWN and bisection, or branch and "
               "bound over unstable ReLUs (no candidate)"),
    SolverInfo("image-pgd", "image",
               "attacks.gradient.image_pgd:solve", "gradients", ("image",),
               "PGD over an image threat's parameters (colour, spatial, JPEG, LPIPS)"),
)}

#: Strategies of :func:`robustscope.radius` besides single solvers: ``auto``
#: (exact where the model allows it, else the attack cascade) and ``exact`` (``auto`` plus
#: the network MILP).
STRATEGIES = ("auto", "exact")
#: What ``radius(..., solver=...)``, ``--solver`` and a spec's ``solver`` accept.
SEARCH_SOLVERS = (*STRATEGIES, "minnorm", "pgd")
#: Bound propagation methods (:mod:`robustscope.solvers.bounds`), cheapest first.
BOUND_METHODS = ("ibp", "crown", "alpha-crown")
#: Branch and bound over unstable ReLUs on top of alpha-CROWN (:mod:`.bounds.branch`).
BRANCH_AND_BOUND = "bab"
#: What ``radius(..., certify=...)`` and ``--certify`` accept: ``auto`` (CROWN when it costs
#: at most a stated share of the attack), ``none``, one bound method, or branch and bound.
CERTIFY_CHOICES = ("auto", "none", *BOUND_METHODS, BRANCH_AND_BOUND)


def get_solver(name: str) -> SolverInfo:
    """The registered solver ``name`` (an :class:`InputError` listing them otherwise)."""
    try:
        return SOLVERS[name]
    except KeyError:
        raise InputError(f"solver '{name}' is not known; registered solvers: "
                         f"{', '.join(SOLVERS)}") from None


def check_search_solver(name: str) -> str:
    """``name`` if the radius search accepts it, else an :class:`InputError` naming the
    choices."""
    if name not in SEARCH_SOLVERS:
        raise InputError(f"solver '{name}' is not known; choose one of "
                         f"{', '.join(SEARCH_SOLVERS)}")
    return name
