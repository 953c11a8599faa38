"""Verdicts on VNN-LIB properties: ``sat`` (a counterexample the model confirms), ``unsat``
(a certified bound) or ``unknown`` / ``timeout``.

:func:`verify_property` answers one property of a model within a time limit:

1. a local robustness property (:func:`robustness_form`) is first answered from the
   radius bracket of its center (:func:`robustness_bracket`, computed once per center and
   label and shared by every ``eps``): ``sat`` where the verified radius is within the
   box (its counterexample is checked against the property like any other), ``unsat``
   where the certified lower bound exceeds the radius whose clipped ball covers the box;
2. otherwise (or where the bracket leaves the ``eps`` open) an attack in the box: projected
   gradient steps on the smallest violation of a disjunct, from the box's center and random
   starts (random points only, for a black box);
3. bound propagation with the property's output constraint as the statement: the network's
   graph gets one more affine node, ``[0, b_r - C_r Y]``, so that "class 0 keeps every
   margin" is "every selected unsafe row fails" (one row per disjunct suffices: a
   conjunction fails where one of its rows does); CROWN, then alpha-CROWN on every row,
   then branch and bound on the best row of each disjunct still open, whose leaf points are
   candidate counterexamples.

A ``sat`` is only ever a point of the box whose outputs, computed again by ``confirm`` (the
model as shipped: ONNX Runtime for an ONNX file), meet the unsafe condition; an ``unsat``
only a bound above the tolerance :func:`spec_tolerance` (float32 rounding of the model's
outputs) computed in float64 by the bound propagation.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from robustscope.core.errors import InputError
from robustscope.core.space import FeatureSpace
from robustscope.core.vnnlib import Property, RobustnessForm, robustness_form
from robustscope.models.base import Classifier, QueryLedger
from robustscope.models.torch_model import TorchClassifier
from robustscope.search.metering import charged
from robustscope.solvers.bounds.branch import prove
from robustscope.solvers.bounds.certify import MARGIN_ULPS
from robustscope.solvers.bounds.domain import Domain, make_domain
from robustscope.solvers.bounds.graph import AFFINE, Network, Node, read_network
from robustscope.solvers.bounds.propagate import lower_bounds, margin_spec

SAT, UNSAT, UNKNOWN, TIMEOUT = "sat", "unsat", "unknown", "timeout"
#: Gradient steps and random starts of the attack on a property.
ATTACK_STEPS = 100
ATTACK_STARTS = 8
#: Random points tried in the box for a black box.
RANDOM_POINTS = 256


@dataclass
class Verdict:
    """One property's answer: ``result`` (``sat`` / ``unsat`` / ``unknown`` /
    ``timeout``), ``method`` that decided it, ``x`` ``(d,)`` and ``y`` ``(k,)`` of a
    ``sat``'s counterexample (as the model computes them), ``seconds``, and ``note`` (why a
    method could not run)."""

    result: str
    method: str
    seconds: float
    x: np.ndarray | None = None
    y: np.ndarray | None = None
    notes: list[str] = field(default_factory=list)
    #: model passes (forward + backward rows) this answer cost: its checks, its attack and,
    #: where this call was the first to need it, the radius bracket's search
    queries: int = 0


@dataclass
class Bracket:
    """The radius bracket of one center: ``lower <= true Linf radius <= upper``, the
    counterexample ``x_adv`` ``(d,)`` at ``upper`` (``None`` where none was found)."""

    lower: float
    upper: float
    x_adv: np.ndarray | None
    seconds: float
    #: the center ``(d,)`` the bracket is of (``None``: the property's own); a bracket
    #: shared by properties whose boxes give centers a rounding apart certifies a box only
    #: beyond its radius plus that distance
    center: np.ndarray | None = None
    #: model passes the bracket's radius search cost, and whether an answer has counted them
    #: already (a bracket shared by several properties is paid by the first)
    queries: int = 0
    counted: bool = False


def spec_tolerance(y: np.ndarray, b: np.ndarray) -> float:
    """The smallest margin that counts as proven for outputs near ``y`` and constants
    ``b``: :data:`MARGIN_ULPS` float32 ulps of ``1 + max |y| + max |b|``."""
    big = 1 + float(np.abs(y).max(initial=0)) + float(np.abs(b).max(initial=0))
    return MARGIN_ULPS * float(np.finfo(np.float32).eps) * big


def robustness_bracket(model: Classifier, form: RobustnessForm, time_limit: float,
                       certify: str = "crown", seed: int = 0) -> Bracket:
    """The radius bracket of ``form``'s center under Linf in the box ``[clip_lower,
    clip_upper]``; ``certify`` (``radius(certify=...)``, or ``"milp"``: the network MILP,
    ``radius(solver="exact")``) certifies a torch network's lower bound (a black box gets
    none), within ``time_limit`` seconds: the search's convergence rounds, bound probes and
    proofs stop at that deadline (``SearchConfig.deadline``), and an exact method gets at
    most that long per input."""
    from robustscope.search.engine import radius
    from robustscope.search.plan import SearchConfig

    t0 = time.perf_counter()
    shape = tuple(model.input_shape or (len(form.center),))
    x = form.center.reshape(1, *shape)
    space = FeatureSpace.box(shape, form.clip_lower, form.clip_upper)
    white = isinstance(model, TorchClassifier)
    solver = "exact" if certify == "milp" and white else "auto"
    certify = "crown" if certify == "milp" else certify
    res = radius(model, x, np.array([form.label]), threat="linf", space=space, solver=solver,
                 certify=certify if white else "none", seed=seed, threads=None,
                 config=SearchConfig(exact_time_limit=max(time_limit, 1.0),
                                     deadline=t0 + time_limit))
    found = np.isfinite(res.radius[0]) and res.status[0] != "censored"
    return Bracket(float(res.lower_bound[0]), float(res.radius[0]) if found else math.inf,
                   res.x_adv[0].reshape(-1).astype(np.float64) if found else None,
                   time.perf_counter() - t0, form.center.copy(), int(res.queries[0]))


def verify_property(model: Classifier, prop: Property, timeout: float,
                    confirm: Callable[[np.ndarray], np.ndarray] | None = None,
                    bracket: Callable[[RobustnessForm], Bracket] | None = None,
                    seed: int = 0) -> Verdict:
    """The verdict on ``prop`` for ``model`` within ``timeout`` seconds.

    ``confirm`` maps points ``(n, d)`` (float64, the property's input order) to the outputs
    ``(n, k)`` the model as shipped computes (default: the model's logits); ``bracket``
    gives the radius bracket of a robustness property's center (default:
    :func:`robustness_bracket`, computed here; a caller answering many ``eps`` of one
    center passes a cached one)."""
    t0 = time.perf_counter()
    deadline = t0 + float(timeout)
    shape = tuple(model.input_shape) if model.input_shape else (prop.n_inputs,)
    d = int(np.prod(shape))
    if d != prop.n_inputs:
        raise InputError(f"{prop.source}: declares {prop.n_inputs} inputs X_i; the model takes "
                         f"{d} values per input")
    # every model call of this answer is charged to one ledger: the model's own calls through
    # a metered view, a confirmation by another runtime (the file itself) row by row
    ledger = QueryLedger(1)
    view = charged(model, ledger, np.zeros(1, dtype=np.int64))
    if confirm is None:
        confirm = _model_outputs(view)
    else:
        outside = confirm

        def confirm(points: np.ndarray) -> np.ndarray:
            ledger.forward[0] += len(points)
            return outside(points)
    notes: list[str] = []

    def done(result: str, method: str, x=None, y=None) -> Verdict:
        return Verdict(result, method, time.perf_counter() - t0, x, y, notes,
                       int(ledger.used()[0]))

    def check(points: np.ndarray) -> Verdict | None:
        points = np.clip(np.asarray(points, dtype=np.float64).reshape(-1, d),
                         prop.lower, prop.upper)
        outs = np.asarray(confirm(points), dtype=np.float64).reshape(len(points), -1)
        if outs.shape[1] != prop.n_outputs:
            raise InputError(f"{prop.source}: declares {prop.n_outputs} outputs Y_j; the "
                             f"model gives {outs.shape[1]}")
        hit = np.flatnonzero(prop.unsafe(outs) & prop.contains(points))
        if len(hit):
            return Verdict(SAT, "", 0.0, points[hit[0]], outs[hit[0]])
        return None

    center = (prop.lower + prop.upper) / 2
    found = check(center[None])
    if found is not None:
        return done(SAT, "center", found.x, found.y)
    form = robustness_form(prop)
    if form is not None:
        b = bracket(form) if bracket is not None else robustness_bracket(
            model, form, max(deadline - time.perf_counter(), 1.0) / 2, seed=seed)
        if not b.counted:
            ledger.forward[0] += b.queries  # the radius search's own ledger, counted once
            b.counted = True
        if b.x_adv is not None and b.upper <= form.eps_inner:
            found = check(b.x_adv[None])
            if found is not None:
                return done(SAT, "radius bracket", found.x, found.y)
        shift = 0.0 if b.center is None else float(np.abs(b.center - form.center).max())
        if b.lower > form.eps_outer + shift:
            return done(UNSAT, "radius bracket")
    if time.perf_counter() > deadline:
        return done(TIMEOUT, "")
    white = isinstance(model, TorchClassifier)
    for points in _attack(view, prop, white, shape, deadline, seed):
        found = check(points)
        if found is not None:
            return done(SAT, "attack" if white else "random points", found.x, found.y)
    if not white:
        notes.append(f"{model.name} is a black box: no certified bounds")
        return done(TIMEOUT if time.perf_counter() > deadline else UNKNOWN, "")
    dropped = getattr(model.module, "dropped", None)
    if dropped is not None and not _order_only(prop):
        notes.append(f"the graph's final {dropped} was dropped, and the property compares "
                     "outputs with constants: no certified bounds")
        return done(UNKNOWN, "")
    try:
        net = read_network(model.module, shape, "cpu")
    except InputError as exc:
        notes.append(str(exc))
        return done(UNKNOWN, "")
    lo = torch.as_tensor(prop.lower)[None]
    hi = torch.as_tensor(prop.upper)[None]
    xc = torch.as_tensor(center)[None]
    half = float(((hi - lo) / 2).max())
    dom = make_domain(xc, lo - xc, hi - xc, torch.ones(d, dtype=torch.float64),
                      torch.tensor([half * (1 + 1e-9) + 1e-300]), math.inf)
    y_center = np.asarray(confirm(center[None]), dtype=np.float64)
    tol = max(spec_tolerance(y_center, b) for _, b in prop.disjuncts)
    rows = [(i, r) for i, (c, _) in enumerate(prop.disjuncts) for r in range(len(c))]
    best = None
    for method in ("crown", "alpha-crown"):
        if time.perf_counter() > deadline:
            return done(TIMEOUT, "")
        lb = _row_bounds(net, dom, prop, rows, method, deadline)
        best = _best_rows(prop, rows, lb)
        if all(v > tol for v, _ in best):
            return done(UNSAT, method)
    open_rows = [(i, r) for i, (v, r) in enumerate(best) if not v > tol]
    ext = _with_rows(net, prop, open_rows)
    # no domain budget: the property's own timeout is the only limit
    outcome = prove(ext, dom, 0, tol, deadline, max_domains=sys.maxsize)
    if outcome.proven:
        return done(UNSAT, "bab")
    if outcome.point is not None:
        found = check((xc + outcome.point.reshape(1, -1)).numpy())
        if found is not None:
            return done(SAT, "bab leaf", found.x, found.y)
    if outcome.proven is None or time.perf_counter() > deadline:
        return done(TIMEOUT, "")
    notes.append("branch and bound reached a leaf it could not prove, with no counterexample "
                 "the model confirms")
    return done(UNKNOWN, "")


def _model_outputs(model: Classifier) -> Callable[[np.ndarray], np.ndarray]:
    """The model's outputs as the property reads them: the logits, or for a converted
    graph whose final Softmax / LogSoftmax was dropped, the graph's own outputs."""
    dropped = getattr(getattr(model, "module", None), "dropped", None)

    def outputs(x: np.ndarray) -> np.ndarray:
        shape = tuple(model.input_shape or (x.shape[1],))
        with torch.no_grad():
            out = model.logits(torch.as_tensor(x).reshape(len(x), *shape)).double()
        if dropped == "Softmax":
            out = torch.softmax(out, 1)
        elif dropped == "LogSoftmax":
            out = torch.log_softmax(out, 1)
        return out.cpu().numpy()
    return outputs


def _order_only(prop: Property) -> bool:
    """Every row compares two outputs (``Y_a - Y_b <= 0``): unchanged by a softmax."""
    for c, b in prop.disjuncts:
        for row, const in zip(c, b, strict=True):
            if const != 0 or sorted(row[row != 0].tolist()) != [-1.0, 1.0]:
                return False
    return True


def _attack(model: Classifier, prop: Property, white: bool, shape: tuple[int, ...],
            deadline: float, seed: int):
    """Batches of candidate points ``(m, d)`` in the box: projected gradient steps on the
    smallest disjunct violation (white box), or random points (black box)."""
    rng = np.random.default_rng(seed)
    lo, hi = prop.lower, prop.upper
    d = len(lo)
    starts = np.concatenate([((lo + hi) / 2)[None],
                             rng.uniform(lo, hi, (ATTACK_STARTS - 1, d))])
    if not white:
        yield np.concatenate([starts, rng.uniform(lo, hi, (RANDOM_POINTS, d)),
                              np.where(rng.random((16, d)) < 0.5, lo, hi)])
        return
    dropped = getattr(model.module, "dropped", None)
    lo_t, hi_t = torch.as_tensor(lo), torch.as_tensor(hi)
    width = (hi_t - lo_t).clamp_min(0)
    cs = [torch.as_tensor(c) for c, _ in prop.disjuncts]
    bs = [torch.as_tensor(b) for _, b in prop.disjuncts]
    x = torch.as_tensor(starts).clone()
    step = 0.1 * width
    for it in range(ATTACK_STEPS):
        if time.perf_counter() > deadline:
            return
        def violation(logits: torch.Tensor) -> torch.Tensor:
            out = logits.double()
            if dropped == "Softmax":
                out = torch.softmax(out, 1)
            elif dropped == "LogSoftmax":
                out = torch.log_softmax(out, 1)
            # a disjunct holds where its largest row violation C Y - b is <= 0
            return torch.stack([(out @ c.T - b).amax(dim=1)
                                for c, b in zip(cs, bs, strict=True)], dim=1).amin(dim=1)

        # one forward and one backward pass per row, charged by the metered view
        _, viol, grad = model.value_and_grad(x.reshape(len(x), *shape), violation)
        grad = grad.reshape(len(x), -1)
        with torch.no_grad():
            if it % 10 == 0 or bool((viol <= 0).any()):
                yield x.detach().numpy().copy()
            x = torch.minimum(torch.maximum(x - step * grad.sign(), lo_t), hi_t)
            if it % 20 == 19:
                step = step / 2
    yield x.detach().numpy()


def _row_bounds(net: Network, dom: Domain, prop: Property, rows: list[tuple[int, int]],
                method: str, deadline: float) -> np.ndarray:
    """Lower bounds of every row's ``b_r - C_r Y`` ... as ``C_r Y - b_r`` (positive: the
    unsafe row cannot hold) over the box (alpha-CROWN's steps stop at ``deadline``)."""
    ext = _with_rows(net, prop, rows)
    spec = margin_spec(torch.tensor([0]), ext.n_classes)
    lb = lower_bounds(ext, dom, spec, method, deadline=deadline)
    return lb[0, 1:].detach().numpy()


def _best_rows(prop: Property, rows: list[tuple[int, int]], lb: np.ndarray
               ) -> list[tuple[float, int]]:
    """Per disjunct, ``(bound, row)`` of its row with the largest bound."""
    best = [(-math.inf, 0)] * len(prop.disjuncts)
    for (i, r), v in zip(rows, lb, strict=True):
        if v > best[i][0]:
            best[i] = (float(v), r)
    return best


def _with_rows(net: Network, prop: Property, rows: list[tuple[int, int]]) -> Network:
    """``net`` with one more affine node ``[0, b_r - C_r Y for each (disjunct, row)]``:
    class 0's margin over output ``r`` is ``C_r Y - b_r``."""
    c = np.zeros((len(rows) + 1, prop.n_outputs))
    b = np.zeros(len(rows) + 1)
    for n, (i, r) in enumerate(rows):
        c[n + 1] = -prop.disjuncts[i][0][r]
        b[n + 1] = prop.disjuncts[i][1][r]
    dev = net.device
    a = torch.as_tensor(c, dtype=net.dtype, device=dev)
    bias = torch.as_tensor(b, dtype=net.dtype, device=dev)
    last = len(net.nodes) - 1
    node = Node(AFFINE, (last,), (len(rows) + 1,), "property",
                fn=lambda t, a=a, bias=bias: t.reshape(len(t), -1) @ a.T + bias,
                bias=bias, transpose=lambda g, a=a: g @ a,
                macs=int(a.numel()), abs_fn=lambda r, a=a.abs(): r.reshape(len(r), -1) @ a.T,
                abs_linear=True)
    return Network([*net.nodes, node], net.device, net.dtype)
