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
   again; only verified candidates ever define a radius.
5. certifies a lower bound of torch networks by bound propagation below the verified radius
   (``certify=``; see ``docs/certified.md``), and under ``solver="exact"`` runs the network
   MILP over the ball of that radius.

Inputs already decided cost nothing more. Inputs without a counterexample up to
``max_radius`` are ``censored`` (radius ``inf``).
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from robustscope.core.checks import (
    check_array,
    check_columns,
    check_labels,
    make_generator,
)
from robustscope.core.errors import InputError, RobustscopeWarning
from robustscope.core.numerics import cross_entropy
from robustscope.core.result import (
    ATTACKED,
    CENSORED,
    EXACT,
    INVALID,
    MISCLASSIFIED,
    SATISFIED,
    RadiusResult,
)
from robustscope.core.space import FeatureSpace
from robustscope.core.statement import DECISION_CHANGE, Statement, rounding_margin
from robustscope.models.base import Classifier, QueryLedger
from robustscope.models.names import feature_names
from robustscope.models.threads import AUTO, fit_threads, limited_threads
from robustscope.models.torch_model import TorchClassifier
from robustscope.models.wrap import wrap_model
from robustscope.search.options import OPTIONS, check_options
from robustscope.search.plan import (
    BLACKBOX_CONFIG,
    RELATIONS_CONFIG,
    AttackPlan,
    SearchConfig,
    StageLedger,
    plan_attack,
)
from robustscope.search.verify import Verifier
from robustscope.solvers.attacks.gradient.boundary_projection import project_to_boundaries
from robustscope.solvers.attacks.gradient.targets import (
    first_order_distances,
    rank_by_distance,
    runner_ups,
)
from robustscope.solvers.bounds.certify import (
    BOUNDARY_PUSHES,
    bound_radius,
    estimated_passes,
    network_or_none,
)
from robustscope.solvers.bounds.domain import make_domain
from robustscope.solvers.bounds.graph import Network, read_network
from robustscope.solvers.exact.relu.milp import relu_layers
from robustscope.solvers.registry import get_solver
from robustscope.solvers.tolerances import BRACKET_RTOL as EXACT_RTOL
from robustscope.threats import LpThreat, get_threat

log = logging.getLogger(__name__)

#: Solvers the search runs, read from the one registry.
MINNORM = get_solver("minnorm").run
PGD = get_solver("pgd").run
GRADIENT_FREE = get_solver("gradient-free").run
EXACT_LINEAR = get_solver("exact-linear").run
EXACT_TREES = get_solver("exact-trees").run
EXACT_RELU = get_solver("exact-relu").run
#: Doublings from max_radius / 64 reach max_radius in 7 probes.
DOUBLINGS = 7
#: First PGD step of a warm-started probe, as a share of its strength (the start is close).
WARM_STEP = 0.25
#: First PGD step of a cold-started probe (spaces with discrete features, see _probe_start).
COLD_STEP = 0.5
#: The line search aims this far (relative) past the chord's zero, on the counterexample's
#: side of the boundary ...
LINE_AIM = 1e-6
#: ... and bisects where the chord's zero is within this share of the bracket's ends.
LINE_EDGE = 1e-9
#: Under ``certify="auto"``, CROWN runs when its cost is at most this share of the search's:
#: first its estimate (forward-pass equivalents, counting the neurons IBP leaves unstable at
#: the attack's radius) against the passes the attack spent on the batch's inputs, then its
#: time, measured on chunks of 1, 2, 4, ... inputs, against the search's time on the batch.
#: The estimate alone was far off on convolutional networks (the tiny colour CNN of
#: ``benchmarks/peers``: 25 passes estimated, about 1 s per input measured, ten times the
#: attack's own time; the digits MLP: about a tenth of the attack's time).
AUTO_CERTIFY_SHARE = 1.0


#: Most rounds of :func:`_spend_leftover` (further runs with the passes the plan left).
LEFTOVER_ROUNDS = 3


#: Queries per input that ``solver="auto"`` gives a black-box model when no budget is set.
BLACKBOX_BUDGET = 5000


