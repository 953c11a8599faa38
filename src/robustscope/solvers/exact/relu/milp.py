"""Exact minimal perturbation of ReLU networks by mixed-integer programming.

The network is read into the graph of :mod:`robustscope.solvers.bounds.graph` (Linear,
Conv, BatchNorm, pooling, residual sums, standardising layers; max-pooling as ReLUs) and
encoded exactly (Tjeng et al., ICLR 2019): one continuous vector per node, equality rows for
affine maps and sums, and per ReLU

- stable neurons fixed by their pre-activation bounds (``l >= 0``: ``a = z``; ``u <= 0``:
  ``a = 0``);
- unstable ones with a binary ``delta`` and big-M rows from the tight bounds:
  ``a >= z``, ``a <= z - l (1 - delta)``, ``a <= u delta``.

Pre-activation bounds come from CROWN (:mod:`robustscope.solvers.bounds.propagate`) over
the search domain, intersected with interval bounds; they make most ReLUs stable and big-M
small. One binary per candidate class selects which logit must overtake the label's (a class
whose CROWN margin bound is positive cannot, and gets no binary; big-M of the others is their
CROWN margin bound). The objective is the Linf (``t`` with ``-t <= u_i <= t``) or L1
(``u = p - m``) norm of the scaled perturbation ``u = (x' - x) / scale``; feature bounds and
immutable features bound ``u``. Mutable integer, binary and one-hot (categorical) features
get an integer column ``k_i = u_i * scale_i`` (their step in raw units; the input is
integral there, so ``x'`` is), and the steps of each one-hot group sum to zero (one arm stays
on); relations between features add their rows.

The search domain is the ball of an upper bound ``r_ub`` (from an attack's verified
counterexample). HiGHS returns the best counterexample found and a certified lower bound
(its dual bound) within a time limit: on a time limit the result is the best certified bound
reached.

L2 is not supported: its objective makes a mixed-integer program with a quadratic (or
second-order cone) objective, which ``scipy.optimize.milp`` / HiGHS does not solve; for L2
the certified bound of bound propagation (``certify=``) is what robustscope offers.
"""

from __future__ import annotations

import math
import time

import numpy as np
import scipy.sparse as sp
import torch

from robustscope.core.errors import InputError
from robustscope.core.space import FeatureSpace
from robustscope.core.statuses import ATTACKED, CENSORED, EXACT
from robustscope.solvers.bounds.domain import make_domain
from robustscope.solvers.bounds.graph import AFFINE, INPUT, SUM, Network, read_network
from robustscope.solvers.bounds.propagate import (
    backward_bound,
    interval_bounds,
    margin_spec,
    preactivation_bounds,
)
from robustscope.solvers.milp.highs import MipResult, scipy_milp
from robustscope.solvers.milp.relation_rows import relation_rows
from robustscope.solvers.output import SolverOutput
from robustscope.threats.lp import LpThreat

#: ReLUs at most this many (:func:`relu_layers`, the plain-MLP reader).
MAX_RELUS = 2000
#: Unstable ReLUs (binaries) at most this many per input; beyond, the input's MILP is not
#: attempted (its bound stays the CROWN bound the search holds).
MAX_BINARIES = 3000
#: Relative optimality gap asked of HiGHS.
MIP_REL_GAP = 1e-7


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


def as_network(network, input_shape: tuple[int, ...], device="cpu") -> Network:
    """A :class:`Network` from a graph, a torch module or a ``[(W, b), ...]`` ReLU chain."""
    if isinstance(network, Network):
        return network
    if isinstance(network, list):
        mods: list[torch.nn.Module] = []
        for k, (w, b) in enumerate(network):
            lin = torch.nn.Linear(w.shape[1], w.shape[0]).double()
            with torch.no_grad():
                lin.weight.copy_(torch.as_tensor(w))
                lin.bias.copy_(torch.as_tensor(b))
            mods += [lin] if k == len(network) - 1 else [lin, torch.nn.ReLU()]
        network = torch.nn.Sequential(*mods)
        input_shape = (network[0].in_features,)
    return read_network(network, tuple(input_shape), device)


