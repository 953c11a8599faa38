"""Certified radius per input: the largest strength at which a bound proves the decision.

For input ``x`` with predicted class ``c`` the decision cannot change inside the domain of
strength ``eps`` when the lower bound of ``logit_c - logit_j`` is positive for every
``j != c``. The domain grows with ``eps``, so a proof at ``eps`` certifies every smaller
strength: the certified radius is searched on ``[0, upper]``, ``upper`` an attack's
verified radius (no sound bound can prove beyond it). The first probe is
``upper (1 - FIRST_PROBE_GAP)``: on networks where the bound is tight it closes the bracket
in one pass. Later probes interpolate the worst bounded margin between the ends of the
bracket (regula falsi, Illinois rule), or bisect it in log scale while it is wide in ratio,
so both tight and very loose bounds are found in a few passes.

Soundness. The bounds are computed in float64 from the network's parameters cast to
float64; the model itself may run in float32, whose rounding moves logits by a few units of
its last place. A margin counts as proven only above ``tolerance = MARGIN_ULPS * machine
epsilon of the model's dtype * (1 + max |clean logit|)``, which covers that rounding (and
float64's own, ~1e-16 relative) for networks of moderate depth and width.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
import torch

from robustscope.core.errors import InputError
from robustscope.core.space import FeatureSpace
from robustscope.core.statuses import CENSORED
from robustscope.solvers.bounds import branch
from robustscope.solvers.bounds.domain import Domain, make_domain
from robustscope.solvers.bounds.graph import Network, read_network
from robustscope.solvers.bounds.propagate import (
    ALPHA_STEPS,
    METHODS,
    crown_plan,
    crown_rows,
    interval_bounds,
    margin_lower_bounds,
)
from robustscope.solvers.output import SolverOutput
from robustscope.solvers.registry import BRANCH_AND_BOUND
from robustscope.threats.lp import LpThreat

#: Relative gap below the attack's radius of the first probe (half the search's exact rtol).
FIRST_PROBE_GAP = 5e-5
#: Bisection stops when ``hi - lo <= BISECT_RTOL * hi``, or within :data:`GAP_RTOL`.
BISECT_RTOL = 1e-3
#: ... or when ``hi - lo <= GAP_RTOL * min(hi, upper - hi)``: the bound is then known to
#: within 2% of the bracket still open above it, which is all a wide bracket's ratio can
#: tell (on LeNet-5, where CROWN's bracket ratio is about 3.5, BISECT_RTOL alone took 13
#: probes), and to within 2% of itself (so the ratio ``upper / bound`` is known to 2%).
GAP_RTOL = 2e-2
#: Probes at most (after the first).
MAX_STEPS = 12
#: Probes a certified radius takes, for cost estimates (measured with regula falsi on the
#: digits MLP: 4.4 per input on average, first probe included).
EXPECTED_PROBES = 5
#: A bracket ``[lo, hi]`` with ``hi > WIDE_RATIO lo`` is bisected at ``sqrt(lo hi)``.
WIDE_RATIO = 1.5
#: A probe lies at least this share of the bracket inside it (regula falsi safeguard).
MIN_STEP_SHARE = 0.02
#: Relative gaps below the attack's radius that branch and bound tries first, in turn (the
#: first two close the bracket within the search's exact rtol 1e-4).
BRANCH_GAPS = (FIRST_PROBE_GAP, 9e-5, 4e-4, 2e-3, 1e-2)
#: Factors that push a counterexample found on the decision boundary (a branch and bound
#: point, a network MILP incumbent) off it, tried in turn;
#: the smallest keeps the verdict clear of float32 rounding, which differs between batch
#: sizes (a point pushed by 1e-7 could flip in a batch of one and not in a batch of six).
BOUNDARY_PUSHES = (1 + 1e-5, 1 + 1e-4, 1 + 1e-3)
#: Branch and bound's bisection stops at this share of the attack's radius.
BRANCH_RTOL = 2e-5
#: Seconds per input that ``method="bab"`` gives branch and bound by default.
BRANCH_TIME_LIMIT = 10.0
#: Margins must exceed this many units of the model dtype's last place (times the logits'
#: size) to count as proven.
MARGIN_ULPS = 64


def margin_tolerance(logits: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``(n,)`` smallest margin that counts as proven, for clean ``logits`` ``(n, k)``."""
    return MARGIN_ULPS * torch.finfo(dtype).eps * (1 + logits.abs().amax(dim=1))