class _BatchState(Verifier):
    """The verifier of one batch (which holds the model, feature space, threat, statement and
    ledger) plus the search's settings (``max_radius``, ``rtol``, ``generator``, ``config``)
    and its bookkeeping (arrays of the batch's length): certified lower bounds, closed
    brackets, the largest strength at which an attack failed (not a certificate), the
    bracketing PGD runs made per input and the last failed probe's iterate (a warm start for
    the next, larger strength). ``stages`` sums the passes of each part of the search."""

    def __init__(self, *args, max_radius: float, rtol: float, generator: torch.Generator,
                 config: SearchConfig, stages: StageLedger) -> None:
        super().__init__(*args)
        self.max_radius, self.rtol = max_radius, rtol
        self.generator, self.config, self.stages = generator, config, stages
        self.started = time.perf_counter()  # the search's time on the batch starts here
        self.plan: AttackPlan | None = None
        n = len(self.x)
        self.lower = torch.zeros(n, dtype=torch.float64, device=self.x.device)
        self.exact = torch.zeros(n, dtype=torch.bool, device=self.x.device)
        self.attack_lo = torch.zeros(n, dtype=torch.float64, device=self.x.device)
        self.probes = torch.zeros(n, dtype=torch.int64, device=self.x.device)
        #: scaled iterate ``(n, d)`` of the last probe that failed (lowest margin), valid
        #: where ``near_ok``: inside the ball of ``attack_lo``
        self.near_u = torch.zeros(n, self.space.n_features, dtype=self.x.dtype,
                                  device=self.x.device)
        self.near_ok = torch.zeros(n, dtype=torch.bool, device=self.x.device)
        #: first-order distances ``(n, c)`` at the clean input to the boundaries of the classes
        #: ``aim_classes`` ``(n, c)`` (-1 rows: not computed), kept by the aiming for the
        #: ranking of the targets, which would otherwise pay for the same gradients again
        self.aim_classes = torch.full((n, 0), -1, dtype=torch.long, device=self.x.device)
        self.aim_distance = torch.zeros(n, 0, dtype=torch.float64, device=self.x.device)

    def still_open(self, sub: torch.Tensor, probes: bool = True) -> torch.Tensor:
        """Boolean ``(len(sub),)``: the input has no counterexample yet, or its bracket
        ``[max(lower bound, attack_lo), best_r]`` is wider than ``rtol`` and not certified;
        with ``probes=False`` the bracket's lower end is the certified lower bound alone (a
        failed probe's strength ``attack_lo`` proves nothing)."""
        hi = self.best_r[sub]
        lo = torch.maximum(self.attack_lo[sub], self.lower[sub]) if probes else self.lower[sub]
        return ~self.exact[sub] & (~torch.isfinite(hi) | (hi - lo > self.rtol * hi))

    def stage(self, name: str):
        """Count the passes spent inside the block as part ``name`` of the search."""
        return self.stages.stage(name, self.ledger)


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
    progress: Callable[[int], None] | None = None,
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
    rtol : relative width of the bracket at which bisection stops.
    seed : seeds every random choice; the same seed gives the same numbers.
    progress : optional callback, called with the number of inputs finished per batch.
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
        :func:`robustscope.scores.relations.relation_effect`.
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
    model = wrap_model(model, input_shape=X.shape[1:], device=device, example=X)
    if space is None:
        space = FeatureSpace.box(X.shape[1:]) if X.ndim > 2 else FeatureSpace.from_data(X)
    config = config or (BLACKBOX_CONFIG if not model.differentiable else
                        RELATIONS_CONFIG if space.has_relations else SearchConfig())
    space.check_data(X, what="X")
    broken = _broken_inputs(space, X, invalid)
    labels = check_labels(y, len(X), model.n_classes, getattr(model, "classes", None))
    if max_radius is None:
        max_radius = {math.inf: 1.0, 2.0: math.sqrt(space.n_features),
                      1.0: float(space.n_features)}[threat.p]
    if not (max_radius > 0 and math.isfinite(max_radius)):
        raise InputError(f"max_radius must be finite and > 0, got {max_radius}")
    kind = exact_kind(model, threat, statement)
    _warn_if_weak(solver, model, kind)
    if solver == "exact" and kind is None:
        raise InputError(f"solver 'exact' needs a linear model, a tree ensemble or a small "
                         f"ReLU network (Linf or L1); {model.name} under {threat.name} is none "
                         "of these (use solver='auto')")

    # networks get their MILP only when asked for; linear models and trees by default
    used_exact = kind if solver == "exact" or (solver == "auto" and kind != "relu") else None
    certifier = _certifier(model, threat, statement, solver, certify, X.shape[1:])
    n = len(X)
    ledger = QueryLedger(n, budget)
    stages = StageLedger()
    with stages.stage("wrapping probe", ledger):
        model.charge_probe(ledger)  # wrapping may have called the model on the first inputs
    generator = make_generator(seed)
    out = _Outputs(n, X.shape[1:], model.n_classes)
    searched = np.flatnonzero(~broken)
    _mark_invalid(out, np.flatnonzero(broken), X)
    if progress is not None and broken.any():
        progress(int(broken.sum()))
    for start in range(0, len(searched), batch_size):
        idx = searched[start:start + batch_size]
        t0 = time.perf_counter()
        _search_batch(model, X[idx], labels[idx], idx, space, threat, solver, kind, max_radius,
                      rtol, statement, ledger, generator, config, out, stages, certifier)
        out.seconds[idx] = (time.perf_counter() - t0) / len(idx)
        if progress is not None:
            progress(len(idx))
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
              "attack_plan": None if out.plan is None else out.plan.as_dict(),
              "certify": None if certifier is None else certifier.method,
              "certify_seconds_per_input": None if certifier is None
              else certifier.seconds_per_input},
    )


@dataclass
class _Certifier:
    """What certifies a search's inputs: the network's graph and the method (``auto`` weighs
    its cost per batch); ``seconds_per_input`` is CROWN's time per input in the last chunk
    it bounded under ``auto`` (``None`` until then), kept for the later batches."""

    net: Network
    method: str
    seconds_per_input: float | None = None


def _certifier(model: Classifier, threat, statement: Statement, solver: str, certify: str,
               shape: tuple[int, ...]) -> _Certifier | None:
    """The certifier where bound propagation may certify this search's inputs, else
    ``None``."""
    if certify == "none" or (certify == "auto" and solver not in ("auto", "exact")):
        return None
    usable = (isinstance(model, TorchClassifier) and isinstance(threat, LpThreat)
              and statement.target is None)
    if certify != "auto":
        if not usable:
            raise InputError(f"certify='{certify}' needs a torch network, an Lp threat and an "
                             f"untargeted statement; got {model.name} under {threat.name}")
        return _Certifier(read_network(model.module, tuple(shape), model.device), certify)
    if not usable:
        return None
    net = network_or_none(model.module, tuple(shape), model.device)
    return None if net is None else _Certifier(net, "auto")


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


def _mark_invalid(out: _Outputs, rows: np.ndarray, X: np.ndarray) -> None:
    """Rows whose clean input breaks a relation: no search, no radius."""
    out.radius[rows] = np.nan
    out.lower[rows] = np.nan
    out.status[rows] = INVALID
    out.x_adv[rows] = X[rows]
    out.prediction[rows] = -1
    out.adv_prediction[rows] = -1
    out.proba[rows] = np.nan
    out.proba_adv[rows] = np.nan
    out.loss[rows] = np.nan


def _warn_if_weak(solver: str, model: Classifier, kind: str | None) -> None:
    """Gradient attacks on a model without gradients (trees, black boxes) run on finite
    differences of a piecewise-constant function: their radii can be far above the true ones
    (up to 2,769 times the exact radius was measured on tree ensembles)."""
    if solver not in ("pgd", "minnorm") or model.differentiable:
        return
    fits = ("solver='auto' or solver='exact' (the exact MILP of the tree ensemble)"
            if kind == "trees" else
            "solver='auto' (the gradient-free cascade: cube search, then HopSkipJump)")
    warnings.warn(f"solver='{solver}' is a gradient attack and {model.name} has no gradients: "
                  "its radii can be far larger than the true ones (up to 2,769x the exact "
                  f"radius was measured on tree ensembles); use {fits}",
                  RobustscopeWarning, stacklevel=3)


class _Outputs:
    def __init__(self, n: int, shape: tuple[int, ...], k: int) -> None:
        self.radius = np.full(n, np.inf)
        self.lower = np.zeros(n)
        self.status = np.empty(n, dtype=object)
        self.x_adv = np.zeros((n, *shape))
        self.prediction = np.zeros(n, dtype=np.int64)
        self.adv_prediction = np.zeros(n, dtype=np.int64)
        self.proba = np.zeros((n, k))
        self.proba_adv = np.zeros((n, k))
        self.loss = np.zeros(n)
        self.seconds = np.zeros(n)
        self.plan: AttackPlan | None = None


def exact_kind(model: Classifier, threat: LpThreat, statement: Statement) -> str | None:
    """Which exact solver serves ``model``: ``linear``, ``trees``, ``relu`` or ``None``."""
    if model.is_linear:
        return "linear" if statement.target is None or model.n_classes == 2 else None
    if getattr(model, "is_tree_ensemble", False):
        return "trees"
    if isinstance(model, TorchClassifier) and threat.p in (1.0, math.inf):
        if statement.target is not None or _relu_network(model) is None:
            return None
        return "relu"
    return None


def _relu_network(model: TorchClassifier):
    """What the network MILP reads: the layers of a plain ReLU MLP (any saved format), else
    the graph of a network with ReLUs (convolutions, pooling, residual sums), else None."""
    try:
        return relu_layers(model.module)
    except InputError:
        pass
    net = network_or_none(model.module, tuple(model.input_shape or ()), model.device)
    return net if net is not None and net.relus else None


