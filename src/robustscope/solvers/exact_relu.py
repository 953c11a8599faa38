"""Exact minimal perturbation of small ReLU networks by mixed-integer programming.

A network ``Sequential(Flatten?, Linear, ReLU, ..., Linear)`` is encoded exactly (Tjeng et al.,
ICLR 2019): every ReLU whose pre-activation can take both signs over the search domain gets a
binary variable and big-M constraints from interval bounds; stable ReLUs are linear. One binary
per candidate class selects which logit must overtake the label's. The objective is the Linf
(``t`` with ``-t <= u_i <= t``) or L1 (``u = p - m``) norm of the scaled perturbation
``u = (x' - x) / scale``; feature bounds and immutable features bound ``u``. L2 would make the
problem a mixed-integer QP, which HiGHS does not solve: it is not supported.

The search domain is the ball of an upper bound ``r_ub`` (from an attack's verified
counterexample), which makes the interval bounds tight and most ReLUs stable. HiGHS returns
the best counterexample found and a certified lower bound (its dual bound) within a time limit.
"""

from __future__ import annotations

import math
import time

import numpy as np
import scipy.sparse as sp
import torch
from scipy.optimize import Bounds, LinearConstraint, milp

from robustscope.core.errors import InputError
from robustscope.core.space import FeatureSpace
from robustscope.core.statuses import ATTACKED, CENSORED, EXACT
from robustscope.solvers.output import SolverOutput
from robustscope.solvers.relations import relation_rows
from robustscope.threats.lp import LpThreat

#: ReLUs at most this many: beyond, big-M programs rarely close within a sensible time.
MAX_RELUS = 2000


def relu_layers(module: torch.nn.Module) -> list[tuple[np.ndarray, np.ndarray]]:
    """``[(W, b), ...]`` (float64) of a feed-forward ReLU network, ReLU between consecutive
    pairs; raises :class:`InputError` for any other architecture.

    Reads a ``torch.nn.Sequential``, the same saved as TorchScript (scripted or traced: the
    scripted module keeps the Sequential's layers) or a ``torch.export`` program's module
    (its graph of ``linear`` / ``relu`` calls)."""
    ops = _operations(module)
    layers: list[tuple[np.ndarray, np.ndarray]] = []
    expect_relu = False
    for i, (kind, what, w, b) in enumerate(ops):
        if kind == "skip" and not layers:
            continue
        if kind == "linear" and not expect_relu:
            w = w.detach().cpu().double().numpy()
            b = b.detach().cpu().double().numpy() if b is not None else np.zeros(w.shape[0])
            layers.append((w, b))
            expect_relu = True
        elif kind == "relu" and expect_relu and i < len(ops) - 1:
            expect_relu = False
        else:
            raise InputError(
                f"the exact network solver takes Sequential(Flatten?, Linear, ReLU, ..., Linear); "
                f"layer {i} is {what}")
    if not layers or not expect_relu:
        raise InputError("the exact network solver needs a network ending in a Linear layer")
    relus = sum(w.shape[0] for w, _ in layers[:-1])
    if relus > MAX_RELUS:
        raise InputError(f"the network has {relus} ReLUs; the exact solver takes at most "
                         f"{MAX_RELUS}")
    return layers


def _operations(module) -> list[tuple[str, str, torch.Tensor | None, torch.Tensor | None]]:
    """The network as a chain of ``(kind, name, weight, bias)``, kind one of ``linear``,
    ``relu``, ``skip`` (flatten, identity) or ``other``."""
    if isinstance(module, torch.fx.GraphModule):
        return _graph_operations(module)
    script = isinstance(module, torch.jit.ScriptModule)
    name = getattr(module, "original_name", None) if script else type(module).__name__
    if isinstance(module, torch.nn.Sequential) or (script and name == "Sequential"):
        return [_module_operation(m) for m in module.children()]
    return [_module_operation(module)]


def _module_operation(m) -> tuple:
    """One layer of a Sequential, plain or TorchScript (whose type is its ``original_name``)."""
    name = (getattr(m, "original_name", type(m).__name__)
            if isinstance(m, torch.jit.ScriptModule) else type(m).__name__)
    if name == "Linear":
        return ("linear", name, m.weight, getattr(m, "bias", None))
    if name == "ReLU":
        return ("relu", name, None, None)
    if name in ("Flatten", "Identity"):
        return ("skip", name, None, None)
    return ("other", name, None, None)