def worst_margin(net: Network, dom: Domain, y: torch.Tensor, tolerance: torch.Tensor,
                 method: str, steps: int = ALPHA_STEPS,
                 priority: dict[int, torch.Tensor] | None = None,
                 deadline: float | None = None) -> torch.Tensor:
    """``(n,)``: the smallest lower bound of a margin of class ``y`` over the domain, less
    ``tolerance``; positive where the decision is proven. ``priority``, where given, is
    read as by :func:`~robustscope.solvers.bounds.propagate.preactivation_bounds` and then
    replaced by the scores this bound's own pass gives (:func:`_worst_losses`);
    alpha-CROWN takes no step after ``deadline``."""
    losses = None if priority is None else {}
    lb = margin_lower_bounds(net, dom, y, method, steps, priority, losses, deadline)
    if priority is not None:
        priority.clear()
        priority.update(_worst_losses(losses, lb))
    return lb.amin(dim=1) - tolerance


def _worst_losses(losses: dict[int, torch.Tensor], lb: torch.Tensor
                  ) -> dict[int, torch.Tensor]:
    """Per node, ``(n, size)``: how much each neuron's relaxation lowered the bound of each
    input's worst margin (the scores that rank which unstable neurons a node over
    ``MAX_CROWN_WORK`` bounds first: on the tiny colour CNN at the certified radius, one
    input's worst bounded margin -0.30 when ranked by relaxation gap, +0.67 by these)."""
    worst = lb.argmin(dim=1)
    rows = torch.arange(len(lb), device=lb.device)
    return {k: v[rows, worst].reshape(len(lb), -1) for k, v in losses.items()}


def proven(net: Network, dom: Domain, y: torch.Tensor, tolerance: torch.Tensor,
           method: str, steps: int = ALPHA_STEPS) -> torch.Tensor:
    """``(n,)`` bool: every margin of class ``y`` is above ``tolerance`` over the domain."""
    return worst_margin(net, dom, y, tolerance, method, steps) > 0


