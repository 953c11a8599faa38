"""Branch and bound over unstable ReLUs: proves a decision that one bound pass cannot.

A *subdomain* is the input's domain (one strength ``eps``) with some unstable ReLUs fixed
to a side: *active* (pre-activation ``z >= 0``) or *inactive* (``z <= 0``). The two
children of a split cover their parent, so the decision is proven on the domain when it
is proven on every leaf of the tree.

The root's pre-activation bounds are tightened once by alpha-CROWN, node by node
(:func:`~robustscope.solvers.bounds.propagate.optimised_preactivation_bounds`); they hold
on every subdomain. On the tune digits of ``benchmarks/vnncomp_mnist.py`` (256x4 network,
eps 0.03) this alone turned a proof that gave up after 100 s (58,805 subdomains) into one
of 58 s (37,213). Each subdomain is then bounded in two steps:

1. pre-activation bounds with the fixed neurons' bounds clamped (an active neuron's lower
   bound becomes 0, so its relaxation is the identity; an inactive one's upper bound
   becomes 0): the root's bounds clamped, or, where it is cheap (:data:`REFRESH_WORK`),
   CROWN again from the root's bounds and the clamps (``preactivation_bounds(...,
   splits=...)``), later layers recomputed from the clamped ones; a fixed neuron whose
   bound leaves its side no value (an active one with ``u < 0``) makes the subdomain
   empty, which proves it;
2. the margins' bound with the split constraints carried in by Lagrange multipliers
   (beta-CROWN, Wang et al., NeurIPS 2021): for ``beta >= 0`` and sign ``s = +1``
   (active) / ``-1`` (inactive), ``min spec . f - sum beta s z`` over the whole domain is
   below ``min spec . f`` over the subdomain, where ``s z >= 0``; ``beta`` and the lower
   slopes ``alpha`` are optimised together by Adam (any ``alpha`` in [0, 1] and ``beta >=
   0`` give a valid bound). Without ``beta`` the split would only straighten the
   relaxation; with it, a subdomain with every neuron fixed is bounded by the dual of a
   linear program over its region, which is how the search can close.

Each margin left open at the root gets its own tree (lowest first), and a child starts its
Adam steps from the ``alpha`` and ``beta`` its parent ended with (the warm start of
beta-CROWN), so a few steps per subdomain suffice (:data:`STEPS`; :data:`ROOT_STEPS` at the
root). On a tune digit of ``benchmarks/vnncomp_mnist.py`` (256x4, eps 0.03, its hardest
margin) this proved in 12.5 s (36,211 subdomains, batches of 128) what starting every
subdomain from CROWN's slopes did not prove in 30 s, with 20 steps or with 3. On networks
of at least :data:`FAST_MIN_MACS` multiply-adds the steps run on a float32 copy of the graph
(:func:`fast_copy`), and the bound that decides is computed in float64 from the values they
reach, only for the subdomains the copy's last steps bring near the tolerance
(:func:`_may_prove`; the others are split on the copy's losses): 1.5 times the subdomains
per second on the 256x4 tune digits, and the skipped passes, fused Adam steps and a queue
that no longer copies itself per batch (:class:`Stack`) 1.27 and 1.21 times that again on
a 256x4 and a 256x6 tune digit (20 s searches, medians of three).

Branching fixes, per open subdomain, the unstable neuron whose upper line costs the bound
most (the intercept term of the BaBSR score of Bunel et al., JMLR 2020), read from the last
bound pass; where none costs anything, the one with the widest triangle ``-l u / (u - l)``.
Subdomains are bounded in batches (the batch dimension of every bound computation),
depth first, so the list of open subdomains stays short; the search gives up at a domain
budget or a deadline.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import minimize

from robustscope.solvers.bounds.cast import cast_network
from robustscope.solvers.bounds.domain import Domain
from robustscope.solvers.bounds.graph import Network
from robustscope.solvers.bounds.propagate import (
    Bounds,
    backward_bound,
    backward_work,
    crown_plan,
    linear_bound,
    margin_spec,
    optimised_preactivation_bounds,
    preactivation_bounds,
    relaxations,
)
from robustscope.solvers.milp.highs import scipy_lp

#: Subdomains bounded in one batch: where each subdomain's pre-activation bounds are
#: recomputed (:data:`REFRESH_WORK`), and where they are the root's clamped (cheap passes, so
#: fewer and larger batches; on a 256x4 tune digit of ``benchmarks/vnncomp_mnist.py`` a proof
#: of 36,181 subdomains took 15.9 s in batches of 128, 9.2 s in batches of 1,024).
BATCH = 128
BATCH_CLAMPED = 1024
#: Subdomains bounded at most per proof.
MAX_DOMAINS = 50_000
#: Adam steps on ``alpha`` and ``beta`` per batch of warm-started subdomains, at the root
#: (cold: CROWN's slopes), and their step size. On the tune digit above, 2, 3, 5 and 10
#: warm steps proved in 11.4, 12.5, 16.2 and 27.3 s (batches of 128); 8 steps proved none of
#: three harder tune digits that 3 did not prove either, in 60 s.
STEPS = 3
ROOT_STEPS = 20
LR = 0.1
#: Pre-activation bounds are recomputed for each subdomain (clamps carried into later
#: layers) where that costs at most this many coefficients (:func:`refresh_work`); else
#: they are computed once, over the whole domain, and only clamped. At 2 * 10 ** 6 the
#: 256x2 MNIST network of ``benchmarks/vnncomp_mnist.py`` (1,196,032) was refreshed: on its
#: tune digits that gave trees only a tenth smaller (277 against 307 subdomains, 898
#: against 1,024) at 20 to 50 times the time (4.1 s against 0.2 s, 15.8 s against 0.3 s).
REFRESH_WORK = 2 * 10 ** 5
#: Networks whose one-sample forward pass costs at least this many multiply-adds take
#: their Adam steps in float32 (:func:`fast_copy`). On smaller ones the passes are bound by
#: per-operation overhead, which float32 does not shorten: on the digits MLP of
#: ``benchmarks/certified.py`` (9,738 multiply-adds) float32 steps took as long per input
#: and closed one PGD-trained Linf bracket fewer (18 against 19 of 20, two runs each); the
#: 256x4 MNIST network (403,498) bounds 1.5 times the subdomains per second with them.
FAST_MIN_MACS = 10 ** 5
#: Where the Adam steps run on a copy, the bound that decides is computed only for the
#: subdomains that may reach ``tolerance`` (:func:`_may_prove`); the others are split. The
#: copy's rounding is allowed ``NEAR`` of the bound's size.
NEAR = 1e-3
#: Under L2, L-BFGS-B iterations on the multipliers of a subdomain with every ReLU fixed.
L2_LEAF_ITERATIONS = 100


@dataclass
class Outcome:
    """One branch and bound run on one input at one strength: ``proven`` (``True``: every
    subdomain's bound holds; ``False``: a subdomain with every unstable neuron fixed still
    fails, which proves nothing either way; ``None``: gave up at the domain budget or the
    deadline), ``domains`` bounded, ``seconds`` spent."""

    proven: bool | None
    domains: int
    seconds: float
    #: where ``proven`` is ``False`` under Linf / L1: the smallest scaled perturbation
    #: ``(d,)`` of the failing subdomain's region at which its lowest margin reaches 0 (a
    #: linear program): a candidate counterexample for the caller to verify with the model
    point: torch.Tensor | None = None


def prove(net: Network, dom: Domain, y: int, tolerance: float, deadline: float,
          max_domains: int = MAX_DOMAINS, batch: int | None = None,
          steps: int = STEPS, fast: Network | None = None) -> Outcome:
    """Whether class ``y`` keeps every margin above ``tolerance`` over ``dom`` (one input,
    its ``eps`` set), by branch and bound; ``deadline`` in ``time.perf_counter()`` seconds.

    Each margin CROWN leaves open at the root gets its own search (:func:`_prove_row`),
    the lowest first: a split that helps one runner-up class rarely helps another, so one
    tree per margin stays smaller than one tree that must close them all at once, and a
    margin that cannot be proven ends the proof before the easier ones are spent on.
    ``max_domains`` counts the subdomains of every margin's search together.

    The Adam steps run on ``fast`` (default: :func:`fast_copy` of ``net``; pass ``net``
    itself to run them in its own type), the bounds that decide on ``net``."""
    t0 = time.perf_counter()
    if t0 > deadline:
        return Outcome(None, 0, 0.0)
    dt, dev = dom.x.dtype, dom.x.device
    # the root's bounds, tightened by alpha-CROWN, hold on every subdomain: they are the
    # clamps a refreshed subdomain starts from, or its bounds themselves
    root = optimised_preactivation_bounds(net, dom, deadline=deadline)
    spec = margin_spec(torch.tensor([y], device=dev), net.n_classes, dt)
    with torch.no_grad():
        lb = backward_bound(net, dom, root, len(net.nodes) - 1, spec)[0]
    lb[y] = torch.inf
    lb = torch.nan_to_num(lb, nan=-torch.inf)  # a margin whose bound is NaN is open
    done = 0
    for j in torch.argsort(lb).tolist():
        if lb[j] > tolerance:
            break
        fast = fast or fast_copy(net)
        row = _prove_row(net, dom, spec[:, j:j + 1], root, tolerance, deadline,
                         max_domains - done, batch, steps, fast)
        done += row.domains
        if row.proven is not True:
            return Outcome(row.proven, done, time.perf_counter() - t0, row.point)
    return Outcome(True, done, time.perf_counter() - t0)


def _prove_row(net: Network, dom: Domain, spec: torch.Tensor, root: Bounds, tolerance: float,
               deadline: float, max_domains: int, batch: int | None, steps: int,
               fast: Network, root_steps: int = ROOT_STEPS) -> Outcome:
    """Branch and bound on the rows ``spec`` ``(1, s, k)`` of the output (every one above
    ``tolerance`` on every leaf), from the root's pre-activation bounds ``root``.

    Each open subdomain carries the lower slopes ``alpha`` and split multipliers ``beta``
    its parent's bound ended with: a child starts its Adam steps where its parent stopped
    (the new split's multiplier at 0), as beta-CROWN does, rather than from CROWN's slopes.
    """
    t0 = time.perf_counter()
    feeds = [net.nodes[r].parents[0] for r in net.relus]
    dt, dev = dom.x.dtype, dom.x.device
    queue = Stack([Pending({k: torch.full((1, net.nodes[k].size), -torch.inf, dtype=dt,
                                          device=dev) for k in feeds},
                           {k: torch.full((1, net.nodes[k].size), torch.inf, dtype=dt,
                                          device=dev) for k in feeds}, None)])
    refresh = 0 < refresh_work(net) <= REFRESH_WORK
    batch = batch or (BATCH if refresh else BATCH_CLAMPED)
    done = 0
    while len(queue):
        if done >= max_domains or time.perf_counter() > deadline:
            return Outcome(None, done, time.perf_counter() - t0)
        head = queue.pop(batch)
        take = len(head)
        done += take
        sub = dom.subset(torch.zeros(take, dtype=torch.long, device=dev))
        shaped = {k: (head.lo[k].reshape(take, *net.nodes[k].shape),
                      head.hi[k].reshape(take, *net.nodes[k].shape)) for k in feeds}
        with torch.no_grad():
            if refresh:
                clamps = {k: (torch.maximum(lo, root[k][0]), torch.minimum(hi, root[k][1]))
                          for k, (lo, hi) in shaped.items()}
                pre = preactivation_bounds(net, sub, splits=clamps)
            else:
                pre = {k: (torch.maximum(lo.expand(take, *lo.shape[1:]), shaped[k][0]),
                           torch.minimum(hi.expand(take, *hi.shape[1:]), shaped[k][1]))
                       for k, (lo, hi) in root.items()}
        signs = {k: (head.lo[k] == 0).to(dt) - (head.hi[k] == 0).to(dt) for k in feeds}
        empty = torch.zeros(take, dtype=torch.bool, device=dev)
        for k in feeds:
            zl, zu = (b.reshape(take, -1) for b in pre[k])
            empty |= ((zl > zu) & (signs[k] != 0)).any(dim=1)
        rows = torch.nonzero(~empty).flatten()
        if len(rows) == 0:
            continue
        pre = {k: (lo[rows], hi[rows]) for k, (lo, hi) in pre.items()}
        signs = {k: v[rows] for k, v in signs.items()}
        warm = None if head.warm is None else head.warm.select(rows)
        lb, losses, ended = subdomain_bound(net, sub.subset(rows), pre,
                                            spec.expand(len(rows), -1, -1), signs,
                                            steps if warm is not None else root_steps,
                                            tolerance, deadline, warm=warm, fast=fast)
        open_rows = torch.nonzero(~(lb.amin(dim=1) > tolerance)).flatten()  # NaN: open
        if len(open_rows) == 0:
            continue
        node, index = _branching(net, feeds, pre, losses, open_rows)
        leaves = node < 0  # every unstable neuron fixed: the network is affine there
        for row in open_rows[leaves].tolist():
            if time.perf_counter() > deadline:
                return Outcome(None, done, time.perf_counter() - t0)
            one = {k: (lo[row:row + 1], hi[row:row + 1]) for k, (lo, hi) in pre.items()}
            sign = {k: v[row:row + 1] for k, v in signs.items()}
            ok, point = _leaf_proven(net, sub.subset(rows[row:row + 1]), one, sign,
                                     spec, tolerance)
            if not ok:
                return Outcome(False, done, time.perf_counter() - t0, point)
        open_rows, node, index = open_rows[~leaves], node[~leaves], index[~leaves]
        at = rows[open_rows]
        parents = Pending({k: v[at] for k, v in head.lo.items()},
                          {k: v[at] for k, v in head.hi.items()}, ended.select(open_rows))
        queue.push(parents.children(node, index, feeds))
    return Outcome(True, done, time.perf_counter() - t0)


@dataclass
class Warm:
    """Where a batch of subdomains' bounds ended: lower slopes ``alphas`` ``(m, s, *shape)``
    per ReLU node and split multipliers ``betas`` ``(m, s, size)`` per fed node (0 at the
    neurons not split)."""

    alphas: dict[int, torch.Tensor]
    betas: dict[int, torch.Tensor]

    def select(self, rows) -> Warm:
        """The subdomains at ``rows`` (an index tensor or a slice)."""
        return Warm({r: a[rows] for r, a in self.alphas.items()},
                    {k: b[rows] for k, b in self.betas.items()})


@dataclass
class Pending:
    """Subdomains waiting to be bounded, in the order they will be: per fed node the split
    clamps ``lo``, ``hi`` ``(m, size)`` (``-inf`` / ``+inf`` where not split, 0 on a split
    neuron's side), and where their parents' bounds ended (``None``: the root, not yet
    bounded)."""

    lo: dict[int, torch.Tensor]
    hi: dict[int, torch.Tensor]
    warm: Warm | None

    def __len__(self) -> int:
        return len(next(iter(self.lo.values())))

    def take(self, n: int) -> Pending:
        return self.select(slice(None, n))

    def drop(self, n: int) -> Pending:
        return self.select(slice(n, None))

    def select(self, rows) -> Pending:
        """The subdomains at ``rows`` (an index tensor or a slice)."""
        return Pending({k: v[rows] for k, v in self.lo.items()},
                       {k: v[rows] for k, v in self.hi.items()},
                       None if self.warm is None else self.warm.select(rows))

    def children(self, node: torch.Tensor, index: torch.Tensor, feeds: list[int]) -> Pending:
        """Both children of each (bounded) subdomain, active copies first: subdomain ``i``
        splits neuron ``index[i]`` (flat) of fed node ``feeds[node[i]]``; each child keeps
        its parent's clamps, slopes and multipliers, and the split neuron starts at
        multiplier 0 in both."""
        m = len(node)
        lo = {k: v.repeat(2, 1) for k, v in self.lo.items()}
        hi = {k: v.repeat(2, 1) for k, v in self.hi.items()}
        alphas = {r: a.repeat(2, *([1] * (a.dim() - 1))) for r, a in self.warm.alphas.items()}
        betas = {k: b.repeat(2, 1, 1) for k, b in self.warm.betas.items()}
        for j, k in enumerate(feeds):
            sel = torch.nonzero(node == j).flatten()
            lo[k][sel, index[sel]] = 0.0  # first copy: active
            hi[k][m + sel, index[sel]] = 0.0  # second copy: inactive
            betas[k][sel, :, index[sel]] = 0.0
            betas[k][m + sel, :, index[sel]] = 0.0
        return Pending(lo, hi, Warm(alphas, betas))

    def then(self, rest: Pending) -> Pending:
        """These subdomains followed by ``rest``'s (an empty ``rest``, such as the queue
        the root was taken from, may lack warm state)."""
        if len(rest) == 0:
            return self
        return Pending({k: torch.cat([v, rest.lo[k]]) for k, v in self.lo.items()},
                       {k: torch.cat([v, rest.hi[k]]) for k, v in self.hi.items()},
                       Warm({r: torch.cat([a, rest.warm.alphas[r]])
                             for r, a in self.warm.alphas.items()},
                            {k: torch.cat([b, rest.warm.betas[k]])
                             for k, b in self.warm.betas.items()}))


@dataclass
class Stack:
    """The open subdomains, depth first: blocks of :class:`Pending`, the last block first in
    line. Taking a batch copies only the rows it takes; prepending the children to one
    queue tensor copied the whole queue every batch (a tenth of a 30 s search on a 256x4
    tune digit of ``benchmarks/vnncomp_mnist.py``)."""

    blocks: list[Pending]

    def __len__(self) -> int:
        return sum(len(b) for b in self.blocks)

    def push(self, block: Pending) -> None:
        """Put ``block`` first in line."""
        if len(block):
            self.blocks.append(block)

    def pop(self, n: int) -> Pending:
        """The first ``n`` subdomains in line (fewer where fewer are left), removed."""
        pieces = []
        while n > 0 and self.blocks:
            top = self.blocks[-1]
            if len(top) <= n:
                pieces.append(self.blocks.pop())
                n -= len(top)
            else:
                pieces.append(top.take(n))
                self.blocks[-1] = top.drop(n)
                n = 0
        head = pieces[0]
        for piece in pieces[1:]:
            head = head.then(piece)
        return head


def fast_copy(net: Network) -> Network:
    """``net`` in float32 for the Adam steps where it is in float64, large enough for
    float32 to pay (:data:`FAST_MIN_MACS`) and the copy computes the same logits
    (:func:`~robustscope.solvers.bounds.cast.cast_network`); else ``net``."""
    if net.dtype != torch.float64 or net.prefix_macs()[-1] < FAST_MIN_MACS:
        return net
    return cast_network(net, torch.float32) or net


def refresh_work(net: Network) -> int:
    """Coefficients one subdomain's pre-activation bounds carry by backward CROWN (every
    neuron of every node behind at least one ReLU layer; 0 where none is): the cost of
    recomputing them after each split."""
    depth, carried = crown_plan(net)
    feeds = {net.nodes[r].parents[0] for r in net.relus}
    return sum(backward_work(net.nodes[k].size, carried[k]) for k in feeds if depth[k] > 0)


def subdomain_bound(net: Network, dom: Domain, pre: Bounds, spec: torch.Tensor,
                    signs: dict[int, torch.Tensor], steps: int, tolerance: float,
                    deadline: float | None = None, warm: Warm | None = None,
                    fast: Network | None = None
                    ) -> tuple[torch.Tensor, dict[int, torch.Tensor], Warm]:
    """Lower bounds ``(m, s)`` of ``spec . f`` over each subdomain, the per-neuron losses of
    the last pass (for branching), and the slopes and multipliers the Adam steps on
    ``alpha`` and ``beta`` ended with (where the children start). ``signs`` per fed node
    ``(m, size)``: ``+1`` active, ``-1`` inactive, ``0`` free; ``warm``: the slopes and
    multipliers to start from (default: CROWN's slopes, multipliers 0).

    The steps run on ``fast`` (default ``net``), a copy of ``net`` in another type
    (:func:`~robustscope.solvers.bounds.cast.cast_network`); the bound returned is
    computed on ``net`` from the values they reach, so it is as sound as ``net``'s passes
    whatever ``fast``'s rounding. Where ``fast`` is ``net`` every step's bound is valid and
    the best one seen is returned. The returned ``Warm`` is in ``fast``'s type.

    Every nonzero row is optimised (a zero row's bound is 0), and the steps stop once every
    subdomain's rows are above ``tolerance``, or at ``deadline`` (``time.perf_counter()``
    seconds; stopping early only loosens the bound)."""
    fast = fast or net
    last = len(net.nodes) - 1
    m, s = spec.shape[:2]
    ft = fast.dtype
    feeds = {r: net.nodes[r].parents[0] for r in net.relus}
    sound = fast is net  # then every step's bound counts
    pre_f = {k: (lo.to(ft), hi.to(ft)) for k, (lo, hi) in pre.items()}
    relaxed = relaxations(net, pre)  # the same in every step
    relaxed_f = relaxed if sound else {r: tuple(t.to(ft) if t.is_floating_point() else t
                                                for t in v) for r, v in relaxed.items()}
    if warm is None:  # CROWN's lower slopes
        alphas = {r: relaxed_f[r][2].expand(m, s, *net.nodes[r].shape).clone()
                  for r in feeds}
        betas = {k: torch.zeros(m, s, net.nodes[k].size, dtype=ft, device=spec.device)
                 for k in feeds.values()}
        warm = Warm(alphas, betas)
    else:
        warm = Warm({r: a.to(ft, copy=True) for r, a in warm.alphas.items()},
                    {k: b.to(ft, copy=True) for k, b in warm.betas.items()})
    split = [k for k in feeds.values() if (signs[k] != 0).any()]

    def bound(network, domain, bounds, relaxed, alphas, betas, spec_rows, signs, losses=None):
        dt = network.dtype
        extra = {k: -betas[k].to(dt).clamp_min(0) * signs[k][:, None, :].to(dt)
                 for k in split}
        return backward_bound(network, domain, bounds, last, spec_rows,
                              {r: a.to(dt) for r, a in alphas.items()}, extra, losses, relaxed)

    live = torch.nonzero((spec.abs().sum(-1) > 0).any(dim=0)).flatten()
    best = torch.zeros(m, s, dtype=spec.dtype, device=spec.device)  # 0 . f for a zero row
    spec = spec[:, live]
    spec_f, dom_f = spec.to(ft), dom.to(ft)
    alphas = {r: a[:, live].clone().requires_grad_(True) for r, a in warm.alphas.items()}
    betas = {k: warm.betas[k][:, live].clone().requires_grad_(True) for k in split}
    opt = adam([*alphas.values(), *betas.values()], LR)
    sel = torch.full_like(spec[..., 0], -torch.inf)
    # the last step's per-neuron losses, where the steps run on a copy: branching reads them
    losses_f: dict[int, torch.Tensor] = {}
    lb = prev = None
    for i in range(max(steps, 0)):
        if i > 0 and deadline is not None and time.perf_counter() > deadline:
            break
        prev = lb
        lb = bound(fast, dom_f, pre_f, relaxed_f, alphas, betas, spec_f, signs,
                   None if sound or i < steps - 1 else losses_f)
        if (lb.detach().amin(dim=1) > tolerance).all():
            if sound:  # proven: no pass left to make
                best[:, live] = torch.maximum(sel, lb.detach())
                return best, {}, _ended(warm, alphas, betas, live)
            losses_f.clear()
            break
        if sound:
            sel = torch.maximum(sel, lb.detach())
        opt.zero_grad()
        (-lb.sum()).backward()
        opt.step()
        with torch.no_grad():
            for a_ in alphas.values():
                a_.clamp_(0, 1)
            for b_ in betas.values():
                b_.clamp_(min=0)
    with torch.no_grad():
        for v in (*alphas.values(), *betas.values()):  # a NaN step leaves a valid value
            v.nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
        if sound or not losses_f:
            # the bound of the values reached, on net itself; its losses are branching's
            losses: dict[int, torch.Tensor] = {}
            lb = bound(net, dom, pre, relaxed, alphas, betas, spec, signs, losses)
            sel = torch.maximum(sel, lb)
        else:
            # the deciding pass only where the copy's last bound is near the tolerance: a
            # subdomain far below it is split whatever that pass would give
            losses = {k: v.to(spec.dtype) for k, v in losses_f.items()}
            near = torch.nonzero(_may_prove(lb.detach(), prev, tolerance)).flatten()
            if len(near):
                sel[near] = bound(net, dom.subset(near), _rows_of(pre, near),
                                  _rows_of(relaxed, near),
                                  {r: a[near] for r, a in alphas.items()},
                                  {k: b[near] for k, b in betas.items()}, spec[near],
                                  {k: v[near] for k, v in signs.items()})
    best[:, live] = sel
    return best, losses, _ended(warm, alphas, betas, live)


def _may_prove(lb: torch.Tensor, prev: torch.Tensor | None, tolerance: float
               ) -> torch.Tensor:
    """``(m,)``: whether the subdomains whose copy's last two step bounds were ``prev`` and
    ``lb`` ``(m, s)`` may be proven by the deciding pass after the last update: the last
    bound, plus twice the step before's gain (the last update's gain is not yet seen), plus
    :data:`NEAR` of the bound's size for the copy's rounding, is above ``tolerance``."""
    if prev is None:
        return torch.ones(len(lb), dtype=torch.bool, device=lb.device)
    lb, prev = lb.amin(dim=1), prev.detach().amin(dim=1)
    return ~(lb + 2 * (lb - prev).clamp_min(0) + NEAR * (1 + lb.abs()) <= tolerance)


def adam(params: list[torch.Tensor], lr: float) -> torch.optim.Optimizer:
    """Adam on ``params``, fused where their device and type allow (a third of the time
    per step on CPU, measured on branch and bound's slopes)."""
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except RuntimeError:
        return torch.optim.Adam(params, lr=lr)


def _rows_of(per_node: dict, rows: torch.Tensor) -> dict:
    """Per node, the batch rows ``rows`` of each tensor (of a pair or tuple)."""
    return {k: tuple(t[rows] for t in v) for k, v in per_node.items()}


def _ended(warm: Warm, alphas: dict[int, torch.Tensor], betas: dict[int, torch.Tensor],
           live: torch.Tensor) -> Warm:
    """``warm`` (a copy of the start) with the optimised ``live`` rows written in."""
    with torch.no_grad():
        for r, a_ in alphas.items():
            warm.alphas[r][:, live] = a_
        for k, b_ in betas.items():
            warm.betas[k][:, live] = b_
    return warm


def _leaf_proven(net: Network, dom: Domain, pre: Bounds, signs: dict[int, torch.Tensor],
                 spec: torch.Tensor, tolerance: float) -> tuple[bool, torch.Tensor | None]:
    """Whether a subdomain (one row) on which every ReLU is stable is proven: every row of
    ``spec`` ``(1, s, k)`` above ``tolerance``. Its rows are affine over it, so their
    minimum over the region (the domain cut by the split
    constraints ``s z >= 0``) is a linear program (Linf, L1). Its multipliers of the split
    constraints, taken as ``beta``, give a bound through :func:`backward_bound` that is
    sound whatever the LP solver's tolerances (every ``beta >= 0`` is valid) and equal to
    the LP's value up to rounding. Under L2 the region's minimum is a second-order cone
    program: its Lagrangian dual in the multipliers is maximised by L-BFGS-B instead
    (:func:`_l2_split_duals`), with the same sound evaluation.

    Returns ``(proven, point)``: ``point`` (Linf, L1, not proven) the smallest scaled
    perturbation ``(d,)`` of the region at which the lowest row reaches 0."""
    last = len(net.nodes) - 1
    extra, point = _leaf_multipliers(net, dom, pre, signs, spec, tolerance)
    with torch.no_grad():
        lb = backward_bound(net, dom, pre, last, spec, extra=extra)
    lb = lb[spec.abs().sum(-1) > 0]
    proven = bool(lb.amin() > tolerance)
    return proven, (None if proven else point)


def _leaf_multipliers(net: Network, dom: Domain, pre: Bounds, signs: dict[int, torch.Tensor],
                    spec: torch.Tensor, tolerance: float
                    ) -> tuple[dict[int, torch.Tensor], torch.Tensor | None]:
    """``extra`` terms ``-beta s`` ``(1, k, size)`` per split node: per margin row, the
    multipliers of the split constraints in ``min margin`` over the region; and, where the
    lowest row's minimum is at most ``tolerance`` (Linf, L1), the smallest perturbation
    ``u`` ``(d,)`` of the region at which that margin reaches 0 (``None`` otherwise)."""
    last = len(net.nodes) - 1
    k_out = spec.shape[1]
    split = {k: torch.nonzero(v[0] != 0).flatten() for k, v in signs.items()}
    split = {k: idx for k, idx in split.items() if len(idx)}
    with torch.no_grad():
        a_m, c_m = linear_bound(net, pre, last, spec)
        # rows proven over the whole domain need no program (their multipliers stay 0)
        done = backward_bound(net, dom, pre, last, spec)[0] > tolerance
        rows_a, rows_c = [], []
        for k, idx in split.items():
            size = net.nodes[k].size
            eye = torch.zeros(1, len(idx), size, dtype=spec.dtype, device=spec.device)
            eye[0, torch.arange(len(idx)), idx] = 1.0
            a_z, c_z = linear_bound(net, pre, k, eye)
            s_k = signs[k][0, idx]
            rows_a.append(s_k[:, None] * a_z[0])  # s z(x') = s (a . x' + c) >= 0
            rows_c.append(s_k * c_z[0])
    d = dom.x.shape[1]
    scale = dom.scale.cpu().numpy()
    box_lo, box_hi = (b[0].cpu().numpy() for b in dom.box())
    g_split = (torch.cat(rows_a) * dom.scale).cpu().numpy() if rows_a else np.zeros((0, d))
    h_split = ((torch.cat(rows_a) @ dom.x[0] + torch.cat(rows_c)).cpu().numpy()
               if rows_a else np.zeros(0))
    a_np = a_m[0].cpu().numpy() if a_m is not None else np.zeros((k_out, d))
    const = c_m[0].cpu().numpy() + a_np @ dom.x[0].cpu().numpy()
    betas = np.zeros((k_out, len(h_split)))
    point, lowest = None, np.inf
    for j in range(k_out):
        if not spec[0, j].any() or done[j]:
            continue
        if dom.p == 2.0:
            solved = _l2_split_duals(dom, a_np[j] * scale, g_split, h_split,
                                     tolerance - const[j])
        else:
            solved = _split_duals(a_np[j] * scale, g_split, h_split, box_lo, box_hi,
                                  float(dom.eps[0]), dom.p)
        if solved is None:
            continue
        betas[j], value = solved
        if value + const[j] < lowest:
            point, lowest = j, value + const[j]
    out, start = {}, 0
    beta_t = torch.as_tensor(betas, dtype=spec.dtype, device=spec.device)
    for k, idx in split.items():
        term = torch.zeros(1, k_out, net.nodes[k].size, dtype=spec.dtype, device=spec.device)
        term[0][:, idx] = -beta_t[:, start:start + len(idx)] * signs[k][0, idx]
        out[k] = term
        start += len(idx)
    if point is not None and lowest <= tolerance and dom.p != 2.0:
        u = _smallest_crossing(a_np[point] * scale, const[point], g_split, h_split, box_lo,
                               box_hi, dom.p)
        point = None if u is None else torch.as_tensor(u, dtype=spec.dtype, device=spec.device)
    else:
        point = None
    return out, point


def _l2_split_duals(dom: Domain, cost: np.ndarray, g: np.ndarray, h: np.ndarray,
                    enough: float) -> tuple[np.ndarray, float]:
    """``(multipliers, value)``: ``lam >= 0`` maximising the Lagrangian dual
    ``lam . h + min_u (cost - g^T lam) . u`` over the domain's box and L2 ball (the inner
    minimum by :meth:`Domain.minimum`, itself a dual bound) by L-BFGS-B, stopped early once
    the dual exceeds ``enough``; ``value`` the dual at ``lam`` (a lower bound of
    ``min cost . u`` over the region)."""
    if len(h) == 0:
        return np.zeros(0), float("nan")
    x, scale = dom.x[:1], dom.scale
    g_t, h_t, c_t = (torch.as_tensor(v, dtype=x.dtype, device=x.device) for v in (g, h, cost))
    best = [-math.inf, np.zeros(len(h))]

    def negative_dual(lam_np: np.ndarray) -> tuple[float, np.ndarray]:
        lam_np = np.maximum(lam_np, 0.0)
        lam = torch.as_tensor(lam_np, dtype=x.dtype, device=x.device).requires_grad_(True)
        with torch.enable_grad():
            a = ((c_t - g_t.T @ lam) / scale)[None, None]  # original units
            value = lam @ h_t + dom.minimum(a)[0, 0] - (a[0, 0] * x[0]).sum()
            (grad,) = torch.autograd.grad(-value, lam)
        if float(value.detach()) > best[0]:
            best[:] = [float(value.detach()), lam_np.copy()]
            if best[0] > enough:
                raise _Enough
        return -float(value.detach()), grad.cpu().numpy()

    try:
        minimize(negative_dual, np.zeros(len(h)), jac=True, method="L-BFGS-B",
                 bounds=[(0.0, None)] * len(h), options={"maxiter": L2_LEAF_ITERATIONS})
    except _Enough:
        pass
    return best[1], best[0]


class _Enough(Exception):
    """Stops the L-BFGS-B run of :func:`_l2_split_duals` once its dual proves the row."""


def _smallest_crossing(cost: np.ndarray, const: float, g: np.ndarray, h: np.ndarray,
                       lo: np.ndarray, hi: np.ndarray, p: float) -> np.ndarray | None:
    """The smallest ``u`` (Linf or L1 norm) in the box with ``g u + h >= 0`` at which the
    affine margin ``cost . u + const`` reaches 0 (``None`` where the LP has no optimum)."""
    d = len(cost)
    if p == 1.0:  # columns pos, neg; minimise their sum
        c = np.ones(2 * d)
        a_ub = np.vstack([np.hstack([-g, g]), np.hstack([cost, -cost])[None]])
        bounds = np.column_stack([np.zeros(2 * d), np.concatenate([np.maximum(hi, 0),
                                                                   np.maximum(-lo, 0)])])
    else:  # columns u, t; minimise t with -t <= u <= t
        c = np.concatenate([np.zeros(d), [1.0]])
        eye = np.eye(d)
        a_ub = np.vstack([np.hstack([-g, np.zeros((len(g), 1))]),
                          np.concatenate([cost, [0.0]])[None],
                          np.hstack([eye, -np.ones((d, 1))]), np.hstack([-eye, -np.ones((d, 1))])])
        bounds = np.vstack([np.column_stack([lo, hi]), [[0.0, np.inf]]])
    b_ub = np.concatenate([h, [-const], np.zeros(a_ub.shape[0] - len(h) - 1)])
    res = scipy_lp(c, a_ub, b_ub, bounds)
    if res.status != 0:
        return None
    return res.x[:d] - res.x[d:] if p == 1.0 else res.x[:d]


def _split_duals(cost: np.ndarray, g: np.ndarray, h: np.ndarray, lo: np.ndarray,
                 hi: np.ndarray, eps: float, p: float
                 ) -> tuple[np.ndarray, float] | None:
    """``(multipliers, value)`` of ``min cost . u`` over the box ``[lo, hi]``, the ball
    ``||u||_p <= eps`` (p in {1, inf}; ``lo``, ``hi`` already within ``eps``) and the rows
    ``g u + h >= 0``: the rows' multipliers ``(m,) >= 0`` and the minimum; ``None``
    where HiGHS finds no optimum (an infeasible region: its bound is then left to
    ``beta = 0``)."""
    d = len(cost)
    if p == 1.0:  # u = pos - neg, both >= 0, sum <= eps
        c = np.concatenate([cost, -cost])
        a_ub = np.vstack([np.hstack([-g, g]), np.ones((1, 2 * d))])
        b_ub = np.concatenate([h, [eps]])
        bounds = np.column_stack([np.zeros(2 * d), np.concatenate([np.maximum(hi, 0),
                                                                   np.maximum(-lo, 0)])])
    else:
        c, a_ub, b_ub, bounds = cost, -g, h, np.column_stack([lo, hi])
    res = scipy_lp(c, a_ub if len(a_ub) else None, b_ub if len(b_ub) else None, bounds)
    if res.status != 0:
        return None
    return np.maximum(-res.ineqlin.marginals[:len(h)], 0.0), float(res.fun)


def _branching(net: Network, feeds: list[int], pre: Bounds, losses: dict[int, torch.Tensor],
               rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per open subdomain ``rows``: ``(position in feeds, flat index)`` of the neuron to
    split (``-1`` where no neuron is unstable)."""
    dt, dev = pre[feeds[0]][0].dtype, rows.device
    best = torch.full((len(rows),), -1.0, dtype=dt, device=dev)
    node = torch.full((len(rows),), -1, dtype=torch.long, device=dev)
    index = torch.zeros(len(rows), dtype=torch.long, device=dev)
    for j, k in enumerate(feeds):  # the neuron whose upper line costs the bound most
        zl, zu = (b.reshape(len(b), -1)[rows] for b in pre[k])
        loss = losses[k].reshape(len(losses[k]), losses[k].shape[1], -1)[rows].sum(1)
        score = torch.where((zl < 0) & (zu > 0) & (loss > 0), loss, torch.full_like(zl, -1.0))
        _keep_best(score, j, best, node, index)
    free = node < 0
    if free.any():  # no upper line costs anything: the widest triangle
        best_f = torch.full((int(free.sum()),), -1.0, dtype=dt, device=dev)
        node_f, index_f = node[free].clone(), index[free].clone()
        for j, k in enumerate(feeds):
            zl, zu = (b.reshape(len(b), -1)[rows[free]] for b in pre[k])
            score = torch.where((zl < 0) & (zu > 0), -zl * zu / (zu - zl).clamp_min(1e-300),
                                torch.full_like(zl, -1.0))
            _keep_best(score, j, best_f, node_f, index_f)
        node[free], index[free] = node_f, index_f
    return node, index


def _keep_best(score: torch.Tensor, j: int, best: torch.Tensor, node: torch.Tensor,
               index: torch.Tensor) -> None:
    """Where node ``j``'s highest ``score`` (``(m, size)``, ``< 0`` = not a candidate) beats
    ``best``, take it (in place)."""
    top, idx = score.max(dim=1)
    better = (top > best) & (top >= 0)
    best.copy_(torch.where(better, top, best))
    node.copy_(torch.where(better, torch.full_like(node, j), node))
    index.copy_(torch.where(better, idx, index))
