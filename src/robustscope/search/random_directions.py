"""The paper's isotropic radius: a dichotomy over random directions (Giraudon et al.).

Per input, the radius at which some of ``n_directions`` random directions of that norm
changes the decision is bracketed by doubling then bisection, with
:func:`robustscope.solvers.attacks.decision.random_directions.search_at_strength` as the solver at
each
strength; the counterexample found is then verified like every other one
(:class:`robustscope.search.verify.Verifier`).
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from robustscope.core.checks import make_generator
from robustscope.core.errors import InputError
from robustscope.core.numerics import cross_entropy
from robustscope.core.result import ATTACKED, CENSORED, MISCLASSIFIED, SATISFIED, RadiusResult
from robustscope.core.space import FeatureSpace
from robustscope.core.statement import DECISION_CHANGE, Statement
from robustscope.models.base import Classifier, QueryLedger
from robustscope.search.metering import charge_probe
from robustscope.search.metering import charged as metered_by
from robustscope.search.preamble import class_indices, open_ledger, unbounded_space, wrap_inputs
from robustscope.search.state import registered
from robustscope.search.threads import AUTO, check_threads, limited_threads
from robustscope.search.verify import Verifier
from robustscope.solvers.attacks.decision.random_directions import MAX_ELEMENTS
from robustscope.solvers.problem import Budget, SolverProblem
from robustscope.threats import LpThreat, get_threat

#: The registry's random-direction solver, looked up at each call.
RANDOM_DIRECTIONS = registered("random-directions")


def random_directions_radius(
    model: Classifier,
    X: np.ndarray | torch.Tensor,
    y: np.ndarray | torch.Tensor,
    threat: str | LpThreat = "l2",
    space: FeatureSpace | None = None,
    *,
    n_directions: int = 5000,
    max_radius: float = math.inf,
    init_radius: float | None = None,
    precision: float = 0.0,
    rtol: float = 0.01,
    max_steps: int = 60,
    seed: int = 0,
    statement: Statement = DECISION_CHANGE,
    ledger: QueryLedger | None = None,
    max_elements: int = MAX_ELEMENTS,
    threads: str | int | None = AUTO,
) -> RadiusResult:
    """Isotropic radius of each input by dichotomy over random directions (the paper's estimator).

    Parameters
    ----------
    model : anything :func:`robustscope.wrap_model` accepts (a :class:`Classifier` is used as is;
        another model is wrapped on the CPU and its probe charged).
    X : (n, *input_shape) inputs in original units; y : (n,) labels
        (values of the model's ``classes_`` where it has them, else class indices).
    threat : ``"l2"``, ``"linf"`` or ``"l1"``: the norm of the random directions (scaled units).
    space : feature space (bounds, scales); default: unbounded, scale 1.
    n_directions : directions tried per step and input (paper: 5000).
    max_radius : largest radius tried; inputs not broken there are censored (radius inf).
    init_radius : first radius tried (default: ``max_radius`` if finite, else 1).
    precision, rtol : stop when ``hi - lo <= max(precision, rtol * hi)``, ``[lo, hi]`` the
        bracket of the isotropic radius (paper: precision 0.5 on a 0-255 pixel scale).
    max_steps : cap on dichotomy steps.
    seed : seeds the directions. ledger : a :class:`QueryLedger` of ``n`` inputs to charge
        (a private one is used otherwise; the counts are in the result either way). With a
        budget, an input stops when its next chunk of directions would exceed it: it keeps
        the best counterexample found so far (``attacked``) or is ``censored``.
    threads : thread use, as for :func:`robustscope.radius`: ``"auto"`` (one thread for
        model calls under 2^18 elements, the caller's settings above), an int, or ``None``
        (leave every setting alone); the caller's settings are restored on return.

    Returns a :class:`RadiusResult` with status ``attacked`` (verified counterexample),
    ``censored``, ``misclassified`` or ``satisfied``. ``radius`` is the scaled norm of the
    counterexample (<= the bracket's upper end; equal without bounds); ``lower_bound`` is 0
    (random search certifies nothing); ``meta`` holds the bracket (``isotropic_low``,
    ``isotropic_high``).
    ``seconds`` is the total time shared equally among inputs.
    """
    t0 = time.perf_counter()
    threads = check_threads(threads)
    with limited_threads(threads, math.prod(np.shape(X))):
        return _random_directions_radius(model, X, y, threat, space, n_directions, max_radius,
                                         init_radius, precision, rtol, max_steps, seed,
                                         statement, ledger, max_elements, t0)


def _random_directions_radius(model, X, y, threat, space, n_directions, max_radius, init_radius,
                              precision, rtol, max_steps, seed, statement, ledger, max_elements,
                              t0) -> RadiusResult:
    threat = get_threat(threat)
    raw = not isinstance(model, Classifier)  # wrapped here: its probe is charged here
    model = wrap_inputs(model, X, "cpu")
    x = model.as_tensor(X)
    n = x.shape[0]
    yt = torch.as_tensor(class_indices(model, y, n), device=x.device)
    if n_directions < 1:
        raise InputError(f"n_directions: {n_directions} must be >= 1")
    if not max_radius > 0:
        raise InputError(f"max_radius: {max_radius} must be > 0")
    if space is None:
        space = unbounded_space(tuple(x.shape[1:]))
    space.check_data(x.detach().cpu().numpy(), what="X")
    if ledger is not None and len(ledger.forward) != n:
        raise InputError(f"ledger: holds {len(ledger.forward)} inputs, X has {n}")
    if ledger is None:
        charged = open_ledger(model, n, probe=raw)
    else:
        charged = ledger
        if raw:
            charge_probe(model, ledger)
    generator = make_generator(seed, x.device)
    all_idx = np.arange(n)

    with torch.no_grad():
        logits = metered_by(model, charged).logits(x)
    proba = torch.softmax(logits.to(torch.float64), dim=1)
    pred = logits.argmax(dim=1)
    loss = cross_entropy(logits.detach().cpu().numpy(), yt.cpu().numpy())
    misclassified = pred != yt
    satisfied = statement.holds(pred, yt) & ~misclassified
    wrong = misclassified | satisfied

    first = init_radius if init_radius is not None else (
        max_radius if math.isfinite(max_radius) else 1.0)
    eps = torch.full((n,), float(min(first, max_radius)), dtype=torch.float64)
    lo = torch.zeros(n, dtype=torch.float64)
    hi = torch.full((n,), math.inf, dtype=torch.float64)
    best = x.clone()
    best_norm = torch.full((n,), math.inf, dtype=torch.float64)
    running = ~wrong.cpu()
    out_of_budget = torch.zeros(n, dtype=torch.bool)
    steps = 0
    while running.any() and steps < max_steps:
        steps += 1
        idx = torch.nonzero(running).reshape(-1)
        idx_np = idx.numpy()
        problem = SolverProblem(metered_by(model, charged, idx_np), x[idx], yt[idx], space,
                                threat, statement, eps[idx].to(x.dtype), Budget(charged, idx_np),
                                generator)
        out = RANDOM_DIRECTIONS(problem, n_directions=n_directions, max_elements=max_elements)
        cand = out.x_adv
        ok, poor = torch.as_tensor(out.found), torch.as_tensor(out.meta["exhausted"])
        norms = threat.norm(space.scaled_delta(cand, x[idx])).to(torch.float64).cpu()
        better = ok & (norms < best_norm[idx])
        best[idx[better]] = cand[better]
        best_norm[idx[better]] = norms[better]
        hi[idx[ok]] = eps[idx[ok]]
        tried_all = ~ok & ~poor  # an input out of budget proves nothing at this radius
        lo[idx[tried_all]] = eps[idx[tried_all]]
        out_of_budget[idx[poor]] = True
        # next radius: double until something fails (up to max_radius), then bisect
        grow = torch.isinf(hi[idx])
        nxt = torch.where(grow, torch.clamp(2 * eps[idx], max=max_radius), (lo[idx] + hi[idx]) / 2)
        stuck = grow & (lo[idx] >= max_radius)  # nothing found at max_radius: censored
        tol = torch.clamp(rtol * hi[idx], min=precision)
        done = stuck | (~grow & (hi[idx] - lo[idx] <= tol)) | poor
        eps[idx] = nxt
        running[idx[done]] = False

    # the one verification: project, call the model again, measure
    verifier = Verifier(model, space, threat, statement, charged, x, yt, all_idx,
                        logits.to(torch.float64), wrong)
    has = torch.isfinite(best_norm)
    if has.any():
        hidx = torch.nonzero(has).reshape(-1).to(x.device)
        verifier.check(hidx, best[hidx])
    unverified = int((has & ~torch.isfinite(verifier.best_r.cpu())).sum())
    has = torch.isfinite(verifier.best_r.cpu()) & ~wrong.cpu()
    best, best_norm = verifier.best_x, verifier.best_r.cpu()
    adv_pred = verifier.best_logits.argmax(dim=1)
    proba_adv = torch.softmax(verifier.best_logits, dim=1)

    wrong_np = wrong.cpu().numpy()
    radius = np.where(has.numpy(), best_norm.numpy(), math.inf)
    radius[wrong_np] = 0.0
    status = np.where(has.numpy(), ATTACKED, CENSORED).astype(object)
    status[misclassified.cpu().numpy()] = MISCLASSIFIED
    status[satisfied.cpu().numpy()] = SATISFIED
    elapsed = time.perf_counter() - t0
    return RadiusResult(
        radius=radius, lower_bound=np.zeros(n), status=status.astype(str),
        x_adv=best.detach().cpu().numpy(), label=yt.cpu().numpy(),
        prediction=pred.cpu().numpy(), adv_prediction=adv_pred.cpu().numpy(),
        proba=proba.cpu().numpy(), proba_adv=proba_adv.cpu().numpy(),
        loss=loss, forward_queries=charged.forward.copy(),
        backward_queries=charged.backward.copy(), seconds=np.full(n, elapsed / max(n, 1)),
        threat=threat.name, solver="random_directions", max_radius=float(max_radius),
        meta={"isotropic_low": lo.numpy().tolist(), "isotropic_high": hi.numpy().tolist(),
              "n_directions": n_directions, "precision": precision, "rtol": rtol,
              "seed": seed, "steps": steps, "unverified": unverified,
              "reached_max_steps": bool(running.any()),
              "budget_exhausted": int(out_of_budget.sum())},
    )