def _graph_operations(gm: torch.fx.GraphModule) -> list[tuple]:
    """A ``torch.export`` module's graph as a chain: every call takes the previous one's
    output (the input first); parameters are read from the module."""
    aten = torch.ops.aten
    kinds = {aten.linear.default: "linear", aten.relu.default: "relu",
             aten.flatten.using_ints: "skip"}
    ops: list[tuple] = []
    current = None
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            continue
        if node.op == "placeholder":
            if current is not None:
                return [("other", "a second input", None, None)]
            current = node
            continue
        if node.op == "call_module" and not node.users:
            continue  # export's guard function
        if node.op == "output":
            outs = node.args[0]
            outs = outs if isinstance(outs, (tuple, list)) else (outs,)
            if len(outs) != 1 or outs[0] is not current:
                ops.append(("other", "an output that is not the last layer's", None, None))
            return ops
        kind = kinds.get(node.target, "other") if node.op == "call_function" else "other"
        name = str(node.target)
        if not node.args or node.args[0] is not current or len(node.users) > 1:
            kind = "other"
        if kind == "linear":
            params = [_attribute(gm, a.target) if getattr(a, "op", None) == "get_attr"
                      else None for a in node.args[1:3]]
            if params[0] is None or (len(node.args) > 2 and params[1] is None):
                kind = "other"
            ops.append((kind, name, params[0], params[1] if len(params) > 1 else None))
        else:
            ops.append((kind, name, None, None))
        current = node
    return ops


def _attribute(module, target: str) -> torch.Tensor:
    for part in target.split("."):
        module = getattr(module, part)
    return module


def exact_relu_radius(
    layers: list[tuple[np.ndarray, np.ndarray]],
    x: np.ndarray,
    y: np.ndarray,
    upper: np.ndarray,
    space: FeatureSpace,
    threat: LpThreat,
    time_limit: float = 10.0,
) -> SolverOutput:
    """Certified lower bound and MILP counterexample for each input.

    ``x`` (n, d) original units, ``y`` (n,) predicted classes, ``upper`` (n,) a verified upper
    bound of each radius (the MILP searches the ball of that radius; ``inf`` = the whole box,
    allowed only when every feature is bounded). ``time_limit`` in seconds per input.

    Returns a :class:`~robustscope.solvers.output.SolverOutput`: ``lower_bound`` certified;
    ``x_adv`` the MILP's incumbent where it has one (the input elsewhere, radius ``inf``);
    status ``exact`` where the MILP closed its gap.
    """
    if threat.p not in (1.0, math.inf):
        raise InputError(f"the exact network solver supports linf and l1, not {threat.name} "
                         "(an L2 objective makes a mixed-integer QP)")
    x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    n, d = x.shape
    lo_all, hi_all = space.delta_bounds(torch.as_tensor(x))
    lower = np.zeros(n)
    u_out = np.full((n, d), np.nan)
    closed = np.zeros(n, dtype=bool)
    seconds = np.zeros(n)
    for i in range(n):
        t0 = time.perf_counter()
        lo, hi = lo_all[i].numpy(), hi_all[i].numpy()
        r = float(upper[i])
        if math.isfinite(r):
            lo, hi = np.maximum(lo, -r), np.minimum(hi, r)
        if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
            raise InputError("the exact network solver needs a finite search box: give an "
                             "upper bound (an attack's radius) or bounded features")
        res = _solve_one(layers, x[i], int(y[i]), lo, hi, space.scale, threat, time_limit, r,
                         space.relations)
        if res is not None:
            lower[i], u_i, closed[i] = res
            if u_i is not None:
                u_out[i] = u_i
        seconds[i] = time.perf_counter() - t0
    found = ~np.isnan(u_out).any(axis=1)
    u = np.where(found[:, None], u_out, 0.0)
    x_adv = space.apply_delta(torch.as_tensor(x), torch.as_tensor(u))
    radius = np.where(found, threat.norm(torch.as_tensor(u)).numpy(), np.inf)
    status = np.where(closed & found, EXACT, np.where(found, ATTACKED, CENSORED))
    return SolverOutput(x_adv=x_adv, radius=radius, lower_bound=lower,
                        status=status.astype(object), adv_prediction=np.full(n, -1),
                        forward_queries=np.zeros(n, dtype=np.int64), seconds=seconds)


def _interval_bounds(layers, x, lo, hi, scale, l1_radius: float = math.inf):
    """Interval pre-activation bounds ``[(L, U), ...]`` of every layer over the box (and, for
    the first layer, the L1 ball of ``l1_radius``: ``|w . (s * u)| <= r max_i |w_i s_i|``)."""
    a_lo, a_hi = x + lo * scale, x + hi * scale
    bounds = []
    for k, (w, b) in enumerate(layers):
        center, radius = (a_lo + a_hi) / 2, (a_hi - a_lo) / 2
        z_c, z_r = w @ center + b, np.abs(w) @ radius
        if k == 0 and math.isfinite(l1_radius):
            ball_c = w @ x + b
            ball_r = l1_radius * np.abs(w * scale).max(axis=1)
            z_lo = np.maximum(z_c - z_r, ball_c - ball_r)
            z_hi = np.minimum(z_c + z_r, ball_c + ball_r)
            z_c, z_r = (z_lo + z_hi) / 2, (z_hi - z_lo) / 2
        bounds.append((z_c - z_r, z_c + z_r))
        if k < len(layers) - 1:
            a_lo, a_hi = np.maximum(z_c - z_r, 0), np.maximum(z_c + z_r, 0)
    return bounds