def _search_batch(model, X, labels, idx, space, threat, solver, kind, max_radius, rtol,
                  statement, ledger, generator, config, out, stages, certifier=None) -> None:
    x = torch.as_tensor(X, dtype=torch.float64, device=model.device)
    y = torch.as_tensor(labels, device=model.device)
    with model.charging(ledger, idx), stages.stage("clean", ledger):
        logits = model.logits(x).detach().to(torch.float64)
    proba = torch.softmax(logits, dim=1)
    pred = logits.argmax(dim=1)
    out.prediction[idx] = pred.cpu().numpy()
    out.proba[idx] = proba.cpu().numpy()
    # accurate also for confident inputs, where -log(p_y) rounds to 0 (the scores need g(loss))
    out.loss[idx] = cross_entropy(logits.cpu().numpy(), labels)
    misclassified = pred != y
    # a targeted statement whose target is the label holds already: radius 0, not an error
    satisfied = statement.holds(pred, y) & ~misclassified
    wrong = misclassified | satisfied
    state = _BatchState(model, space, threat, statement, ledger, x, y, idx, logits, wrong,
                        max_radius=max_radius, rtol=rtol, generator=generator, config=config,
                        stages=stages)
    active = ~wrong
    if active.any():
        # linear models and trees: exact by default; networks: a MILP only when asked for
        if kind == "linear" and solver in ("exact", "auto"):
            with state.stage("exact"):
                active = _run_exact(state, active)
        elif kind == "trees" and solver in ("exact", "auto"):
            with state.stage("exact"):
                active = _run_exact_trees(state, active)
        if active.any():
            _run_attacks(state, "auto" if solver == "exact" else solver, active)
        if kind == "relu" and solver == "exact":
            with state.stage("exact"):
                _certify_relu(state, active)
        if certifier is not None:
            _certify_bounds(state, active, certifier)
    out.plan = state.plan or out.plan

    r = state.best_r.cpu().numpy()
    found = r <= max_radius  # a counterexample beyond the largest strength tried is censored
    lost = ~found & np.isfinite(r)
    state.best_x[torch.as_tensor(lost)] = state.x[torch.as_tensor(lost)]
    state.best_logits[torch.as_tensor(lost)] = state.clean_logits[torch.as_tensor(lost)]
    r = np.where(found, r, np.inf)
    out.radius[idx] = r
    out.lower[idx] = np.where(wrong.cpu().numpy(), 0.0, state.lower.cpu().numpy())
    status = np.where(found, ATTACKED, CENSORED).astype(object)
    status[state.exact.cpu().numpy() & found] = EXACT
    status[misclassified.cpu().numpy()] = MISCLASSIFIED
    status[satisfied.cpu().numpy()] = SATISFIED
    out.status[idx] = status
    out.x_adv[idx] = state.best_x.cpu().numpy().reshape(len(idx), *X.shape[1:])
    out.proba_adv[idx] = torch.softmax(state.best_logits, dim=1).cpu().numpy()
    out.adv_prediction[idx] = state.best_logits.argmax(dim=1).cpu().numpy()


def _run_exact(state: _BatchState, active: torch.Tensor) -> torch.Tensor:
    model, space, threat, statement = state.model, state.space, state.threat, state.statement
    sub = torch.nonzero(active).reshape(-1)
    weights, bias = model.linear_parameters()
    fit_threads(len(sub) * weights.size)  # sorts over (rows, classes, features)
    res = EXACT_LINEAR(weights, bias, state.x[sub].cpu().numpy(),
                              state.y[sub].cpu().numpy(), space, threat, statement.target)
    state.lower[sub] = torch.as_tensor(res.lower_bound, device=state.x.device)
    finite = torch.as_tensor(res.found, device=sub.device)
    ok = state.check(sub, res.x_adv.to(state.x.device))
    closed = torch.as_tensor(res.closed, device=sub.device)
    # proven unbreakable inside the feature space: nothing more to search
    unbreakable = ~finite & torch.as_tensor(np.isinf(res.lower_bound), device=sub.device)
    # the verified radius must meet the bound (a projection may have moved the candidate)
    met = state.best_r[sub] - state.lower[sub] <= EXACT_RTOL * state.best_r[sub]
    state.exact[sub] = (ok & closed & met) | unbreakable
    still = active.clone()
    still[sub] = ~state.exact[sub]
    return still


def _run_exact_trees(state: _BatchState, active: torch.Tensor) -> torch.Tensor:
    """Tree ensembles: the MILP of Kantchelian et al.; a closed bracket is exact."""
    model, space, threat, statement = state.model, state.space, state.threat, state.statement
    max_radius, config = state.max_radius, state.config
    sub = torch.nonzero(active).reshape(-1)
    positions = sub.cpu().numpy()
    # the solver verifies inside its loop, through this batch's one verification
    res = EXACT_TREES(model, state.x[sub].cpu().numpy(), state.y[sub].cpu().numpy(),
                            space, threat, time_limit=config.exact_time_limit,
                            max_radius=max_radius, target=statement.target,
                            verify=lambda i, x_adv: state.check_one(int(positions[i]), x_adv),
                            clean_class=state.clean_logits[sub].argmax(dim=1).cpu().numpy())
    state.lower[sub] = torch.as_tensor(res.lower_bound, dtype=torch.float64,
                                       device=state.x.device)
    closed = torch.as_tensor(res.closed & res.found, device=sub.device)
    unbreakable = torch.as_tensor(np.isinf(res.lower_bound), device=sub.device)
    beyond = torch.as_tensor(res.lower_bound > max_radius, device=sub.device)
    # the verified radius must meet the bound: the verification may have moved a candidate
    # (moved within the relations' tolerance; or L2 tangent cuts on related tree features
    # that ran out before the bound met the solution)
    closed &= state.best_r[sub] - state.lower[sub] <= EXACT_RTOL * state.best_r[sub]
    state.exact[sub] = closed | unbreakable
    still = active.clone()
    still[sub] = ~(closed | unbreakable | beyond)  # open brackets: attack within the budget
    return still