def certified_radius(net: Network, dom: Domain, y: torch.Tensor, upper: torch.Tensor,
                     tolerance: torch.Tensor, method: str = "crown",
                     steps: int = ALPHA_STEPS, deadline: float | None = None) -> torch.Tensor:
    """``(n,)`` certified radius (float64) below ``upper`` ``(n,)`` (finite); no probe
    starts after ``deadline`` (``time.perf_counter()`` seconds; the strengths proven so far
    are kept).

    The worst bounded margin ``m(eps)`` (:func:`worst_margin`) falls as the domain grows;
    the radius is where it crosses zero. After the first probe near ``upper``, each probe
    interpolates ``m`` linearly between the largest proven strength and the smallest
    unproven one (regula falsi; the Illinois rule halves the value kept at an end that
    survives twice, so that neither end stalls), which needs far fewer bound passes than
    halving where ``m`` is smooth; while the bracket is wide in ratio (``hi > WIDE_RATIO
    lo``) a probe bisects it in log scale instead. The search stops at ``BISECT_RTOL`` of
    ``hi`` or at ``GAP_RTOL`` of the smaller of ``hi`` and the bracket left open above it.
    ``m(0)``, the clean margin, comes from IBP over the single point. ``dom``'s ``eps`` is
    ignored (replaced per probe); ``y`` are the predicted classes. Where a node cannot bound
    all its unstable neurons by CROWN (``MAX_CROWN_WORK``), a probe bounds first those whose
    relaxation lowered the previous probe's worst margin most (:func:`_worst_losses`)."""
    upper = upper.to(dom.x)
    lo, hi = torch.zeros_like(upper), upper.clone()
    with torch.no_grad():  # not a probe: IBP over one point is the clean margin
        m_lo = margin_lower_bounds(net, dom.with_eps(lo), y, "ibp").amin(dim=1) - tolerance
    m_hi = torch.full_like(upper, -math.inf)
    kept = torch.zeros_like(upper, dtype=torch.long)  # +1: lo survived last time, -1: hi
    todo = torch.arange(len(upper), device=upper.device)[m_lo > 0]
    # per node, each input's neuron scores from its last probe (the first probe ranks by
    # relaxation gap): the neurons whose relaxation cost that probe's bound most are
    # bounded first where a node cannot bound them all
    scores: dict[int, torch.Tensor] = {}
    for step in range(MAX_STEPS + 1):
        if len(todo) == 0 or (deadline is not None and time.perf_counter() > deadline):
            break
        lo_t, hi_t = lo[todo], hi[todo]
        if step == 0:
            eps = hi_t * (1 - FIRST_PROBE_GAP)
        else:
            frac = m_lo[todo] / (m_lo[todo] - m_hi[todo])
            frac = torch.nan_to_num(frac, nan=0.5).clamp(MIN_STEP_SHARE, 1 - MIN_STEP_SHARE)
            eps = lo_t + frac * (hi_t - lo_t)
            # a bracket wide in ratio: bisect in log scale (the margin falls steeply near
            # the far end, where regula falsi crawls up from the proven end)
            wide = (lo_t > 0) & (hi_t > WIDE_RATIO * lo_t)
            eps = torch.where(wide, torch.sqrt(lo_t * hi_t), eps)
            kept[todo] = torch.where(wide, 0, kept[todo])
        priority = {k: v[todo] for k, v in scores.items()}
        m = worst_margin(net, dom.subset(todo).with_eps(eps), y[todo], tolerance[todo],
                         method, steps, priority, deadline).detach()
        for k, v in priority.items():
            if k not in scores:
                scores[k] = torch.zeros(len(upper), *v.shape[1:], dtype=v.dtype,
                                        device=v.device)
            scores[k][todo] = v.detach()
        ok = m > 0
        stays = torch.where(ok, -1, 1)  # the end that was not replaced
        halve = kept[todo] == stays
        m_lo[todo] = torch.where(ok, m, torch.where(halve, m_lo[todo] / 2, m_lo[todo]))
        m_hi[todo] = torch.where(ok, torch.where(halve, m_hi[todo] / 2, m_hi[todo]), m)
        kept[todo] = stays
        lo[todo] = torch.where(ok, eps, lo_t)
        hi[todo] = torch.where(ok, hi_t, eps)
        if step == 0:
            todo = todo[~ok]
        width = hi[todo] - lo[todo]
        # (2% of the bracket left open above, but never more than 2% of the bound itself:
        # proven at 0.29 and refuted at 0.37 below a radius of 8.8, a bound is known to 27%)
        gap = torch.minimum(hi[todo], upper[todo] - hi[todo])
        still = (width > BISECT_RTOL * hi[todo]) & (width > GAP_RTOL * gap)
        todo = todo[still]
    return lo