def _solve_one(layers, x, y, lo, hi, scale, threat, time_limit, r_ub, relations=None):
    d = len(x)
    linf = threat.p == math.inf
    bounds = _interval_bounds(layers, x, lo, hi, scale, math.inf if linf else r_ub)
    w_out, b_out = layers[-1]
    k = w_out.shape[0]
    # --- variables: perturbation, objective helper, activations, ReLU phases, class choice
    var_lo: list[np.ndarray] = []
    var_hi: list[np.ndarray] = []
    cost: list[np.ndarray] = []
    integer: list[np.ndarray] = []

    def add(lo_v, hi_v, c, is_int=False) -> tuple[int, int]:
        start = sum(len(v) for v in var_lo)
        var_lo.append(np.asarray(lo_v, float))
        var_hi.append(np.asarray(hi_v, float))
        cost.append(np.asarray(c, float))
        integer.append(np.full(len(var_lo[-1]), 1 if is_int else 0))
        return start, start + len(var_lo[-1])  # a column range (slices are unhashable)

    rows, row_lo, row_hi = [], [], []

    def constrain(coefs: dict[tuple[int, int], np.ndarray], low: np.ndarray,
                  high: np.ndarray) -> None:
        rows.append(coefs)
        row_lo.append(np.asarray(low, float))
        row_hi.append(np.asarray(high, float))

    if linf:
        u_sl = add(lo, hi, np.zeros(d))
        t_sl = add([0.0], [max(np.abs(lo).max(), np.abs(hi).max())], [1.0])
        eye = sp.identity(d, format="csr")
        ones = sp.csr_matrix(np.ones((d, 1)))
        constrain({u_sl: eye, t_sl: -ones}, np.full(d, -np.inf), np.zeros(d))
        constrain({u_sl: -eye, t_sl: -ones}, np.full(d, -np.inf), np.zeros(d))
        u_terms = [(u_sl, 1.0)]
    else:
        p_sl = add(np.zeros(d), np.maximum(hi, 0), np.ones(d))
        m_sl = add(np.zeros(d), np.maximum(-lo, 0), np.ones(d))
        u_terms = [(p_sl, 1.0), (m_sl, -1.0)]
        if math.isfinite(r_ub):  # the objective cut tightens the LP relaxation
            row = sp.csr_matrix(np.ones((1, d)))
            constrain({p_sl: row, m_sl: row}, [-np.inf], [r_ub])

    if relations is not None and not relations.is_linear_empty:
        # relations between features, on x + u * scale (u = p - m for L1)
        rel, rel_lo, rel_hi = relation_rows(relations, np.arange(d), x, scale, d)
        constrain({sl: sign * rel for sl, sign in u_terms}, rel_lo, rel_hi)

    # a_prev as (terms: [(slice, matrix)], constant)
    prev_terms = [(sl, sign * sp.diags(scale)) for sl, sign in u_terms]
    prev_const = x.copy()
    for li, (w, b) in enumerate(layers[:-1]):
        z_lo, z_hi = bounds[li]
        width = w.shape[0]
        a_sl = add(np.zeros(width), np.maximum(z_hi, 0), np.zeros(width))
        z_terms = [(sl, sp.csr_matrix(w) @ m) for sl, m in prev_terms]
        z_const = w @ prev_const + b
        active = z_lo >= 0
        unstable = (z_lo < 0) & (z_hi > 0)
        idx_a = np.flatnonzero(active)
        if len(idx_a):  # a = z
            coefs = {sl: -m[idx_a] for sl, m in z_terms}
            coefs = _merge(coefs, a_sl, _select(width, idx_a))
            constrain(coefs, z_const[idx_a], z_const[idx_a])
        idx_u = np.flatnonzero(unstable)
        if len(idx_u):
            dl_sl = add(np.zeros(len(idx_u)), np.ones(len(idx_u)), np.zeros(len(idx_u)), True)
            sel = _select(width, idx_u)
            eye_u = sp.identity(len(idx_u), format="csr")
            lz, uz = z_lo[idx_u], z_hi[idx_u]
            # a >= z
            coefs = _merge({sl: -m[idx_u] for sl, m in z_terms}, a_sl, sel)
            constrain(coefs, z_const[idx_u], np.full(len(idx_u), np.inf))
            # a <= z - L (1 - delta)  <=>  a - z - L delta <= -L + const
            coefs = _merge({sl: -m[idx_u] for sl, m in z_terms}, a_sl, sel)
            coefs[dl_sl] = -sp.diags(lz) @ eye_u
            constrain(coefs, np.full(len(idx_u), -np.inf), z_const[idx_u] - lz)
            # a <= U delta
            constrain({a_sl: sel, dl_sl: -sp.diags(uz) @ eye_u}, np.full(len(idx_u), -np.inf),
                      np.zeros(len(idx_u)))
        prev_terms = [(a_sl, sp.identity(width, format="csr"))]
        prev_const = np.zeros(width)

    # output: some class j must reach the label's logit
    out_lo, out_hi = _difference_bounds(bounds, layers, prev_terms, x, lo, hi, scale, y)
    candidates = [j for j in range(k) if j != y and out_hi[j] >= 0]
    if not candidates:
        return math.inf, None, True  # no decision change inside the box: radius > r_ub
    s_sl = add(np.zeros(len(candidates)), np.ones(len(candidates)), np.zeros(len(candidates)),
               True)
    z_terms = [(sl, sp.csr_matrix(w_out) @ m) for sl, m in prev_terms]
    z_const = w_out @ prev_const + b_out
    for c, j in enumerate(candidates):
        coefs = {sl: m[[j]] - m[[y]] for sl, m in z_terms}
        big_m = max(0.0, -out_lo[j])
        sel = sp.csr_matrix(([-big_m], ([0], [c])), shape=(1, len(candidates)))
        coefs[s_sl] = sel
        # z_j - z_y >= -M (1 - s_j)  <=>  row.v - M s_j >= -M - (const_j - const_y)
        constrain(coefs, [-big_m - (z_const[j] - z_const[y])], [np.inf])
    constrain({s_sl: sp.csr_matrix(np.ones((1, len(candidates))))}, [1.0], [1.0])

    n_var = sum(len(v) for v in var_lo)
    matrix = sp.vstack([_row_block(r, n_var) for r in rows], format="csr")
    res = milp(np.concatenate(cost), integrality=np.concatenate(integer),
               bounds=Bounds(np.concatenate(var_lo), np.concatenate(var_hi)),
               constraints=LinearConstraint(matrix, np.concatenate(row_lo),
                                            np.concatenate(row_hi)),
               options={"time_limit": time_limit, "mip_rel_gap": 1e-7})
    lower = getattr(res, "mip_dual_bound", None)
    lower = 0.0 if lower is None or not np.isfinite(lower) else max(0.0, float(lower))
    if res.status == 2:  # infeasible: no decision change inside the box
        return math.inf, None, True
    if res.x is None:
        return lower, None, False
    v = res.x
    u = sum(sign * v[slice(*sl)] for sl, sign in u_terms)
    value = float(res.fun)
    return min(lower, value), u, res.status == 0