def _certify_relu(state: _BatchState, active: torch.Tensor) -> None:
    """ReLU networks: a MILP over the ball of the attack's radius certifies a lower bound
    (and may find a smaller counterexample); a bracket within 1e-4 is exact."""
    model, space, threat, config = state.model, state.space, state.threat, state.config
    sub = torch.nonzero(active & torch.isfinite(state.best_r)).reshape(-1)
    if len(sub) == 0:
        return
    upper = (state.best_r[sub] * (1 + 1e-6)).cpu().numpy()
    res = EXACT_RELU(_relu_network(model), state.x[sub].cpu().numpy(),
                            state.y[sub].cpu().numpy(), upper, space, threat,
                            time_limit=config.exact_time_limit)
    has = torch.as_tensor(res.found, device=sub.device)
    if has.any():
        x_sub = state.x[sub[has]]
        u = space.scaled_delta(res.x_adv.to(state.x.device)[has].reshape(x_sub.shape), x_sub)
        # the incumbent sits on the decision boundary: push it a hair outwards
        for push in BOUNDARY_PUSHES:
            state.check(sub[has], space.apply_delta(x_sub, u * push))
    lower = torch.as_tensor(np.minimum(res.lower_bound, upper), dtype=torch.float64,
                            device=state.x.device)
    # HiGHS's tolerances (~1e-7 on rows) can put its bound a hair above a verified
    # counterexample: a certified bound never exceeds the verified radius
    lower = torch.minimum(lower, state.best_r[sub])
    state.lower[sub] = torch.maximum(state.lower[sub], lower)
    state.exact[sub] = state.best_r[sub] - lower <= EXACT_RTOL * state.best_r[sub]


def _certify_bounds(state: _BatchState, active: torch.Tensor, certifier: _Certifier) -> None:
    """Torch networks: the largest strength at which bound propagation proves the decision,
    by bisection below the attack's radius (``max_radius`` where it found none); kept where
    it beats the bound already held. Under ``auto``, CROWN runs when its estimated cost is
    within ``AUTO_CERTIFY_SHARE`` of the passes the attack spent on these inputs, and then
    only as long as its measured time stays within that share of the search's time on the
    batch (:func:`_bound_within`). Brackets already closed (by the network MILP) are left as
    they are."""
    sub = torch.nonzero(active & ~state.exact).reshape(-1)
    if len(sub) == 0:
        return
    net, method = certifier.net, certifier.method
    if method == "auto":
        owners = state.owners[sub.cpu().numpy()]
        spent = float(np.mean(state.ledger.forward[owners] + state.ledger.backward[owners]))
        x = state.x[sub]
        lo, hi = state.space.delta_bounds(x.reshape(len(x), -1))
        dom = make_domain(x, lo, hi, state.space.scale, _upper_ends(state, sub),
                          state.threat.p)
        if estimated_passes(net, "crown", dom) > AUTO_CERTIFY_SHARE * spent:
            return
        _bound_within(state, sub, certifier,
                      AUTO_CERTIFY_SHARE * (time.perf_counter() - state.started))
        return
    _bound_inputs(state, sub, net, method)


def _bound_within(state: _BatchState, sub: torch.Tensor, certifier: _Certifier,
                  seconds: float) -> None:
    """CROWN on the inputs ``sub`` in chunks of 1, 2, 4, ... inputs while the next chunk,
    at the time per input the last one took (larger chunks take less), fits in what is left
    of ``seconds``; the rate is kept in ``certifier`` so that a later batch where even one
    input would not fit skips at once. Inputs not reached keep the bound they had."""
    rate = certifier.seconds_per_input
    if rate is not None and rate > seconds:
        return
    start, size, spent = 0, 1, 0.0
    while start < len(sub):
        chunk = sub[start:start + size]
        t0 = time.perf_counter()
        _bound_inputs(state, chunk, certifier.net, "crown")
        took = time.perf_counter() - t0
        spent += took
        start += len(chunk)
        certifier.seconds_per_input = rate = took / len(chunk)
        size = min(2 * size, len(sub) - start)
        if spent + rate * size > seconds:
            return


def _upper_ends(state: _BatchState, sub: torch.Tensor) -> torch.Tensor:
    """``(len(sub),)`` the brackets' upper ends: the best radius, else ``max_radius``."""
    return torch.where(torch.isfinite(state.best_r[sub]), state.best_r[sub],
                       torch.full_like(state.best_r[sub], state.max_radius))


def _bound_inputs(state: _BatchState, sub: torch.Tensor, net: Network, method: str) -> None:
    """Certified radii of the batch inputs ``sub`` by ``method``, kept where they beat the
    bound already held (branch and bound's leaf points verified by the model)."""
    upper = _upper_ends(state, sub)
    res = bound_radius(net, state.x[sub], state.y[sub].cpu().numpy(), state.space,
                       state.threat, upper.cpu().numpy(), method=method, network=net,
                       logits=state.clean_logits[sub], model_dtype=state.model.dtype,
                       time_limit=state.config.exact_time_limit,
                       verify=lambda i, cand: _verified_size(state, int(sub[i]), cand))
    cert = torch.as_tensor(res.lower_bound, dtype=torch.float64, device=state.x.device)
    state.lower[sub] = torch.maximum(state.lower[sub], cert)
    r = state.best_r[sub]
    state.exact[sub] = state.exact[sub] | (torch.isfinite(r) & (r - state.lower[sub] <=
                                                                 EXACT_RTOL * r))


def _verified_size(state: _BatchState, position: int, candidate: torch.Tensor) -> float:
    """The model's verdict on one candidate (original units) of batch input ``position``:
    its size where it changes the decision, else ``inf``."""
    sub = torch.tensor([position], device=state.x.device)
    cand = candidate.to(state.x).reshape(state.x[sub].shape)
    classes, _, size = state.verify(sub, cand)
    return float(size[0]) if int(classes[0]) >= 0 else math.inf


def _run_attacks(state: _BatchState, solver: str, active: torch.Tensor) -> None:
    """The attack cascade on the inputs ``active``: gradient-free for black boxes under
    ``auto``, else the parts planned by :func:`~robustscope.search.plan.plan_attack` from the
    per-input budget (minimum-norm runs, line search, PGD bisection)."""
    model, space, ledger = state.model, state.space, state.ledger
    grad_cost = model.gradient_cost(space.n_features)
    sub = torch.nonzero(active).reshape(-1)
    if solver == "auto" and not model.differentiable:
        with state.stage("gradient-free"):
            _run_gradient_free(state, sub)
        return
    plan = plan_attack(ledger.budget, grad_cost, model.n_classes, state.config, solver,
                       l1=state.threat.p == 1, aim=state.statement.target is None)
    state.plan = plan
    with state.stage("starts"):
        _start_from_other_inputs(state, sub)
    aim = None
    if plan.aimed:
        with state.stage("aiming"):
            aim = _aim_untargeted(state, sub, plan, grad_cost)
    if plan.minnorm_steps:
        with state.stage("minnorm"):
            _minnorm_runs(state, sub, plan.minnorm_steps, 0, grad_cost, aim=aim)
    if plan.wide_steps:  # Linf / L2: a second step scale, from the input, aimed alike
        with state.stage("minnorm, long steps"):
            _minnorm_runs(state, sub, plan.wide_steps, 0, grad_cost, aim=aim,
                          step_start=state.config.wide_step)
    if plan.refine_steps:  # L1: a dense run in the class reached, from its counterexample
        with state.stage("refine"):
            _minnorm_runs(state, sub, plan.refine_steps, 1, grad_cost, refine=True)
    if plan.targets:
        with state.stage("targeted minnorm"):
            ranking = _rank_targets(state, sub, plan, grad_cost)
            _minnorm_runs(state, sub, plan.target_steps, plan.targets, grad_cost, ranking)
    own = sub[:0]
    if plan.project:  # the counterexample's own class first: on the boundary, no line search
        with state.stage("projection"):
            own = _project_round(state, _with_counterexample(state, sub), plan, grad_cost, [0],
                                 keep=plan.line_steps)
    if plan.line_steps:
        with state.stage("line search"):
            _line_search(state, sub[~torch.isin(sub, own)], plan.line_steps)
    if plan.project:
        with state.stage("projection"):
            _project(state, sub, plan, grad_cost, own)
    if plan.probe_steps:
        with state.stage("bisection"):
            _bisect_with_pgd(state, sub, grad_cost, plan)
    if solver == "auto":
        with state.stage("leftover"):
            _spend_leftover(state, sub, grad_cost, plan)
    if plan.project_left:
        with state.stage("projection"):
            _project_what_is_left(state, sub, plan, grad_cost)