def exact_relu_radius(
    layers,
    x: np.ndarray,
    y: np.ndarray,
    upper: np.ndarray,
    space: FeatureSpace,
    threat: LpThreat,
    time_limit: float = 10.0,
) -> SolverOutput:
    """Certified lower bound and MILP counterexample for each input.

    ``layers`` a :class:`~robustscope.solvers.bounds.graph.Network`, a torch module or
    ``[(W, b), ...]`` (:func:`relu_layers`); ``x`` ``(n, *shape)`` original units, ``y``
    ``(n,)`` predicted classes, ``upper`` ``(n,)`` a verified upper bound of each radius
    (the MILP searches the ball of that radius; ``inf`` = the whole box, allowed only when
    every feature is bounded). ``time_limit`` in seconds per input.

    Returns a :class:`~robustscope.solvers.output.SolverOutput`: ``lower_bound`` certified
    (``inf`` where no decision change lies inside the ball); ``x_adv`` the MILP's incumbent
    where it has one (the input elsewhere, radius ``inf``); status ``exact`` where the MILP
    closed its gap; ``meta["binaries"]`` the unstable ReLUs per input.
    """
    if threat.p not in (1.0, math.inf):
        raise InputError(f"the exact network solver supports linf and l1, not {threat.name} "
                         "(an L2 objective makes a mixed-integer QP, which HiGHS does not "
                         "solve)")
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    net = as_network(layers, tuple(x.shape[1:]))
    flat = torch.as_tensor(x.reshape(n, -1), dtype=torch.float64, device=net.device)
    lo, hi = space.delta_bounds(flat)
    r_ub = torch.as_tensor(np.asarray(upper, dtype=np.float64), device=net.device)
    dom = make_domain(flat, lo, hi, space.scale, r_ub, threat.p)
    box_lo, box_hi = dom.box()
    if not (torch.isfinite(box_lo).all() and torch.isfinite(box_hi).all()):
        raise InputError("the exact network solver needs a finite search box: give an "
                         "upper bound (an attack's radius) or bounded features")
    y_t = torch.as_tensor(np.asarray(y), device=net.device).long()
    with torch.no_grad():
        ibp = interval_bounds(net, dom)
        pre = preactivation_bounds(net, dom, ibp)
        spec = margin_spec(y_t, net.n_classes)
        last = len(net.nodes) - 1
        # lower bounds of z_y - z_j (who can overtake) and of z_j - z_y (big-M)
        margin = backward_bound(net, dom, pre, last, spec)
        reverse = backward_bound(net, dom, pre, last, -spec)
    matrices = affine_matrices(net)
    lower = np.zeros(n)
    u_out = np.full((n, flat.shape[1]), np.nan)
    closed = np.zeros(n, dtype=bool)
    seconds = np.zeros(n)
    binaries = np.zeros(n, dtype=np.int64)
    for i in range(n):
        t0 = time.perf_counter()
        nodes = {k: (v[0][i].reshape(-1).cpu().numpy(), v[1][i].reshape(-1).cpu().numpy())
                 for k, v in ibp.items()}
        for k, (zl, zu) in pre.items():
            nodes[k] = (zl[i].reshape(-1).cpu().numpy(), zu[i].reshape(-1).cpu().numpy())
        binaries[i] = _count_unstable(net, nodes)
        if binaries[i] > MAX_BINARIES:
            seconds[i] = time.perf_counter() - t0
            continue
        res = _solve_one(net, matrices, x[i].reshape(-1), int(y[i]), nodes,
                         margin[i].cpu().numpy(), reverse[i].cpu().numpy(),
                         box_lo[i].cpu().numpy(),
                         box_hi[i].cpu().numpy(), space.scale, threat, time_limit,
                         float(upper[i]), getattr(space, "relations", None),
                         lattice_of(space))
        lower[i], u_i, closed[i] = res
        if u_i is not None:
            u_out[i] = u_i
        seconds[i] = time.perf_counter() - t0
    found = ~np.isnan(u_out).any(axis=1)
    u = np.where(found[:, None], u_out, 0.0)
    x_t = torch.as_tensor(x)
    x_adv = space.apply_delta(x_t, torch.as_tensor(u))
    radius = np.where(found, threat.norm(torch.as_tensor(u)).numpy(), np.inf)
    status = np.where(closed & found, EXACT, np.where(found, ATTACKED, CENSORED))
    return SolverOutput(x_adv=x_adv, radius=radius, lower_bound=lower,
                        status=status.astype(object), adv_prediction=np.full(n, -1),
                        forward_queries=np.zeros(n, dtype=np.int64), seconds=seconds,
                        meta={"binaries": binaries})


def lattice_of(space: FeatureSpace) -> tuple[np.ndarray, list[np.ndarray]] | None:
    """``(discrete, groups)``: the mutable integer / binary / categorical features (indices)
    and the one-hot groups of ``space``; ``None`` where every mutable feature is real."""
    if not space.has_discrete:
        return None
    discrete = np.flatnonzero(space.mutable & (space.types != "real"))
    return discrete, [np.asarray(g) for g in space.groups]


