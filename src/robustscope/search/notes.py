"""What the search did where it could not be exact, in words for the summary.

:func:`solver_notes` reads one search's settings (model, space, threat, statement, strategy,
exact kind) and its statuses, and says which solver served the inputs and why another, exact
one could not: the exact linear solver's program for the feature space (closed form, LP / QP
under relations, a MILP per class with integer, binary or one-hot features), the inputs it
left open, a targeted statement it does not take, the gradient cascade on a space with
discrete features, a network without its MILP. ``radius()`` stores them in
``meta["notes"]``; :attr:`robustscope.core.result.RadiusResult.notes` and the command line's
summary show them.
"""

from __future__ import annotations

import numpy as np

from robustscope.core.space import FeatureSpace
from robustscope.core.statement import Statement
from robustscope.core.statuses import ATTACKED
from robustscope.models.base import Classifier
from robustscope.threats import LpThreat


def _discrete_kinds(space: FeatureSpace) -> str:
    """The discrete kinds of mutable features in words (``integer, one-hot``)."""
    mutable = space.types[space.mutable]
    kinds = [k for k in ("integer", "binary") if (mutable == k).any()]
    if (mutable == "categorical").any():
        kinds.append("one-hot")
    return ", ".join(kinds)


def solver_notes(model: Classifier, space: FeatureSpace, threat: LpThreat,
                 statement: Statement, solver: str, kind: str | None, used_exact: str | None,
                 status: np.ndarray) -> list[str]:
    """Sentences that say which solver ran where an exact one could not (or ran in another
    form than its closed form), and why; ``status`` ``(n,)`` the searched inputs' statuses.
    An empty list where nothing needs saying."""
    notes: list[str] = []
    discrete = space.has_discrete
    relations = space.relations is not None and not space.relations.is_linear_empty
    open_rows = int((np.asarray(status) == ATTACKED).sum())
    if used_exact == "linear":
        if discrete:
            notes.append(f"exact-linear: a MILP per class on HiGHS, because the space has "
                         f"{_discrete_kinds(space)} features (the closed form would relax "
                         "them to reals)")
        elif relations:
            notes.append("exact-linear: an LP / QP per class on HiGHS, because of the "
                         "relations between features (the closed form ignores them)")
        if open_rows:
            notes.append(f"exact-linear left {open_rows} input(s) open (a MILP time limit, or "
                         "L2 tangent cuts that did not close): their radii are the attacks', "
                         "with the program's bound as lower bound")
    elif model.is_linear and kind is None:
        notes.append("exact-linear skipped: it takes a target class only for binary models; "
                     "the attack cascade ran instead")
    elif used_exact == "trees" and open_rows:
        notes.append(f"exact-trees left {open_rows} input(s) open within its time limit: "
                     "their radii are the attacks'")
    if kind is None and not model.is_linear and model.differentiable and threat.p == 2.0 \
            and not getattr(model, "is_tree_ensemble", False):
        notes.append("no exact radius under L2 for a network (its MILP would need a "
                     "quadratic objective, which HiGHS does not solve): attacks only")
    attacked = used_exact is None or open_rows > 0
    if attacked and discrete and used_exact != "trees":
        if model.differentiable and solver == "auto":
            lead = ("no exact solver ran for this model" if used_exact is None
                    else f"on the {open_rows} input(s) exact-{used_exact} left open")
            notes.append(f"{lead}: the gradient cascade searches the "
                         f"continuous relaxation of the {_discrete_kinds(space)} features "
                         "(rounded at every verification), a lattice stage runs with them "
                         "held and tries their neighbouring values, then the gradient-free "
                         "proposals search the valid values themselves; the best verified "
                         "point is kept")
        elif model.differentiable and solver == "minnorm":
            notes.append(f"solver='minnorm' searches the continuous relaxation of the "
                         f"{_discrete_kinds(space)} features and a lattice stage their "
                         "neighbouring values; solver='auto' adds gradient-free proposals")
        elif model.differentiable and solver == "pgd":
            notes.append(f"solver='pgd' searches the continuous relaxation of the "
                         f"{_discrete_kinds(space)} features and rounds at verification; "
                         "solver='auto' adds a lattice stage and gradient-free proposals")
    return notes