def _rank_targets(state: _BatchState, sub: torch.Tensor, plan: AttackPlan,
                  grad_cost: int) -> torch.Tensor | None:
    """``(len(state.x), plan.ranked)`` classes per input, nearest boundary first by the
    first-order estimate at the clean input (:func:`~robustscope.solvers.attacks.gradient.targets.
    rank_by_distance`), for the open inputs of ``sub`` that can pay for it and their targeted
    runs; ``None`` when the plan ranks nothing. Rows of other inputs are left at -1. The
    distances the aiming computed (:func:`_aim_untargeted`, the first ``plan.aimed``
    candidates) are not computed, nor charged, again."""
    if not plan.ranked:
        return None
    model, ledger = state.model, state.ledger
    ranking = torch.full((len(state.x), plan.ranked), -1, dtype=torch.long,
                         device=state.x.device)
    runs_cost = plan.targets * (plan.target_steps * grad_cost + 1)
    sub = sub[state.still_open(sub)]
    sub = state.affordable(sub, plan.ranked * grad_cost + runs_cost)
    if len(sub) == 0:
        return ranking
    # where the aiming already has the distances of the first candidates, only the rest
    j = state.aim_classes.shape[1]
    candidates = runner_ups(state.clean_logits[sub], state.y[sub], plan.ranked)
    reuse = torch.zeros(len(sub), dtype=torch.bool, device=sub.device)
    if 0 < j <= plan.ranked:
        reuse = (candidates[:, :j] == state.aim_classes[sub]).all(dim=1)
    for group, known in ((sub[reuse], True), (sub[~reuse], False)):
        if len(group) == 0:
            continue
        paid = plan.ranked - (j if known else 0)
        with model.charging(ledger, np.repeat(state.owners[group.cpu().numpy()], paid)):
            ranking[group] = rank_by_distance(
                model, state.x[group], state.y[group], state.clean_logits[group], state.space,
                state.threat, state.statement, plan.ranked,
                known=state.aim_distance[group] if known else None)
    return ranking


def _aim_untargeted(state: _BatchState, sub: torch.Tensor, plan: AttackPlan,
                    grad_cost: int) -> torch.Tensor | None:
    """``(len(state.x),)`` the class each input's untargeted run is aimed at, -1 where it stays
    untargeted; ``None`` when no input of ``sub`` is open and can pay for the ranking and the
    run. An input is aimed at the nearest of its ``plan.aimed`` runner-ups by the first-order
    distance at the clean input
    (:func:`~robustscope.solvers.attacks.gradient.targets.first_order_distances`)
    where that estimate is below ``config.aim_ratio`` times the logit runner-up's: an
    untargeted run follows the steepest class, and with no targeted run to correct it (small
    budgets) a wrong class is the whole excess. Measured in ``docs/budget.md``."""
    model, ledger = state.model, state.ledger
    sub = sub[state.still_open(sub)]
    sub = state.affordable(sub, plan.aimed * grad_cost + plan.minnorm_steps * grad_cost + 1)
    if len(sub) == 0:
        return None
    with model.charging(ledger, np.repeat(state.owners[sub.cpu().numpy()], plan.aimed)):
        classes, distance = first_order_distances(
            model, state.x[sub], state.y[sub], state.clean_logits[sub], state.space,
            state.threat, state.statement, plan.aimed)
    state.aim_classes = torch.full((len(state.x), classes.shape[1]), -1, dtype=torch.long,
                                   device=state.x.device)
    state.aim_distance = torch.zeros(len(state.x), classes.shape[1], dtype=distance.dtype,
                                     device=state.x.device)
    state.aim_classes[sub], state.aim_distance[sub] = classes, distance
    nearest = distance.argmin(dim=1, keepdim=True)
    clear = distance.gather(1, nearest)[:, 0] < state.config.aim_ratio * distance[:, 0]
    aim = torch.full((len(state.x),), -1, dtype=torch.long, device=state.x.device)
    aim[sub] = torch.where(clear, classes.gather(1, nearest)[:, 0], -1)
    return aim


def _minnorm_runs(state: _BatchState, sub: torch.Tensor, steps: int, targets: int,
                  grad_cost: int, ranking: torch.Tensor | None = None,
                  refine: bool = False, aim: torch.Tensor | None = None,
                  step_start: float | None = None) -> None:
    """Minimum-norm runs of ``steps`` gradient calls per input of ``sub``: one untargeted
    (``targets=0``), else one per class aimed at — the first of ``ranking`` (nearest boundary
    first, see :func:`_rank_targets`), else the runner-ups by clean logit — skipping the
    class the best counterexample already reached, all in one batch; with ``refine`` (and
    ``targets=1``) the run refines the class reached instead, from its best counterexample
    (:func:`_refine_best_class`). ``aim`` ``(len(state.x),)`` aims the untargeted run of each
    input at a class (-1: untargeted; see :func:`_aim_untargeted`). ``step_start`` (Linf /
    L2; ``None``: the solver's) is the run's first step relative to its strength. Inputs
    whose bracket is closed (certified, or within ``rtol``), or whose budget cannot pay
    every run, are skipped."""
    model, ledger = state.model, state.ledger
    runs = max(1, targets)
    sub = sub[state.still_open(sub)]
    sub = state.affordable(sub, runs * (steps * grad_cost + 1))
    if len(sub) == 0:
        return
    towards = init = None
    if targets:
        order = _targets_beyond_best(state, sub, targets, ranking)
        if refine:
            order, init = _refine_best_class(state, sub, order)
        sub = sub.repeat(targets)
        towards = order.T.reshape(-1)  # target k of every input, then target k + 1, ...
    elif aim is not None:
        towards = aim[sub]
    scale = {} if step_start is None else {"step_start": step_start}
    with model.charging(ledger, state.owners[sub.cpu().numpy()]):
        out = MINNORM(model, state.x[sub], state.y[sub], state.space, state.threat, None,
                      state.statement, state.generator, steps=steps, towards=towards,
                      init=init, **scale)
    m = len(sub) // runs
    for k in range(runs):  # one verification per run: an input appears once per call
        rows = slice(k * m, (k + 1) * m)
        state.check(sub[rows], out.x_adv[rows])