def branch_radius(net: Network, dom: Domain, y: torch.Tensor, lower: torch.Tensor,
                  upper: torch.Tensor, tolerance: torch.Tensor, time_limit: float,
                  verify: Callable[[int, torch.Tensor], float] | None = None,
                  deadline: float | None = None
                  ) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    """``(n,)`` certified radii raised from ``lower`` (a bound method's) towards ``upper``
    by branch and bound (:func:`~robustscope.solvers.bounds.branch.prove`), the
    subdomains each input's proofs bounded, and ``(n,)`` the smallest verified size per
    input (``upper``, or a verified leaf point's size below it).

    Per input, within ``time_limit`` seconds, each proof given half the time left: the
    first at ``upper (1 - BRANCH_GAPS[0])``, which closes the bracket; where it fails or
    gives up, at the next gaps of ``BRANCH_GAPS`` (the attack's radius may lie a little
    above the true one, and a proof within float32's tolerance needs some room), then by
    bisection between the largest proven strength and the smallest unproven one, until
    ``BRANCH_RTOL``, a closed bracket (within ``2 FIRST_PROBE_GAP``) or the time runs
    out (or ``deadline`` passes, for all inputs). A failed proof is no counterexample by
    itself: where it comes with a point (the linear program of a subdomain with every ReLU
    fixed, Linf / L1), ``verify(i, x')``
    (input ``i``, candidate ``(d,)`` in original units) asks the model; the verified size
    it returns (``inf`` where the model disagrees) lowers ``upper``, and the gaps start
    again from there."""
    out = lower.clone().to(torch.float64)
    domains = np.zeros(len(y), dtype=np.int64)
    verified = upper.to(torch.float64).cpu().numpy().copy()
    fast = branch.fast_copy(net)  # the network the proofs' Adam steps run on, made once
    for i in range(len(y)):
        stop = time.perf_counter() + time_limit
        if deadline is not None:
            stop = min(stop, deadline)
        lo, top = float(out[i]), float(upper[i])
        hi = top
        row = dom.subset(torch.tensor([i], device=dom.x.device))
        gaps = iter(BRANCH_GAPS)
        while hi - lo > BRANCH_RTOL * top and top - lo > 2 * FIRST_PROBE_GAP * top:
            gap = next(gaps, None)
            eps = (lo + hi) / 2 if gap is None else top * (1 - gap)
            now = time.perf_counter()
            if eps <= lo or now >= stop:
                break
            res = branch.prove(net, row.with_eps(torch.tensor([eps], device=dom.x.device)),
                               int(y[i]), float(tolerance[i]), deadline=now + (stop - now) / 2,
                               fast=fast)
            domains[i] += res.domains
            if res.proven:
                lo, gaps = eps, iter(())
                continue
            hi = eps
            size = _verified_point(verify, i, row, res.point)
            if size < top:
                top = hi = max(size, lo)
                gaps = iter(BRANCH_GAPS)
        out[i] = lo
        verified[i] = top
    return out, domains, verified


def _verified_point(verify, i: int, row: Domain, point: torch.Tensor | None) -> float:
    """The verified size of a branch and bound point ``u`` (scaled), pushed a hair beyond
    the decision boundary it lies on; ``inf`` where none is verified."""
    if verify is None or point is None:
        return math.inf
    for push in BOUNDARY_PUSHES:
        size = verify(i, row.x[0] + point * push * row.scale)
        if math.isfinite(size):
            return size
    return math.inf


def check_method(method: str) -> str:
    """``method`` if it is a bound method or branch and bound, else an :class:`InputError`
    naming them."""
    if method not in (*METHODS, BRANCH_AND_BOUND):
        raise InputError(f"certify method '{method}' is not known; choose one of "
                         f"{', '.join((*METHODS, BRANCH_AND_BOUND))}")
    return method


def estimated_passes(net: Network, method: str, dom: Domain | None = None) -> float:
    """Cost of one certified radius, in forward-pass equivalents per input, for comparison
    with an attack's model passes: a backward pass costs about one pass of the graph up to
    its target per specification row; the search makes about ``EXPECTED_PROBES`` of them.

    Intermediate rows are, per node that :func:`preactivation_bounds` bounds by CROWN, twice
    the most neurons IBP leaves unstable on one input over ``dom`` (the domain at the
    attack's radius, the largest probed), or every neuron without ``dom``, as many of them
    as fit under ``MAX_CROWN_WORK`` (:func:`~robustscope.solvers.bounds.propagate.
    crown_rows`)."""
    prefix = net.prefix_macs()
    total = max(prefix[-1], 1)
    if method == "ibp":
        return 2.0 * EXPECTED_PROBES
    feeds = sorted({net.nodes[r].parents[0] for r in net.relus})
    if dom is None:
        rows = {k: net.nodes[k].size for k in feeds}
    else:
        with torch.no_grad():
            ibp = interval_bounds(net, dom)
        rows = {k: int(((ibp[k][0] < 0) & (ibp[k][1] > 0)).reshape(len(dom.x), -1)
                       .sum(dim=1).max()) for k in feeds}
    depth, carried = crown_plan(net)
    linf = dom is not None and dom.p == math.inf
    one = sum(2 * crown_rows(rows[k], carried[k]) * prefix[k] for k in feeds
              if not (linf and depth[k] == 0)) / total
    one += net.n_classes * (ALPHA_STEPS + 2 if method == "alpha-crown" else 1) + 1
    return one * EXPECTED_PROBES