def _select(width: int, idx: np.ndarray) -> sp.csr_matrix:
    return sp.csr_matrix((np.ones(len(idx)), (np.arange(len(idx)), idx)),
                         shape=(len(idx), width))


def _merge(coefs: dict, sl: tuple[int, int], m) -> dict:
    coefs = dict(coefs)
    coefs[sl] = coefs[sl] + m if sl in coefs else m
    return coefs


def _row_block(coefs: dict[tuple[int, int], sp.spmatrix], n_var: int) -> sp.csr_matrix:
    """Place each column range's coefficient block into one row block of ``n_var`` columns."""
    parts = []
    for (start, stop), m in coefs.items():
        m = sp.coo_matrix(m)
        parts.append(sp.coo_matrix((m.data, (m.row, m.col + start)),
                                   shape=(m.shape[0], n_var)))
        assert m.shape[1] == stop - start
    return sum(parts[1:], parts[0]).tocsr()


def _difference_bounds(bounds, layers, prev_terms, x, lo, hi, scale, y):
    """Interval bounds of ``z_j - z_y`` from the last hidden layer's activation bounds."""
    w_out, b_out = layers[-1]
    if len(layers) == 1:
        a_lo, a_hi = x + lo * scale, x + hi * scale
    else:
        z_lo, z_hi = bounds[-2]
        a_lo, a_hi = np.maximum(z_lo, 0), np.maximum(z_hi, 0)
    diff = w_out - w_out[y]
    center, radius = (a_lo + a_hi) / 2, (a_hi - a_lo) / 2
    c = diff @ center + (b_out - b_out[y])
    r = np.abs(diff) @ radius
    return c - r, c + r