def _refine_best_class(state: _BatchState, sub: torch.Tensor,
                       order: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The plan's refining L1 run (``plan.refine_steps``): aimed at the class of each input's
    best counterexample, warm-started from that counterexample (inputs without one keep their
    target ``order`` ``(len(sub), 1)`` and start at the input). Returns the classes and the
    starts ``(len(sub), *shape)``.

    A targeted L1 run takes dense steps (see
    :func:`~robustscope.solvers.attacks.gradient.minnorm_l1.minnorm_l1`), a second step scale
    beside the untargeted run's; where the untargeted run
    stalls far above the radius (a counterexample spread over many coordinates), that scale
    brings it down in the same class (measured in ``docs/budget.md``). Used in place of the
    single targeted run of a plan of about 100 passes, it lowered the tiny CNN's p90 (2.26 ->
    1.56) but raised the digits MLP's (1.02 -> 1.27), whose untargeted runs reach the wrong
    one of 10 classes more often: there the other class is worth more."""
    has = torch.isfinite(state.best_r[sub])
    reached = state.best_logits[sub].argmax(dim=1, keepdim=True)
    order = torch.where(has[:, None], reached, order)
    shape = (-1,) + (1,) * (state.x.dim() - 1)
    init = torch.where(has.reshape(shape), state.best_x[sub], state.x[sub])
    return order, init


def _targets_beyond_best(state: _BatchState, sub: torch.Tensor, count: int,
                         ranking: torch.Tensor | None = None) -> torch.Tensor:
    """``(len(sub), count)`` classes to aim at, without the label and without the class of
    each input's best counterexample (already searched): in the order of ``ranking`` where an
    input has one (classes it does not rank come after, by clean logit), else by clean
    logit."""
    logits = state.clean_logits[sub]
    k = logits.shape[1]
    classes = torch.arange(k, device=logits.device)
    # priority (smaller first): the position in the ranking, else k + the logit order
    by_logit = logits.argsort(dim=1, descending=True).argsort(dim=1).to(torch.float64)
    priority = k + by_logit
    if ranking is not None:
        ranks = ranking[sub]
        position = torch.arange(ranks.shape[1], device=logits.device, dtype=torch.float64)
        placed = torch.full_like(priority, math.inf).scatter(
            1, ranks.clamp_min(0), torch.where(ranks >= 0, position, math.inf))
        priority = torch.minimum(priority, placed)
    reached = state.best_logits[sub].argmax(dim=1)
    has = torch.isfinite(state.best_r[sub])
    excluded = (classes == state.y[sub][:, None]) | (has[:, None] & (classes == reached[:, None]))
    priority = priority.masked_fill(excluded, math.inf)
    return priority.argsort(dim=1)[:, :count]


def _ceiling_left(state: _BatchState, sub: torch.Tensor, plan: AttackPlan) -> torch.Tensor:
    """``(len(sub),)`` passes each input of ``sub`` may still spend: its budget's remainder,
    and without a budget what is left of the plan's passes."""
    owners = state.owners[sub.cpu().numpy()]
    left = np.minimum(state.ledger.remaining(owners), plan.passes - state.ledger.used(owners))
    return torch.as_tensor(left, device=sub.device)


def _spend_leftover(state: _BatchState, sub: torch.Tensor, grad_cost: int,
                    plan: AttackPlan) -> None:
    """Passes an input still has under its ceiling once the plan's parts are done (the
    bisection stops when its bracket is within ``rtol`` of a failed probe, or after
    ``config.max_probes``) go to up to :data:`LEFTOVER_ROUNDS` further minimum-norm runs,
    each with a line search, for the inputs of ``sub`` still open: under an explicit budget
    against their certified lower bound alone (a failed probe proves nothing: the nearer
    counterexample may lie in another class's basin), without one as elsewhere. Round
    ``r`` aims at the class of priority ``plan.targets + r`` beyond the best counterexample's
    (:func:`_targets_beyond_best`: the classes the targeted runs did not aim at), or, where
    the network has no such class, at the reached class again from its best counterexample.
    A round's run gets the steps that the smallest leftover among its inputs pays for (at
    least ``config.min_run_steps``); inputs with less stop. Certified brackets are never
    charged."""
    config = state.config
    line = plan.line_steps
    k = state.model.n_classes
    probes = state.ledger.budget is None
    for r in range(LEFTOVER_ROUNDS):
        sub = sub[state.still_open(sub, probes=probes)]
        if len(sub) == 0:
            return
        steps = (_ceiling_left(state, sub, plan) - 1 - line) // grad_cost
        sub, steps = sub[steps >= config.min_run_steps], steps[steps >= config.min_run_steps]
        if len(sub) == 0:
            return
        steps = int(steps.min())
        rank = plan.targets + r
        init = None
        if rank < k - 2:  # a class beyond the best one's and the targeted runs'
            towards = _targets_beyond_best(state, sub, rank + 1)[:, rank]
        else:  # no other class left: the reached class again, from its counterexample
            towards, init = _refine_best_class(
                state, sub, _targets_beyond_best(state, sub, 1))
            towards = towards[:, 0]
        with state.model.charging(state.ledger, state.owners[sub.cpu().numpy()]):
            out = MINNORM(state.model, state.x[sub], state.y[sub], state.space, state.threat,
                          None, state.statement, state.generator, steps=steps,
                          towards=towards, init=init)
        state.check(sub, out.x_adv)
        if line:
            _line_search(state, sub, line)


def _run_gradient_free(state: _BatchState, sub: torch.Tensor) -> None:
    """Black boxes: cube random search then HopSkipJump on one per-input budget, seeded by
    the batch's inputs of other predicted classes."""
    model, space, threat, statement, ledger = (state.model, state.space, state.threat,
                                               state.statement, state.ledger)
    max_radius, generator = state.max_radius, state.generator
    left = ledger.remaining(state.owners[sub.cpu().numpy()]).min()
    budget = int(min(BLACKBOX_BUDGET, left - 1))  # one query kept for the verification
    if budget < 2:
        return
    pool_y = state.clean_logits.argmax(dim=1)
    with model.charging(ledger, state.owners[sub.cpu().numpy()]):
        run = GRADIENT_FREE(model, state.x[sub], state.y[sub], space, threat, max_radius,
                            statement, generator, budget=budget, X_pool=state.x, y_pool=pool_y)
    found = torch.as_tensor(run.found, device=sub.device)
    if found.any():
        state.check(sub[found], run.x_adv.to(state.x.device)[found])