def affine_matrices(net: Network, chunk: int = 512) -> dict[int, sp.csr_matrix]:
    """Per affine node, the sparse matrix ``W`` (node size x parent size) of its linear
    part, read by applying the map to the parent's unit vectors (in chunks)."""
    out = {}
    for k, nd in enumerate(net.nodes):
        if nd.kind != AFFINE:
            continue
        parent = net.nodes[nd.parents[0]]
        if nd.transpose is not None and isinstance(nd.fn, torch.nn.Linear):
            out[k] = sp.csr_matrix(nd.fn.weight.detach().cpu().numpy())
            continue
        blocks = []
        with torch.no_grad():
            for start in range(0, parent.size, chunk):
                stop = min(parent.size, start + chunk)
                eye = torch.zeros(stop - start, parent.size, dtype=torch.float64,
                                  device=net.device)
                eye[torch.arange(stop - start), torch.arange(start, stop)] = 1.0
                cols = nd.fn(eye.reshape(-1, *parent.shape)) - nd.bias
                blocks.append(sp.csr_matrix(cols.reshape(stop - start, -1).cpu().numpy()))
        out[k] = sp.vstack(blocks).T.tocsr()
        out[k].eliminate_zeros()
    return out


def _count_unstable(net: Network, nodes) -> int:
    count = 0
    for r in net.relus:
        zl, zu = nodes[net.nodes[r].parents[0]]
        count += int(((zl < 0) & (zu > 0)).sum())
    return count


class _Program:
    """Columns (variables with bounds, costs, integrality) and row blocks of one MILP."""

    def __init__(self) -> None:
        self.lo: list[np.ndarray] = []
        self.hi: list[np.ndarray] = []
        self.cost: list[np.ndarray] = []
        self.integer: list[np.ndarray] = []
        self.rows: list[dict[tuple[int, int], sp.spmatrix]] = []
        self.row_lo: list[np.ndarray] = []
        self.row_hi: list[np.ndarray] = []

    @property
    def n_var(self) -> int:
        return sum(len(v) for v in self.lo)

    def add(self, lo, hi, cost=None, integer: bool = False) -> tuple[int, int]:
        """New columns; returns their range ``(start, stop)``."""
        lo = np.asarray(lo, float).reshape(-1)
        start = self.n_var
        self.lo.append(lo)
        self.hi.append(np.asarray(hi, float).reshape(-1))
        self.cost.append(np.zeros(len(lo)) if cost is None else np.asarray(cost, float))
        self.integer.append(np.full(len(lo), 1 if integer else 0))
        return start, start + len(lo)

    def constrain(self, coefs: dict, low, high) -> None:
        """Rows ``low <= sum_block coefs[block] @ columns(block) <= high``."""
        self.rows.append(coefs)
        self.row_lo.append(np.asarray(low, float).reshape(-1))
        self.row_hi.append(np.asarray(high, float).reshape(-1))

    def solve(self, time_limit: float) -> MipResult:
        """Solve with ``scipy.optimize.milp`` (HiGHS; relative gap :data:`MIP_REL_GAP`)."""
        n_var = self.n_var
        matrix = sp.vstack([_row_block(r, n_var) for r in self.rows], format="csr")
        return scipy_milp(np.concatenate(self.cost), np.concatenate(self.integer),
                          np.concatenate(self.lo), np.concatenate(self.hi), matrix,
                          np.concatenate(self.row_lo), np.concatenate(self.row_hi),
                          options={"time_limit": time_limit, "mip_rel_gap": MIP_REL_GAP})


