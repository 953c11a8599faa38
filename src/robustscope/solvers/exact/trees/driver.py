"""Exact minimum-norm counterexamples for tree ensembles: the public entry point and its
per-input loop.

:func:`exact_tree_radius` checks its arguments once, then per correctly classified input:

1. the bracket without a program (:func:`~robustscope.solvers.exact.trees.bracket.prune_input`:
   the independent-trees lower bound, beam leaf walks for a verified counterexample; then
   :func:`~robustscope.solvers.exact.trees.bracket.exhaust`, a branch and bound over leaf
   choices below that counterexample). Most inputs close here.
2. where it stays open, the MILP search over the cuts within its counterexample's radius
   (:mod:`~robustscope.solvers.exact.trees.milp_search`: ``search_linf`` for Linf,
   ``solve_input`` for L1 / L2 and under relations). ``prune=False`` runs the MILP search
   alone (the reference of the tests and the benchmark).

Units and validity: costs are measured on the scaled perturbation ``u = (x' - x) / scale`` of
the FeatureSpace. Each cut is placed, exactly, at the smallest *valid* value that the library
routes right of its threshold (:mod:`~robustscope.solvers.exact.trees.program`: the float32
cast of XGBoost and scikit-learn, the ``<`` vs ``<=`` rule, the feature's bounds and its
integer / binary / one-hot type), and a counterexample puts every feature at the nearest
valid value of the chosen cell, so its norm equals the program's objective and the bracket
closes exactly.

The program and the leaves' boxes are built once per (ensemble, feature space) and cached by
content (:mod:`~robustscope.solvers.exact.trees.compiled`); the rows of one input's MILP are
:mod:`~robustscope.solvers.exact.trees.milp_rows`, its solve
:mod:`~robustscope.solvers.exact.trees.milp` (HiGHS through
:mod:`robustscope.solvers.milp.highs`); the tunables are
:mod:`~robustscope.solvers.exact.trees.settings`.

Ties: a class with a lower index than the label wins a tie (as ``argmax`` does); one with a
higher index must lead by ``tie_tol`` (1e-9 of the score range, 1e-6 for XGBoost, whose
scores are float32 sums). The lower bound is exact for the model's decision under that rule.
Every counterexample is re-checked with the model's own ``predict_proba``
(``meta['verification_failures']`` lists the inputs where one failed).

Missing values are not modelled (inputs are finite); see :mod:`robustscope.models.trees`.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import time
from collections.abc import Callable

import numpy as np
import torch

from robustscope.core.checks import check_labels
from robustscope.core.errors import InputError, ModelError
from robustscope.core.space import FeatureSpace
from robustscope.core.statuses import ATTACKED, CENSORED, EXACT, MISCLASSIFIED, SATISFIED
from robustscope.models.base import QueryLedger
from robustscope.models.metered import MeteredModel, metered
from robustscope.models.trees import (
    TreeEnsemble,
    TreeEnsembleClassifier,
    is_tree_ensemble,
    parse_tree_model,
)
from robustscope.solvers.exact.trees.bracket import exhaust, prune_input
from robustscope.solvers.exact.trees.compiled import compiled_for
from robustscope.solvers.exact.trees.milp import backend_for
from robustscope.solvers.exact.trees.milp_search import InputResult, search_linf, solve_input
from robustscope.solvers.output import SolverOutput
from robustscope.solvers.tolerances import TREE_BRACKET_RTOL as EXACT_RTOL
from robustscope.threats import LpThreat, get_threat


def exact_tree_radius(
    model: object,
    x: np.ndarray | torch.Tensor,
    y: np.ndarray | torch.Tensor,
    space: FeatureSpace,
    threat: LpThreat | str = "linf",
    time_limit: float = 10.0,
    max_radius: float | None = None,
    backend: str = "auto",
    growth: float = 2.0,
    linf_search: str = "bisect",
    highs_options: dict | None = None,
    target: int | None = None,
    verify: Callable[[int, np.ndarray], int] | None = None,
    clean_class: np.ndarray | None = None,
    prune: bool = True,
) -> SolverOutput:
    """Exact radius of robustness of a tree ensemble, per input.

    Parameters
    ----------
    model : a :class:`TreeEnsembleClassifier`, or a fitted tree classifier (wrapped here);
        counterexamples are verified with its own ``predict_proba``.
    x : inputs ``(n, d)`` in original units (float64 numpy array or tensor).
    y : labels as class indices ``(n,)``.
    space : the feature space (bounds, scale, types, mutability) of the ``d`` features.
    threat : ``linf``, ``l1`` or ``l2`` (measured on ``(x' - x) / scale``).
    time_limit : seconds per input, all classes together; on timeout the result holds the
        best bracket found.
    max_radius : optional largest radius of interest; beyond it an input is ``censored``.
    backend : ``highspy``, ``scipy`` (``scipy.optimize.milp``, the same HiGHS without the
        MIP tolerance setting) or ``auto`` (highspy when installed, else scipy).
    growth : the search solves the program with a radius cutoff that starts at twice the
        cheapest single move and grows by this factor until a counterexample lies inside:
        cuts farther than the cutoff are fixed, which keeps every program small.
    linf_search : ``bisect`` (default: feasibility programs over the candidate radii, see
        :func:`search_linf`) or ``optimize`` (minimise the norm, as for L1 / L2).
    highs_options : HiGHS options replacing ``settings.HIGHS_OPTIONS`` and
        ``settings.MINIMISE_OPTIONS`` (``scipy`` reads only
        ``presolve``).
    target : a class index: the counterexample must be predicted as ``target`` (the
        targeted statement) instead of anything but ``y``. Inputs already predicted as the
        target are reported ``satisfied``, those not predicted as ``y`` ``misclassified``,
        both with radius 0, as the radius search does.
    verify : ``verify(i, x_adv) -> class`` checks a counterexample ``(d,)`` of input ``i``
        with the model (the class there when the statement holds, else -1); the radius
        search passes its one verification here. Default: call the model, charged to
        ``forward_queries`` of the result.
    clean_class : ``(n,)`` the model's decision at each input when already known (saves a
        query per input).
    prune : bracket each input first without a program (:func:`prune_input`: the
        independent-trees lower bound, beam leaf walks for a counterexample, then the
        branch and bound over leaf choices of :func:`exhaust`) and solve
        programs only where the bracket stays open, over the cuts within its counterexample's
        radius. ``False`` runs the MILP search alone (the reference the tests compare with).

    Returns a :class:`~robustscope.solvers.output.SolverOutput`: ``radius`` the norm of the
    verified counterexample (``inf`` where none), ``lower_bound`` the MILP's certified bound,
    ``status`` ``exact`` (bracket closed), ``attacked`` (open: time limit or failed
    verification), ``censored``, ``misclassified`` or ``satisfied``; ``adv_prediction`` the
    model's class at the counterexample; ``meta`` the program's size, the inputs whose
    verification failed, ``program_cached`` (the program came from the cache),
    ``closed_without_milp`` (inputs whose bracket the pruning closed), of them
    ``closed_by_leaf_search`` (closed by :func:`exhaust`), and ``refused_bounds``
    (inputs where a program's bound lay above a verified counterexample, so the solver was
    wrong there and that bound was not used).
    """
    # every argument is checked here, once; _radii takes them as checked
    clf = _as_classifier(model)
    ens = clf.ensemble
    threat = get_threat(threat)
    x_np = x.detach().cpu().numpy() if torch.is_tensor(x) else np.asarray(x)
    x_np = np.asarray(x_np, dtype=np.float64).reshape(len(x_np), -1)
    n, d = x_np.shape
    if d != ens.n_features or space.n_features != d:
        raise InputError(f"x: {d} features per row, model has {ens.n_features}, feature "
                         f"space {space.n_features}")
    y_np = check_labels(y, n, ens.n_classes)
    space.check_data(x_np, what="x")
    if threat.p not in (1.0, 2.0, math.inf):
        raise InputError(f"threat: p={threat.p} is not supported (1, 2, inf)")
    if target is not None and not 0 <= int(target) < ens.n_classes:
        raise InputError(f"target: class {target} is not in 0..{ens.n_classes - 1}")
    if backend not in ("auto", "highspy", "scipy"):
        raise InputError(f"backend '{backend}': choose 'auto', 'highspy' or 'scipy'")
    if backend == "auto":
        backend = ("highspy" if importlib.util.find_spec("highspy") is not None
                   else "scipy")
    if linf_search not in ("bisect", "optimize"):
        raise InputError(f"linf_search '{linf_search}': choose 'bisect' or 'optimize'")
    if not growth > 1.0:
        raise InputError(f"growth must be > 1, got {growth}")
    if max_radius is not None and not max_radius > 0:
        raise InputError(f"max_radius must be > 0, got {max_radius}")
    return _radii(clf, x_np, y_np, space, threat, time_limit, max_radius, backend, growth,
                  linf_search, highs_options, target, verify, clean_class, prune)


def _radii(clf: TreeEnsembleClassifier, x_np: np.ndarray, y_np: np.ndarray,
           space: FeatureSpace, threat: LpThreat, time_limit: float, max_radius: float | None,
           backend: str, growth: float, linf_search: str, highs_options: dict | None,
           target: int | None, verify: Callable[[int, np.ndarray], int] | None,
           clean_class: np.ndarray | None, prune: bool) -> SolverOutput:
    """:func:`exact_tree_radius` on checked arguments: ``x_np`` ``(n, d)`` float64, ``y_np``
    ``(n,)`` class indices, ``backend`` ``highspy`` or ``scipy``."""
    ens = clf.ensemble
    n = len(x_np)
    comp, cached = compiled_for(ens, space)
    prog = comp.prog
    holds_relations = space.relations is not None and not space.relations.is_linear_empty
    solver = backend_for(backend, highs_options, holds_relations)
    ledger = QueryLedger(n)
    if clean_class is None:
        model_pred = _model_predict(metered(clf, ledger), x_np)
    else:
        model_pred = np.asarray(clean_class, dtype=np.int64).reshape(n)
    parsed_pred = ens.predict(x_np)
    out = _empty(n, x_np)
    failures: list[int] = []
    n_pruned = n_searched = 0
    refused: list[int] = []
    for i in range(n):
        t0 = time.perf_counter()
        x0, yi = x_np[i], int(y_np[i])
        check = functools.partial(verify, i) if verify is not None else functools.partial(
            model_check, clf, ledger, i, yi, target, space)
        if model_pred[i] != yi or (target is not None and model_pred[i] == target):
            out["radius"][i] = out["lower"][i] = 0.0
            out["status"][i] = MISCLASSIFIED if model_pred[i] != yi else SATISFIED
            out["adv_class"][i] = model_pred[i]
            out["seconds"][i] = time.perf_counter() - t0
            continue
        start = None
        if prune:
            start = prune_input(comp, ens, check, space, x0, yi, target, threat.p, max_radius)
            if not start.closed() and exhaust(comp, ens, check, space, x0, yi, target,
                                              threat.p, start, t0 + time_limit):
                n_searched += 1
        if start is not None and (start.closed() or math.isinf(start.lower) or (
                max_radius is not None and start.lower > max_radius)):
            res = InputResult(start.radius, start.x, start.cls, start.lower, False)
            n_pruned += 1
        elif threat.p == math.inf and linf_search == "bisect" and not holds_relations:
            # (under relations the Linf radius need not be a crossing cost: minimised below)
            res = search_linf(prog, check, ens, space, x0, yi, target, t0 + time_limit,
                              max_radius, solver, growth, start)
        else:
            res = solve_input(prog, check, ens, space, threat, x0, yi, target, t0 + time_limit,
                              max_radius, solver, growth, start)
        if res.verification_failed:
            failures.append(i)
        if res.bound_refused:
            refused.append(i)
        lower = res.lower_bound
        if parsed_pred[i] != model_pred[i]:
            lower = 0.0  # the parsed model disagrees here: no certificate
        _finish(out, i, res.radius, res.x_adv, res.adv_class, lower, time.perf_counter() - t0)
    meta = {"solver": "exact-trees", "backend": backend, "time_limit": time_limit,
            "max_radius": max_radius, "tie_tol": prog.tie_tol, "n_predicates": prog.n_pred,
            "n_leaves": prog.n_leaf, "verification_failures": failures,
            "program_cached": cached, "closed_without_milp": n_pruned,
            "closed_by_leaf_search": n_searched,
            "refused_bounds": refused}
    return SolverOutput(x_adv=torch.as_tensor(out["x_adv"]), radius=out["radius"],
                        lower_bound=out["lower"], status=out["status"],
                        adv_prediction=out["adv_class"], forward_queries=ledger.forward.copy(),
                        seconds=out["seconds"], meta=meta)


def _holds(cls: int, yi: int, target: int | None) -> bool:
    return cls == target if target is not None else cls != yi


def _empty(n: int, x: np.ndarray) -> dict:
    return {"radius": np.full(n, np.inf), "lower": np.zeros(n), "x_adv": x.copy(),
            "status": np.full(n, CENSORED, dtype=object), "adv_class": np.full(n, -1),
            "seconds": np.zeros(n)}


def _finish(out: dict, i: int, r: float, x_adv: np.ndarray, cls: int, lower: float,
            seconds: float) -> None:
    out["seconds"][i] = seconds
    if np.isfinite(r):
        lower = min(lower, r)
        out["radius"][i] = r
        out["x_adv"][i] = x_adv
        out["adv_class"][i] = cls
        closed = r - lower <= EXACT_RTOL * max(r, 1e-12)
        out["status"][i] = EXACT if closed else ATTACKED
        out["lower"][i] = r if closed else lower
    else:
        out["lower"][i] = lower
        out["status"][i] = CENSORED


def _as_classifier(model: object) -> TreeEnsembleClassifier:
    if isinstance(model, TreeEnsembleClassifier):
        return model
    if isinstance(model, MeteredModel) and isinstance(model.adapter, TreeEnsembleClassifier):
        return model  # the search's view (its thread policy is kept by the views made here)
    if isinstance(model, TreeEnsemble):
        raise ModelError("exact_tree_radius needs the model itself (to verify counterexamples), "
                         "not only its parsed ensemble")
    if is_tree_ensemble(model):
        return TreeEnsembleClassifier(model, parse_tree_model(model))
    raise ModelError(f"{type(model).__name__} is not a tree ensemble the exact solver reads "
                     "(XGBClassifier, LGBMClassifier, scikit-learn tree classifiers)")


def _model_predict(clf: TreeEnsembleClassifier, x: np.ndarray) -> np.ndarray:
    return clf.predict(torch.as_tensor(x, dtype=torch.float64)).cpu().numpy()


def model_check(clf: TreeEnsembleClassifier, ledger: QueryLedger, i: int, yi: int,
                 target: int | None, space: FeatureSpace, x_adv: np.ndarray) -> int:
    """The default check: the model's class at ``x_adv`` (charged to input ``i``) when the
    statement holds there and ``x_adv`` satisfies the space's relations, else -1."""
    if not space.relations_hold(x_adv[None])[0]:
        return -1
    cls = int(_model_predict(metered(clf, ledger, np.array([i])), x_adv[None])[0])
    return cls if _holds(cls, yi, target) else -1