def _start_from_other_inputs(state: _BatchState, sub: torch.Tensor) -> None:
    """Seed each input with the nearest other input of the batch that the model assigns to
    another class: a valid counterexample (once verified) for any model, gradients or not."""
    model, space, threat = state.model, state.space, state.threat
    if not space.has_discrete and model.differentiable:
        return  # gradient solvers find better seeds themselves; skip the extra query
    sub = state.affordable(sub, 1)
    pred = state.clean_logits.argmax(dim=1)
    if len(sub) == 0 or len(torch.unique(pred)) < 2:
        return
    xs = state.x.reshape(len(state.x), -1)
    scale = torch.as_tensor(space.scale, dtype=xs.dtype, device=xs.device)
    dist = torch.stack([threat.norm((xs - xs[i]) / scale) for i in sub.tolist()])  # (m, n)
    dist = torch.where(pred[None, :] == state.y[sub][:, None], math.inf, dist)
    nearest = dist.argmin(dim=1)
    has = torch.isfinite(dist.gather(1, nearest[:, None]).reshape(-1))
    if has.any():
        state.check(sub[has], state.x[nearest[has]])


def _line_search(state: _BatchState, sub: torch.Tensor, steps: int) -> None:
    """Shrink each counterexample towards its input along the straight line (forward only).

    Per input, ``t`` in ``[lo, hi] = [0, 1]`` scales the best counterexample's perturbation;
    the statement's margin is known at both ends (the clean logits, the best counterexample's
    logits), and for a ReLU network it is piecewise linear in ``t``. Each step queries the
    point where the chord between the ends crosses zero, a relative :data:`LINE_AIM` past it
    (regula falsi with the Illinois rule: an end kept twice in a row has its margin halved),
    and bisects where that point leaves the bracket or a margin is unknown. Bisection alone
    only reaches the boundary to ``2**-steps`` of the segment: on the peer suite at 50-200
    passes per input, regula falsi took the median ratio to the best known radius from
    1.0015 to 1.0001 (digits MLP, Linf, 50 passes) and lowered it on every network and
    Lp threat (``docs/budget.md``).
    """
    space = state.space
    sub = state.affordable(_with_counterexample(state, sub), steps)
    if len(sub) == 0:
        return
    y, statement = state.y[sub], state.statement
    u = space.scaled_delta(state.best_x[sub], state.x[sub])
    lo = torch.zeros(len(sub), dtype=torch.float64, device=u.device)
    hi = torch.ones_like(lo)
    # margins shifted by the model's rounding: the chord aims that far past the boundary
    tol = rounding_margin(state.clean_logits[sub], state.model.dtype)
    m_lo = statement.margin(state.clean_logits[sub].to(torch.float64), y) + tol
    m_hi = (statement.margin(state.best_logits[sub], y) + tol).clamp_max(0.0)
    kept = torch.zeros_like(lo)  # +1: the last step kept lo, -1: it kept hi
    for _ in range(steps):
        width = hi - lo
        t = (hi - m_hi * width / (m_hi - m_lo).clamp_max(-1e-300)) * (1 + LINE_AIM)
        chord = (torch.isfinite(t) & (m_lo > 0) & (t > lo + LINE_EDGE * width)
                 & (t < hi - LINE_EDGE * width))
        t = torch.where(chord, t, lo + width / 2)
        cls, logits, _ = state.verify(
            sub, space.apply_delta(state.x[sub], u * t[:, None].to(u.dtype)))
        ok = cls >= 0
        m = statement.margin(logits, y) + tol  # NaN where not queried (a relation broke)
        m_lo = torch.where(ok, torch.where(kept > 0, m_lo / 2, m_lo), m)
        m_hi = torch.where(ok, m.clamp_max(0.0), torch.where(kept < 0, m_hi / 2, m_hi))
        m_lo = torch.nan_to_num(m_lo, nan=0.0)  # no margin known: bisect from here
        hi, lo = torch.where(ok, t, hi), torch.where(ok, lo, t)
        kept = torch.where(ok, torch.ones_like(kept), -torch.ones_like(kept))


def _with_counterexample(state: _BatchState, sub: torch.Tensor) -> torch.Tensor:
    """The inputs of ``sub`` with a counterexample of positive size."""
    return sub[torch.isfinite(state.best_r[sub]) & (state.best_r[sub] > 0)]


def _project(state: _BatchState, sub: torch.Tensor, plan: AttackPlan, grad_cost: int,
             improved: torch.Tensor) -> None:
    """FAB's projection as a refinement
    (:func:`~robustscope.solvers.attacks.gradient.boundary_projection.project_to_boundaries`),
    after the line search: each input of ``sub`` with a counterexample is moved onto the
    boundary of each of the classes of rank 1 to
    ``plan.project - 1`` (by logit at its best counterexample, after the counterexample's
    own class, rank 0, which :func:`_run_attacks` projected onto before the line search),
    linearised at that counterexample: first-order jumps to a nearer class. Then
    ``plan.project_rounds`` rounds linearise in the best counterexample's class again, each
    for the inputs the round before improved (``improved``: those the first class did, for
    inputs the line search could not move). Paid from what each input has left under its
    ceiling (:func:`_project_round`)."""
    again = _project_round(state, improved, plan, grad_cost, range(1, plan.project))
    todo = torch.unique(torch.cat([again, improved]))
    for _ in range(plan.project_rounds):
        todo = _project_round(state, todo, plan, grad_cost, [0])


def _project_what_is_left(state: _BatchState, sub: torch.Tensor, plan: AttackPlan,
                          grad_cost: int) -> None:
    """The passes an input has left under its ceiling once every other part is done (too
    few for a minimum-norm run) go to projections onto the boundaries of the classes the
    planned projection did not reach, next largest logit at the best counterexample first,
    one class per round, and to a round in the best counterexample's class after each one
    that improved it (under a targeted statement, the target's boundary alone)."""
    todo = _with_counterexample(state, sub)
    # a targeted statement has one boundary: the target's (its margin ignores the class)
    classes = 1 if state.statement.target is not None else state.model.n_classes - 1
    for rank in range(plan.project, classes):
        improved = _project_round(state, todo, plan, grad_cost, [rank])
        if len(improved):
            _project_round(state, improved, plan, grad_cost, [0])
        todo = todo[_ceiling_left(state, todo, plan) >= grad_cost + 1]
        if len(todo) == 0:
            return