def assemble(net: Network, matrices, x, y, nodes, margin, reverse, box_lo, box_hi, scale,
             threat: LpThreat, r_ub: float, relations=None, lattice=None
             ) -> tuple[_Program, list, list[int]] | None:
    """Every row of one input's MILP, in one place: the perturbation and its norm, the
    network, the decision change. Returns ``(program, u_terms, candidates)``, or ``None``
    when no class can overtake ``y`` (its margin bound is positive for every class).

    ``nodes`` maps every node to its value bounds ``(lower, upper)`` (flat arrays),
    ``margin[j]`` / ``reverse[j]`` are lower bounds of ``z_y - z_j`` / ``z_j - z_y``;
    ``relations`` (the feature space's) add their linear rows on ``x + u * scale``. The
    bounds, computed without the relations, stay valid (the program's set only shrinks).
    ``lattice`` (:func:`lattice_of`) makes the discrete features' steps integral and keeps
    each one-hot group one-hot; the bounds, computed on the relaxation, stay valid too.

    ``u_terms`` ``[(columns, sign)]`` give ``u`` (``sum sign * columns``)."""
    k_out = net.n_classes
    candidates = [j for j in range(k_out) if j != y and margin[j] <= 0]
    if not candidates:
        return None
    prog = _Program()
    d = len(x)
    # -- perturbation and objective
    u_sl = prog.add(box_lo, box_hi)
    eye = sp.identity(d, format="csr")
    if threat.p == math.inf:
        t_sl = prog.add([0.0], [max(np.abs(box_lo).max(), np.abs(box_hi).max())], [1.0])
        ones = sp.csr_matrix(np.ones((d, 1)))
        prog.constrain({u_sl: eye, t_sl: -ones}, np.full(d, -np.inf), np.zeros(d))
        prog.constrain({u_sl: -eye, t_sl: -ones}, np.full(d, -np.inf), np.zeros(d))
    else:
        p_sl = prog.add(np.zeros(d), np.maximum(box_hi, 0), np.ones(d))
        m_sl = prog.add(np.zeros(d), np.maximum(-box_lo, 0), np.ones(d))
        prog.constrain({u_sl: eye, p_sl: -eye, m_sl: eye}, np.zeros(d), np.zeros(d))
        if math.isfinite(r_ub):  # the objective cut tightens the LP relaxation
            row = sp.csr_matrix(np.ones((1, d)))
            prog.constrain({p_sl: row, m_sl: row}, [-np.inf], [r_ub])
    if relations is not None and not relations.is_linear_empty:
        # relations between features, on x' = x + u * scale
        rel, rel_lo, rel_hi = relation_rows(relations, np.arange(d), x, scale, d)
        prog.constrain({u_sl: rel}, rel_lo, rel_hi)
    if lattice is not None:
        _lattice_rows(prog, u_sl, lattice, box_lo, box_hi, scale, d)
    # -- the network: node value = terms (column range -> matrix) + constant
    values: list[tuple[dict, np.ndarray]] = []
    for k, nd in enumerate(net.nodes):
        if nd.kind == INPUT:
            values.append(({u_sl: sp.diags(scale)}, x.copy()))
            continue
        zl, zu = nodes[k]
        if nd.kind == AFFINE:
            terms, const = values[nd.parents[0]]
            w = matrices[k]
            bias = nd.bias.reshape(-1).cpu().numpy()
            col = prog.add(zl, zu)
            coefs = {sl: -(w @ m) for sl, m in terms.items()}
            coefs = _merge(coefs, col, sp.identity(nd.size, format="csr"))
            prog.constrain(coefs, w @ const + bias, w @ const + bias)
            values.append(({col: sp.identity(nd.size, format="csr")}, np.zeros(nd.size)))
        elif nd.kind == SUM:
            col = prog.add(zl, zu)
            coefs: dict = {col: sp.identity(nd.size, format="csr")}
            const = np.zeros(nd.size)
            for p in nd.parents:
                terms, c = values[p]
                for sl, m in terms.items():
                    coefs = _merge(coefs, sl, -m)
                const = const + c
            prog.constrain(coefs, const, const)
            values.append(({col: sp.identity(nd.size, format="csr")}, np.zeros(nd.size)))
        else:
            values.append(_relu_rows(prog, values[nd.parents[0]], *nodes[nd.parents[0]]))
    # -- the decision change: some candidate j reaches the label's logit
    terms, const = values[-1]
    s_sl = prog.add(np.zeros(len(candidates)), np.ones(len(candidates)), integer=True)
    for c, j in enumerate(candidates):
        coefs = {sl: m[[j]] - m[[y]] for sl, m in terms.items()}
        big_m = max(0.0, -float(reverse[j]))
        coefs[s_sl] = sp.csr_matrix(([-big_m], ([0], [c])), shape=(1, len(candidates)))
        # z_j - z_y >= -M (1 - s_j)  <=>  row . v - M s_j >= -M - (const_j - const_y)
        prog.constrain(coefs, [-big_m - (const[j] - const[y])], [np.inf])
    prog.constrain({s_sl: sp.csr_matrix(np.ones((1, len(candidates))))}, [1.0], [1.0])
    return prog, ([(u_sl, 1.0)]), candidates


