"""Radius search: per input, the smallest verified counterexample under a threat model.

For each batch the search

1. predicts the clean inputs (misclassified ones, and correctly classified ones that already
   satisfy a targeted statement, get radius 0);
2. runs the exact solver where the model allows it (linear models: lower bound = radius);
3. otherwise runs a minimum-norm solver, refines each counterexample by a projection onto
   the boundary linearised there (under L1) and a line search back towards its input, then
   tightens the bracket with fixed-strength PGD (double-then-bisect, warm-started from the
   best counterexample, restarts aimed at the runner-up classes) until
   ``(hi - lo) / hi <= rtol`` or the budget is spent;
4. verifies **every** candidate by projecting it into the feature space and calling the model
   again; only verified candidates ever define a radius. Each input's final counterexample,
   if it was verified in a batch only, is called again on its row alone (float32 rounding
   differs between batch sizes), pushed outward or withdrawn where that call disagrees;
5. certifies a lower bound of torch networks by bound propagation below the verified radius
   (``certify=``; see ``docs/certified.md``), and under ``solver="exact"`` runs the network
   MILP over the ball of that radius.

Inputs already decided cost nothing more. Inputs without a counterexample up to
``max_radius`` are ``censored`` (radius ``inf``).

This module holds the public entry point and its checks; the parts of the search live beside
it: :mod:`.preamble` (the checks every entry point shares), :mod:`.batch` (settings, one
batch), :mod:`.state` (the batch's bookkeeping), :mod:`.exact`, :mod:`.cascade`,
:mod:`.minnorm_runs`, :mod:`.refine` and :mod:`.certification` (the stages).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable

import numpy as np
import torch

from robustscope.core.checks import (
    check_array,
    check_columns,
    make_generator,
)
from robustscope.core.errors import InputError, RobustscopeWarning
from robustscope.core.result import INVALID, RadiusResult
from robustscope.core.space import FeatureSpace
from robustscope.core.statement import DECISION_CHANGE, Statement
from robustscope.models.base import Classifier
from robustscope.models.names import feature_names
from robustscope.search.batch import Outputs, SearchSettings, search_batch
from robustscope.search.certification import certifier as make_certifier
from robustscope.search.certification import uncertified_reason
from robustscope.search.exact import exact_kind
from robustscope.search.notes import solver_notes
from robustscope.search.options import OPTIONS, check_options
from robustscope.search.plan import BLACKBOX_CONFIG, RELATIONS_CONFIG, SearchConfig, StageLedger
from robustscope.search.preamble import (
    class_indices,
    default_space,
    open_ledger,
    resolve_max_radius,
    wrap_inputs,
)
from robustscope.search.progress import SearchProgress, as_search_progress
from robustscope.search.threads import AUTO, limited_threads
from robustscope.threats import LpThreat, get_threat


def radius(
    model: object,
    X: np.ndarray,
    y: np.ndarray,
    threat: str | LpThreat = "linf",
    space: FeatureSpace | None = None,
    solver: str = "auto",
    max_radius: float | None = None,
    budget: int | None = None,
    rtol: float = 0.01,
    seed: int = 0,
    statement: Statement | None = None,
    device: str | torch.device = "cpu",
    batch_size: int = 512,
    config: SearchConfig | None = None,
    progress: Callable[[int], None] | SearchProgress | None = None,
    threads: str | int | None = AUTO,
    invalid: str = "error",
    compare_unconstrained: bool = False,
    certify: str = "auto",
) -> RadiusResult:
    """Radius of robustness of each input.

    Every argument but ``model``, ``X``, ``y``, ``space``, ``statement``, ``config`` and
    ``progress`` is declared, with its default, constraint and help, in
    :data:`robustscope.search.options.OPTIONS`, which checks it here (a refused value is an
    :class:`InputError` naming the argument) and from which the command line and the
    evaluation spec take their options.

    Parameters
    ----------
    model : anything :func:`robustscope.wrap_model` accepts.
    X : array ``(n, d)`` (tabular) or ``(n, C, H, W)`` (images), original units; a
        DataFrame's columns are matched by name to the model's feature names, where it has
        them (a missing or unknown column is an error).
    y : array ``(n,)`` of labels (values of the model's ``classes_`` where it has them).
    threat : ``"linf"``, ``"l2"`` or ``"l1"``, measured on ``(x' - x) / scale``.
    space : feature space; default: the box [0, 1] for images, per-column data ranges for
        tabular data.
    solver : ``auto`` (exact where the model allows it, else minimum-norm + PGD cascade),
        ``exact``, ``minnorm`` or ``pgd`` (double-then-bisect).
    max_radius : largest strength tried; default: the norm of a perturbation of one scale
        unit on every feature (1 for Linf, sqrt(d) for L2, d for L1).
    budget : model passes (forward + backward) allowed per input; ``None`` = no limit.
    rtol : relative width of the bracket at which bisection stops; also the tolerance of the
        evidence behind ``converged`` (white box: the margin of the last convergence rounds;
        black box: the step-down search's smallest step, ``rtol / 2``).
    seed : seeds every random choice; the same seed gives the same numbers.
    progress : optional callback, called with the number of inputs finished, as they finish
        (misclassified ones after the clean pass, exactly solved ones after the exact solver,
        the others when their batch ends); the calls sum to ``len(X)``. A
        :class:`~robustscope.search.progress.SearchProgress` also hears, a few times a
        second, how many inputs of the batch are open and the share of their planned
        passes spent (an estimate for an ETA).
    threads : thread use while searching. ``"auto"``: one thread (torch, BLAS / OpenMP pools,
        the model's own ``n_jobs`` / ``nthread``) for model calls and solver batches under
        ``SMALL_WORK`` = 2^18 elements (rows × features), the caller's settings above; an
        int: that many threads throughout; ``None``: leave every setting alone. The
        caller's settings are restored on return. See ``docs/performance.md``.
    invalid : what to do with inputs that already break a relation of ``space``
        (``space.relations``): ``"error"`` raises an :class:`InputError` naming the rows and
        the constraint; ``"status"`` gives them the status ``invalid`` (radius and lower
        bound NaN, no model call) and searches the others.
    compare_unconstrained : with relations in ``space``, also search every input without
        them (same seed and settings; its queries are not added to the result's) and keep,
        per input, that radius (``meta['unconstrained_radius']``: ``inf`` where censored,
        NaN for invalid rows) and whether its counterexample breaks a relation
        (``meta['unconstrained_breaks']``, 0 / 1); read them with
        :func:`robustscope.scores.relation_effect.relation_effect`.
    certify : certified lower bounds of torch networks by bound propagation (see
        ``docs/certified.md``): ``"auto"`` runs CROWN under ``solver="auto"`` or
        ``"exact"`` when its cost is at most ``AUTO_CERTIFY_SHARE`` of the search's (its
        estimate, then its time measured on chunks of 1, 2, 4, ... inputs, so that which
        inputs get a bound can vary with the machine's speed; the last rate is
        ``meta["certify_seconds_per_input"]``); ``"ibp"``, ``"crown"``, ``"alpha-crown"``
        run that method on every input (an error if the network cannot be read); ``"bab"``
        alpha-CROWN, then branch and bound over unstable ReLUs within
        ``config.exact_time_limit`` seconds per input; ``"none"`` never.
    """
    # every plain option is checked once, against its declaration (search/options.py)
    args = locals()
    checked = check_options(**{name: args[name] for name in OPTIONS})
    budget, seed, threads, batch_size = (checked[k] for k in ("budget", "seed", "threads",
                                                              "batch_size"))
    # a DataFrame's columns are matched to the model's feature names (reordered)
    X = check_array(check_columns(X, feature_names(model)), "X")
    work = min(len(X), batch_size) * math.prod(X.shape[1:])
    with limited_threads(threads, work):
        res = _radius(model, X, y, threat, space, solver, max_radius, budget, rtol, seed,
                      statement, device, batch_size, config, progress, invalid, certify)
        if compare_unconstrained and space is not None and space.has_relations:
            free = _radius(model, X, y, threat, space.unconstrained(), solver,
                           res.max_radius, budget, rtol, seed, statement, device, batch_size,
                           config, None, "error", certify)
            invalid_rows = res.status == INVALID
            breaks = free.found & ~space.relations_hold(free.x_adv) & ~invalid_rows
            res.meta["unconstrained_radius"] = np.where(invalid_rows, np.nan,
                                                        free.radius).tolist()
            res.meta["unconstrained_breaks"] = breaks.astype(int).tolist()
        return res


def _radius(model, X, y, threat, space, solver, max_radius, budget, rtol, seed, statement,
            device, batch_size, config, progress, invalid="error",
            certify="auto") -> RadiusResult:
    threat = get_threat(threat)
    statement = statement or DECISION_CHANGE
    model = wrap_inputs(model, X, device)
    if space is None:
        space = default_space(X)
    config = config or (BLACKBOX_CONFIG if not model.differentiable else
                        RELATIONS_CONFIG if space.has_relations else SearchConfig())
    space.check_data(X, what="X")
    broken = _broken_inputs(space, X, invalid)
    labels = class_indices(model, y, len(X))
    max_radius = resolve_max_radius(max_radius, threat, space)
    kind = exact_kind(model, threat, statement)
    _warn_if_weak(solver, model, kind)
    if solver == "exact" and kind is None:
        raise InputError(f"solver 'exact' needs a linear model, a tree ensemble or a small "
                         f"ReLU network (Linf or L1); {model.name} under {threat.name} is none "
                         "of these (use solver='auto')")

    # networks get their MILP only when asked for; linear models and trees by default
    used_exact = kind if solver == "exact" or (solver == "auto" and kind != "relu") else None
    certifier = make_certifier(model, threat, statement, solver, certify, X.shape[1:])
    uncertified = None if certifier is not None else uncertified_reason(
        model, threat, statement, solver, certify, X.shape[1:])
    n = len(X)
    stages = StageLedger()
    ledger = open_ledger(model, n, budget, stages)
    settings = SearchSettings(model=model, space=space, threat=threat, statement=statement,
                              solver=solver, kind=kind, max_radius=max_radius, rtol=rtol,
                              config=config, ledger=ledger, generator=make_generator(seed),
                              stages=stages, certifier=certifier,
                              progress=as_search_progress(progress))
    out = Outputs(n, X.shape[1:], model.n_classes)
    searched = np.flatnonzero(~broken)
    out.mark_invalid(np.flatnonzero(broken), X)
    settings.finished(int(broken.sum()))
    for start in range(0, len(searched), batch_size):
        idx = searched[start:start + batch_size]
        t0 = time.perf_counter()
        search_batch(settings, X[idx], labels[idx], idx, out)
        out.seconds[idx] = (time.perf_counter() - t0) / len(idx)
    return RadiusResult(
        radius=out.radius, lower_bound=out.lower, status=out.status, x_adv=out.x_adv,
        label=labels, prediction=out.prediction, adv_prediction=out.adv_prediction,
        proba=out.proba, proba_adv=out.proba_adv, loss=out.loss,
        forward_queries=ledger.forward.copy(), backward_queries=ledger.backward.copy(),
        seconds=out.seconds, threat=threat.name, solver=solver, max_radius=float(max_radius),
        classes=getattr(model, "classes", None),
        meta={"seed": seed, "budget": budget, "rtol": rtol, "statement": statement.name,
              "model": model.name, "exact_solver": used_exact,
              "passes_by_part": stages.as_dict(),
              "notes": solver_notes(model, space, threat, statement, solver, kind, used_exact,
                                    out.status[searched]),
              "attack_plan": None if out.plan is None else out.plan.as_dict(),
              "certify": None if certifier is None else certifier.method,
              **({} if uncertified is None else {"certify_note": uncertified}),
              "certify_seconds_per_input": None if certifier is None
              else certifier.seconds_per_input,
              "converged": out.converged.tolist()},
    )


def _broken_inputs(space: FeatureSpace, X: np.ndarray, invalid: str) -> np.ndarray:
    """``(n,)`` bool: inputs that break a relation of ``space``; raises under
    ``invalid='error'`` (naming the rows and the constraint)."""
    if not space.has_relations:
        return np.zeros(len(X), dtype=bool)
    flat = X.reshape(len(X), -1)
    broken = ~space.relations_hold(flat)
    if broken.any() and invalid == "error":
        space.relations.check_data(flat, what="X")
    return broken


def _warn_if_weak(solver: str, model: Classifier, kind: str | None) -> None:
    """Gradient attacks on a model without gradients (trees, black boxes) run on finite
    differences of a piecewise-constant function: their radii can be far above the true ones
    (up to 2,769 times the exact radius was measured on tree ensembles)."""
    if solver not in ("pgd", "minnorm") or model.differentiable:
        return
    fits = ("solver='auto' or solver='exact' (the exact MILP of the tree ensemble)"
            if kind == "trees" else
            "solver='auto' (the gradient-free cascade: boundary projection, step-down search, "
            "HopSkipJump)")
    warnings.warn(f"solver='{solver}' is a gradient attack and {model.name} has no gradients: "
                  "its radii can be far larger than the true ones (up to 2,769x the exact "
                  f"radius was measured on tree ensembles); use {fits}",
                  RobustscopeWarning, stacklevel=3)