def _project_round(state: _BatchState, todo: torch.Tensor, plan: AttackPlan, grad_cost: int,
                   ranks, keep: int = 0) -> torch.Tensor:
    """One round of projections for the open inputs of ``todo`` whose ceiling pays for it:
    onto the boundary of the class of each rank in ``ranks`` (0: the largest logit other
    than the label at the counterexample the round starts from, that is its own class),
    linearised at that counterexample. A projected point is checked only where it is
    shorter than the best counterexample; where it is no counterexample (the model bent
    between the two points), the margin is linearised again at the projected point and the
    input projected once more: FAB's iteration, which on the digits MLP under L1 reached the
    radius within a 1e-7 relative in two steps where the first missed (``docs/budget.md``,
    "Projection"). Each class costs a gradient and a check, and where the first misses a
    second of each, which the input's ceiling must pay for. Returns the inputs whose best
    counterexample the round improved."""
    ranks = list(ranks)
    todo = todo[state.still_open(todo)]
    todo = todo[_ceiling_left(state, todo, plan) >= len(ranks) * (grad_cost + 1)]
    if len(todo) == 0 or not ranks:
        return todo[:0]
    start, base = state.best_r[todo].clone(), state.best_x[todo].clone()
    classes = runner_ups(state.best_logits[todo], state.y[todo], max(ranks) + 1)
    for rank in ranks:
        missed, cand = _project_and_check(state, todo, base, classes[:, rank], plan, grad_cost)
        # where the model bent between the counterexample and the projected point: once
        # more, linearised at the projected point (paid from what the input has left)
        _project_and_check(state, todo[missed], cand[missed], classes[missed, rank], plan,
                           grad_cost, keep)
    return todo[state.best_r[todo] < start]


def _project_and_check(state: _BatchState, rows: torch.Tensor, at: torch.Tensor,
                       classes: torch.Tensor, plan: AttackPlan, grad_cost: int, keep: int = 0
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Project the inputs ``rows`` onto the boundary of ``classes`` ``(len(rows),)``
    linearised at ``at`` ``(len(rows), *shape)``, for the rows whose ceiling pays a gradient
    and a check and still leaves ``keep`` passes, and check the projected points shorter
    than the best counterexample.
    Returns, per row, whether a projected point was checked and missed (no counterexample),
    and the projected points ``(len(rows), *shape)`` (``at`` where none was made)."""
    missed = torch.zeros(len(rows), dtype=torch.bool, device=rows.device)
    out = at.clone()
    can = _ceiling_left(state, rows, plan) >= grad_cost + 1 + keep
    if not can.any():
        return missed, out
    sub = rows[can]
    with state.model.charging(state.ledger, state.owners[sub.cpu().numpy()]):
        cand, length = project_to_boundaries(
            state.model, state.x[sub], state.y[sub], at[can], classes[can], state.space,
            state.threat, state.statement)
    out[can] = cand.to(out.dtype)
    shorter = length < state.best_r[sub]
    tried = torch.nonzero(can).reshape(-1)[shorter]
    missed[tried] = ~state.check(sub[shorter], cand[shorter])
    return missed, out


def _bisect_with_pgd(state: _BatchState, sub: torch.Tensor, grad_cost: int,
                     plan: AttackPlan) -> None:
    """Double-then-bisect on the strength with fixed-strength PGD, per input, until the
    bracket ``[attack_lo, best_r]`` is within ``rtol`` or the budget is spent.

    Each probe is warm-started (cold on spaces with discrete features, see
    :func:`_probe_start`): towards a smaller strength from the best counterexample shrunk
    into the ball, towards a larger one from the last failed probe's iterate (which lies
    inside the larger ball), with a smaller first step (the start is already close).
    A probe that could not narrow the bracket (closed bracket, certified input) is not run.
    """
    model, space, threat, statement, ledger = (state.model, state.space, state.threat,
                                               state.statement, state.ledger)
    max_radius, generator, config = state.max_radius, state.generator, state.config
    restarts = plan.probe_restarts
    run_cost = restarts * (plan.probe_steps * grad_cost + 1) + 1
    doubling_eps = torch.full((len(state.best_r),), max_radius / 64, dtype=torch.float64,
                              device=state.x.device)
    for _ in range(config.max_probes + DOUBLINGS):
        hi = state.best_r[sub]
        doubling = ~torch.isfinite(hi) & (doubling_eps[sub] <= max_radius)
        todo = sub[state.still_open(sub) & (torch.isfinite(hi) | doubling)]
        todo = state.affordable(todo, run_cost)
        # without a budget, the plan's passes are the ceiling of the bisection
        within = ledger.used(state.owners[todo.cpu().numpy()]) + run_cost <= plan.passes
        todo = todo[torch.as_tensor(within, device=todo.device)]
        if len(todo) == 0:
            return
        hi = state.best_r[todo]
        lo = torch.maximum(state.attack_lo[todo], state.lower[todo])
        # the first probe checks the warm start's radius is nearly tight (0.9 r); if the
        # attack still succeeds there, the warm start was far off: halve from then on
        first = torch.isfinite(hi) & (lo == 0) & (state.probes[todo] == 0)
        eps = torch.where(first, hi * config.first_probe, (lo + hi) / 2)
        eps = torch.where(torch.isfinite(hi), eps, doubling_eps[todo])
        init_u, first_step = _probe_start(state, todo, eps)
        # restart 0 is warm-started and untargeted; the others aim at the runner-up classes
        towards = [None, *runner_ups(state.clean_logits[todo], state.y[todo], restarts - 1).T]
        with model.charging(ledger, state.owners[todo.cpu().numpy()]):
            out = PGD(model, state.x[todo], state.y[todo], space, threat, eps, statement,
                      generator, steps=plan.probe_steps, restarts=restarts, towards=towards,
                      init=init_u, step_start=first_step)
        ok = state.check(todo, out.x_adv)
        state.probes[todo] += torch.isfinite(hi).to(state.probes.dtype)
        state.attack_lo[todo] = torch.where(ok, state.attack_lo[todo], eps)
        failed_u = space.scaled_delta(out.x_adv.to(state.x.dtype), state.x[todo])
        state.near_u[todo] = torch.where(ok[:, None], state.near_u[todo], failed_u)
        state.near_ok[todo] = state.near_ok[todo] | ~ok
        doubling_eps[todo] = torch.where(~ok & ~torch.isfinite(state.best_r[todo]),
                                         doubling_eps[todo] * 2, doubling_eps[todo])


def _probe_start(state: _BatchState, todo: torch.Tensor,
                 eps: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Start ``(len(todo), d)`` of a probe at strength ``eps`` and its first step (a share of
    the strength). Warm, with :data:`WARM_STEP`: the last failed probe's iterate where one
    exists at a smaller strength (it lies inside the ball of ``eps``), else the best
    counterexample shrunk into the ball, else 0. On a space with discrete features (integers,
    one-hot groups) every probe starts cold, at 0 with :data:`COLD_STEP`: there a shrunk or
    earlier iterate rounds into a local trap (measured on the credit tutorial's logistic
    model: warm starts left radii up to 2.2x above the cold-started probes)."""
    space = state.space
    if space.has_discrete:
        return torch.zeros_like(state.near_u[todo]), COLD_STEP
    hi = state.best_r[todo]
    best_u = space.scaled_delta(state.best_x[todo], state.x[todo])
    shrunk = best_u * (eps / hi.clamp_min(1e-300)).clamp(max=1.0)[:, None]
    start = torch.where(torch.isfinite(hi)[:, None], shrunk, torch.zeros_like(best_u))
    grow = state.near_ok[todo] & (state.attack_lo[todo] < eps)
    return torch.where(grow[:, None], state.near_u[todo], start), WARM_STEP