def _lattice_rows(prog: _Program, u_sl: tuple[int, int], lattice, box_lo: np.ndarray,
                  box_hi: np.ndarray, scale: np.ndarray, d: int) -> None:
    """Integer steps ``k = u * scale`` (raw units) of the discrete features, within the
    search box; the steps of each one-hot group sum to zero."""
    discrete, groups = lattice
    if len(discrete) == 0:
        return
    m = len(discrete)
    k_lo = np.ceil(box_lo[discrete] * scale[discrete] - 1e-9)
    k_hi = np.floor(box_hi[discrete] * scale[discrete] + 1e-9)
    k_sl = prog.add(np.minimum(k_lo, 0.0), np.maximum(k_hi, 0.0), integer=True)
    pick = sp.csr_matrix((scale[discrete], (np.arange(m), discrete)), shape=(m, d))
    prog.constrain({u_sl: pick, k_sl: -sp.identity(m, format="csr")}, np.zeros(m),
                   np.zeros(m))
    where = {int(f): c for c, f in enumerate(discrete)}
    for g in groups:
        cols = [where[int(f)] for f in g if int(f) in where]
        if cols:
            row = sp.csr_matrix((np.ones(len(cols)), (np.zeros(len(cols), int), cols)),
                                shape=(1, m))
            prog.constrain({k_sl: row}, [0.0], [0.0])


def _relu_rows(prog: _Program, parent, zl: np.ndarray, zu: np.ndarray):
    """Rows of ``a = relu(z)`` for ``z`` = ``parent`` (terms, constant) within ``[zl, zu]``;
    returns ``a`` as (terms, constant)."""
    terms, const = parent
    width = len(zl)
    a_sl = prog.add(np.zeros(width), np.maximum(zu, 0))
    sel_all = sp.identity(width, format="csr")
    idx_a = np.flatnonzero(zl >= 0)
    if len(idx_a):  # active: a = z
        coefs = _merge({sl: -m[idx_a] for sl, m in terms.items()}, a_sl, sel_all[idx_a])
        prog.constrain(coefs, const[idx_a], const[idx_a])
    idx_u = np.flatnonzero((zl < 0) & (zu > 0))
    if len(idx_u):
        m_u = len(idx_u)
        dl_sl = prog.add(np.zeros(m_u), np.ones(m_u), integer=True)
        sel = sel_all[idx_u]
        eye_u = sp.identity(m_u, format="csr")
        lz, uz = zl[idx_u], zu[idx_u]
        # a >= z
        coefs = _merge({sl: -m[idx_u] for sl, m in terms.items()}, a_sl, sel)
        prog.constrain(coefs, const[idx_u], np.full(m_u, np.inf))
        # a <= z - L (1 - delta)  <=>  a - z - L delta <= -L + const
        coefs = _merge({sl: -m[idx_u] for sl, m in terms.items()}, a_sl, sel)
        coefs[dl_sl] = -sp.diags(lz) @ eye_u
        prog.constrain(coefs, np.full(m_u, -np.inf), const[idx_u] - lz)
        # a <= U delta
        prog.constrain({a_sl: sel, dl_sl: -sp.diags(uz) @ eye_u}, np.full(m_u, -np.inf),
                       np.zeros(m_u))
    # dead neurons: a's upper bound max(zu, 0) = 0 already fixes a = 0
    return {a_sl: sel_all}, np.zeros(width)


def _solve_one(net, matrices, x, y, nodes, margin, reverse, box_lo, box_hi, scale, threat,
               time_limit, r_ub, relations=None, lattice=None):
    built = assemble(net, matrices, x, y, nodes, margin, reverse, box_lo, box_hi, scale,
                     threat, r_ub, relations, lattice)
    if built is None:
        return math.inf, None, True  # no decision change inside the box: radius > r_ub
    prog, u_terms, _ = built
    res = prog.solve(time_limit)
    lower = res.dual_bound
    lower = 0.0 if not np.isfinite(lower) else max(0.0, float(lower))
    if res.status == "infeasible":  # no decision change inside the box
        return math.inf, None, True
    if res.values is None:
        return lower, None, False
    v = res.values
    u = sum(sign * v[slice(*sl)] for sl, sign in u_terms)
    value = float(res.objective)
    return min(lower, value), u, res.status == "optimal"


def _merge(coefs: dict, sl: tuple[int, int], m) -> dict:
    coefs = dict(coefs)
    coefs[sl] = coefs[sl] + m if sl in coefs else m
    return coefs


def _row_block(coefs: dict[tuple[int, int], sp.spmatrix], n_var: int) -> sp.csr_matrix:
    """Place each column range's coefficient block into one row block of ``n_var`` columns."""
    parts = []
    for (start, stop), m in coefs.items():
        m = sp.coo_matrix(m)
        assert m.shape[1] == stop - start
        parts.append(sp.coo_matrix((m.data, (m.row, m.col + start)),
                                   shape=(m.shape[0], n_var)))
    return sum(parts[1:], parts[0]).tocsr()