def bound_radius(model, x: torch.Tensor, y, space: FeatureSpace, threat: LpThreat, eps,
                 statement=None, generator=None, method: str = "crown",
                 network: Network | None = None, logits: torch.Tensor | None = None,
                 model_dtype: torch.dtype = torch.float32,
                 time_limit: float = BRANCH_TIME_LIMIT,
                 verify: Callable[[int, torch.Tensor], float] | None = None,
                 deadline: float | None = None) -> SolverOutput:
    """Solver of the registry's calling convention: the certified radius of each input.

    ``model`` a torch module (or a ``TorchClassifier``, whose module is read), ``x``
    ``(n, *shape)`` inputs in original units, ``y`` ``(n,)`` predicted classes, ``eps``
    ``(n,)`` verified upper bounds of the radii (an attack's). Returns no candidate
    (radius ``inf``, status ``censored``) and ``lower_bound``, the certified radius;
    ``meta["closed"]`` marks inputs where it reaches ``eps`` within ``2 FIRST_PROBE_GAP``
    (the search, which holds the counterexample, sets the status). ``network``
    (already read) and ``logits`` (clean, for the tolerance) are optional shortcuts.
    ``method="bab"``: alpha-CROWN's radius, then :func:`branch_radius` within
    ``time_limit`` seconds per input (``meta["domains"]``: subdomains bounded per input),
    whose candidate counterexamples ``verify`` checks with the model (the search passes its
    verifier; without one they are dropped); ``meta["verified_upper"]`` ``(n,)`` is then
    ``eps`` lowered to the smallest verified point's size, and ``closed`` measured
    against it. ``deadline`` (``time.perf_counter()`` seconds, optional) ends every
    bisection and proof early, keeping what was proven.
    """
    if statement is not None and getattr(statement, "target", None) is not None:
        raise InputError("bound propagation certifies decision changes only (no target)")
    check_method(method)
    t0 = time.perf_counter()
    x = torch.as_tensor(x)
    module = getattr(model, "module", model)
    device = x.device
    net = network or read_network(module, tuple(x.shape[1:]), device)
    x64 = x.to(torch.float64)
    y = torch.as_tensor(np.asarray(y), device=device).reshape(-1).long()
    upper = torch.as_tensor(np.asarray(eps, dtype=np.float64), device=device).reshape(-1)
    if not torch.isfinite(upper).all() or (upper < 0).any():
        raise InputError("bound_radius: eps must hold finite upper bounds >= 0")
    lo, hi = space.delta_bounds(x64.reshape(len(x64), -1))
    dom = make_domain(x64, lo, hi, space.scale, upper, threat.p)
    if logits is None:
        with torch.no_grad():
            logits = net.logits(x64)
    tolerance = margin_tolerance(logits.to(x64), model_dtype)
    meta = {"method": method}
    top = upper
    if method == BRANCH_AND_BOUND:
        lower = certified_radius(net, dom, y, upper, tolerance, "alpha-crown",
                                 deadline=deadline)
        lower, meta["domains"], verified = branch_radius(net, dom, y, lower, upper,
                                                         tolerance, time_limit, verify,
                                                         deadline)
        # (a verified leaf point may have lowered the upper end of the bracket)
        meta["verified_upper"] = verified
        top = torch.as_tensor(verified, device=device)
    else:
        lower = certified_radius(net, dom, y, upper, tolerance, method, deadline=deadline)
    n = len(x)
    closed = (lower >= top * (1 - 2 * FIRST_PROBE_GAP)).cpu().numpy()
    seconds = (time.perf_counter() - t0) / max(n, 1)
    return SolverOutput(x_adv=x.clone(), radius=np.full(n, np.inf),
                        lower_bound=lower.cpu().numpy(),
                        status=np.full(n, CENSORED, dtype=object),
                        adv_prediction=np.full(n, -1, dtype=np.int64),
                        forward_queries=np.zeros(n, dtype=np.int64),
                        seconds=np.full(n, seconds), meta={**meta, "closed": closed})


def network_or_none(module, input_shape, device) -> Network | None:
    """The network's graph, or ``None`` when bound propagation cannot read it."""
    try:
        return read_network(module, input_shape, device)
    except InputError:
        return None
