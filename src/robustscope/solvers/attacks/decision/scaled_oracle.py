"""Batched, budgeted, feature-type-respecting queries for gradient-free solvers.

A :class:`ScaledOracle` holds ``n`` inputs and answers "is ``x + u·scale`` a counterexample,
and what is its margin?" for batches of scaled perturbations ``u`` of shape ``(k, m, d)``
(``m`` candidates for each of ``k`` inputs). Every candidate is first made valid: clamped to
the feature space's box of allowed perturbations, integer and binary moves rounded towards
the input, then projected with
:meth:`FeatureSpace.project` (integers integral, binaries 0/1, one-hot groups one-hot,
immutable features unchanged; a one-hot group with an immutable member is kept whole).
Its size is measured *after* projection, so the best counterexample kept per input is the
one the model actually saw.

Queries are counted per input against the solver's own ``budget`` and, when the caller
passes a metered view of the model (as the search does) or a ledger, charged to that ledger too.
An input without enough budget left for a request is simply not queried (its answers read
"not adversarial"); no call ever exceeds a budget.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from robustscope.core.errors import InputError
from robustscope.core.space import FeatureSpace
from robustscope.core.statement import DECISION_CHANGE, Statement
from robustscope.core.statuses import ATTACKED, CENSORED
from robustscope.models.base import Classifier, QueryLedger
from robustscope.models.metered import charge_of, metered
from robustscope.solvers.output import SolverOutput
from robustscope.threats.lp import LpThreat

_NO_LIMIT = np.iinfo(np.int64).max // 4


def effective_mutable(space: FeatureSpace) -> np.ndarray:
    """Mutable mask ``(d,)`` in which a one-hot group with any immutable member is wholly
    immutable (changing the category would change that member)."""
    mutable = space.mutable.copy()
    for g in space.groups:
        if not mutable[g].all():
            mutable[g] = False
    return mutable


class ScaledOracle:
    """Queries for ``n`` inputs ``x`` ``(n, *shape)`` with labels ``y`` ``(n,)``.

    Attributes
    ----------
    used : int64 array (n,), queries spent per input by this oracle.
    best_u : tensor (n, d), smallest verified counterexample per input (scaled units).
    best_r : tensor (n,), its norm; ``inf`` where none was found.
    plateau : bool array (n,), inputs whose margin a stage found flat under small
        differences (a tree's plateaus, a label-only model; a smooth model's margin moves).
    scored : bool array (n,), inputs for which two points that do not change the decision
        got different margins: the model's scores say more than its decisions (never on a
        label-only model).
    mark : int or None, a number of queries per input at which :attr:`radius_at_mark` is
        read (None: never).
    radius_at_mark : tensor (n,), the best radius each input held just before its queries
        reached :attr:`mark` (``inf`` where it held none); NaN for the inputs that have not
        reached it: what the last stretch of a search started from.
    """

    def __init__(self, model: Classifier, x: torch.Tensor, y: torch.Tensor,
                 space: FeatureSpace, threat: LpThreat,
                 statement: Statement = DECISION_CHANGE, budget: int | None = None,
                 ledger: QueryLedger | None = None) -> None:
        if x.ndim < 2:
            raise InputError(f"x must have shape (n, *input_shape), got {tuple(x.shape)}")
        n = x.shape[0]
        self.model, self.space, self.threat, self.statement = model, space, threat, statement
        self.x = x
        self.y = torch.as_tensor(y, device=x.device).reshape(-1).long()
        if len(self.y) != n:
            raise InputError(f"y has {len(self.y)} labels for {n} inputs")
        self.flat = x.reshape(n, -1)
        self.d = self.flat.shape[1]
        if space.n_features != self.d:
            raise InputError(f"space has {space.n_features} features but inputs have {self.d}")
        self.lo, self.hi = space.delta_bounds(x)
        self.scale = torch.as_tensor(space.scale, dtype=x.dtype, device=x.device)
        self.mutable = torch.as_tensor(effective_mutable(space), device=x.device)
        self.integral = torch.as_tensor(np.isin(space.types, ("integer", "binary")),
                                        device=x.device)
        if budget is not None and budget < 1:
            raise InputError(f"budget must be a positive number of queries, got {budget}")
        self.budget = budget
        self.used = np.zeros(n, dtype=np.int64)
        outer, outer_owners = charge_of(model)  # a metered view's charge, if any
        if ledger is not None:
            self.ledger, self.owners = ledger, np.arange(n)
        elif outer is not None:
            if len(outer_owners) != n:
                raise InputError(f"the model is being charged for {len(outer_owners)} inputs "
                                 f"but the solver was given {n}")
            self.ledger, self.owners = outer, np.asarray(outer_owners)
        else:
            self.ledger, self.owners = None, np.arange(n)
        self.best_u = torch.zeros_like(self.flat)
        self.best_r = torch.full((n,), float("inf"), dtype=x.dtype, device=x.device)
        self.plateau = np.zeros(n, dtype=bool)
        self.scored = np.zeros(n, dtype=bool)
        self._first_margin = np.full(n, np.nan)
        self.mark: int | None = None
        self.radius_at_mark = torch.full_like(self.best_r, float("nan"))

    @property
    def n(self) -> int:
        return self.flat.shape[0]

    def holding(self) -> torch.Tensor:
        """Inputs ``(n,)`` bool that hold a counterexample of positive size (not an input
        already misclassified, whose radius is 0)."""
        return torch.isfinite(self.best_r) & (self.best_r > 0)

    def remaining(self, idx: np.ndarray) -> np.ndarray:
        """Queries still allowed for inputs ``idx``."""
        left = np.full(len(idx), _NO_LIMIT, dtype=np.int64)
        if self.budget is not None:
            left = np.minimum(left, self.budget - self.used[idx])
        if self.ledger is not None and self.ledger.budget is not None:
            left = np.minimum(left, self.ledger.remaining(self.owners[idx]))
        return left

    def project(self, idx: np.ndarray, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Valid candidates for inputs ``idx`` from ``u`` ``(k, m, d)``.

        Returns ``(u_valid (k, m, d), x_valid (k·m, *shape))``.
        """
        k, m, d = u.shape
        ti = torch.as_tensor(idx, device=u.device)
        u = torch.minimum(torch.maximum(u, self.lo[ti].unsqueeze(1)), self.hi[ti].unsqueeze(1))
        u = torch.where(self.mutable, u, torch.zeros_like(u))
        base = self.flat[ti].unsqueeze(1).expand(k, m, d).reshape(k * m, d)
        step = (u * self.scale).reshape(k * m, d)
        if self.integral.any():
            # round integer and binary moves towards the input (the input is integral), so
            # that a candidate never leaves the ball it was proposed in by rounding up
            step = torch.where(self.integral, torch.trunc(step + 1e-9 * torch.sign(step)), step)
        cand = base + step
        shape = self.x.shape[1:]
        within = None
        if self.threat.p == math.inf and self.space.has_relations:
            # the relations' projection may move real features anywhere in the box: held in
            # the candidate's own Linf ball, it cannot leave the ball it was proposed in
            # (measured: 7 % of the step-down search's proposals did on the credit table)
            reach = (u.abs() * self.mutable).amax(dim=2).reshape(k * m, 1) * self.scale
            within = (base - reach, base + reach)
        valid = self.space.project(cand.reshape(k * m, *shape), base.reshape(k * m, *shape),
                                   within)
        valid = torch.where(self.mutable, valid.reshape(k * m, d), base)
        u_valid = ((valid - base) / self.scale).reshape(k, m, d)
        valid = valid.reshape(k * m, *shape)
        return u_valid, valid

    def query(self, idx: np.ndarray, u: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, np.ndarray]:
        """Ask the model about ``m`` candidates for each input in ``idx``; ``u`` is ``(k, m, d)``.

        Returns ``(adversarial (k, m) bool, margin (k, m), u_valid (k, m, d), asked (k,) bool)``.
        Inputs that lack the budget for ``m`` queries are not asked: their rows read
        ``adversarial = False`` and ``margin = inf``.
        """
        return self._ask(idx, u, keep_scores=False)[:4]

    def query_scores(self, idx: np.ndarray, u: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, np.ndarray,
                                torch.Tensor]:
        """:meth:`query`, with the model's logits (or log-probabilities) of every candidate
        as a fifth item, ``(k, m, n_classes)``: NaN on the rows not asked."""
        return self._ask(idx, u, keep_scores=True)

    def _ask(self, idx: np.ndarray, u: torch.Tensor, keep_scores: bool
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, np.ndarray,
                        torch.Tensor | None]:
        """:meth:`query_scores`; its scores are ``None`` unless ``keep_scores``."""
        idx = np.asarray(idx, dtype=np.int64)
        k, m, _ = u.shape
        adv = torch.zeros(k, m, dtype=torch.bool, device=u.device)
        margin = torch.full((k, m), float("inf"), dtype=u.dtype, device=u.device)
        scores = (torch.full((k, m, self.model.n_classes), float("nan"), dtype=u.dtype,
                             device=u.device) if keep_scores else None)
        if k == 0:
            return adv, margin, u, np.zeros(0, dtype=bool), scores
        u_valid, x_valid = self.project(idx, u)
        asked = self.remaining(idx) >= m
        if not asked.any():
            return adv, margin, u_valid, asked, scores
        sel = np.flatnonzero(asked)
        ids = idx[sel]
        tsel = torch.as_tensor(sel, device=u.device)
        u_sel = u_valid[tsel]
        x_sel = x_valid.reshape(k, m, *self.x.shape[1:])[tsel].reshape(-1, *self.x.shape[1:])
        labels = self.y[torch.as_tensor(ids, device=u.device)].repeat_interleave(m)
        with torch.no_grad():
            view = (self.model if self.ledger is None else
                    metered(self.model, self.ledger, self.owners[ids]))
            logits = view.logits(self.model.as_tensor(x_sel))
        if self.mark is not None:  # the radius held when the last stretch began
            starts = (self.used[ids] < self.mark) & (self.used[ids] + m >= self.mark)
            if starts.any():
                ts = torch.as_tensor(ids[starts], device=u.device)
                self.radius_at_mark[ts] = self.best_r[ts]
        self.used[ids] += m
        logits = logits.to(u.dtype)
        holds = self.statement.holds(logits.argmax(dim=1), labels).reshape(-1, m)
        marg = self.statement.margin(logits, labels).reshape(-1, m)
        adv[tsel], margin[tsel] = holds, marg
        if scores is not None:
            scores[tsel] = logits.reshape(len(ids), m, -1)
        self._keep_best(ids, u_sel, holds)
        self._note_scores(ids, holds, marg)
        return adv, margin, u_valid, asked, scores

    def _note_scores(self, ids: np.ndarray, holds: torch.Tensor, marg: torch.Tensor) -> None:
        """Update :attr:`scored` from the margins ``(k, m)`` of the points that did not
        change the decision."""
        if self.scored[ids].all():
            return
        vals = np.where(holds.cpu().numpy(), np.nan, marg.detach().cpu().numpy())
        seen = ~np.isnan(vals)
        first = vals[np.arange(len(ids)), seen.argmax(axis=1)]  # NaN where none was seen
        ref = np.where(np.isnan(self._first_margin[ids]), first, self._first_margin[ids])
        self._first_margin[ids] = ref
        differs = np.where(seen, np.abs(vals - ref[:, None]), 0.0) > 0
        self.scored[ids] |= differs.any(axis=1)

    def bisect(self, idx: np.ndarray,
               point: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], steps: int,
               rtol: float = 0.0, active: np.ndarray | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Bisect a fraction ``t`` in ``[0, 1]`` for each input of ``idx`` ``(k,)``:
        ``point(pos, t)`` gives the candidates ``(m, d)`` at fractions ``t`` ``(m,)`` for the
        inputs ``idx[pos]``, ``t = 1`` taken as a counterexample and ``t = 0`` as none. Each
        step asks once for every input (of ``active``, default all) with budget left whose
        bracket is wider than ``rtol`` times its upper end, ``steps`` steps at most.

        Returns ``(hi (k,), best (k, d))``: the upper end of each bracket and the valid
        counterexample there (``point(., 1)`` where no step landed)."""
        k = len(idx)
        device = self.flat.device
        lo = torch.zeros(k, dtype=self.flat.dtype, device=device)
        hi = torch.ones_like(lo)
        best = point(torch.arange(k, device=device), hi).clone()
        live = np.ones(k, dtype=bool) if active is None else np.asarray(active, dtype=bool)
        for _ in range(steps):
            go = live & ((hi - lo) > rtol * hi).cpu().numpy() & (self.remaining(idx) >= 1)
            if not go.any():
                break
            pos = torch.as_tensor(np.flatnonzero(go), device=device)
            mid = (lo[pos] + hi[pos]) / 2
            adv, _, u_valid, _ = self.query(idx[go], point(pos, mid).unsqueeze(1))
            adv = adv[:, 0]
            hi[pos] = torch.where(adv, mid, hi[pos])
            lo[pos] = torch.where(adv, lo[pos], mid)
            best[pos] = torch.where(adv.unsqueeze(1), u_valid[:, 0], best[pos])
        return hi, best

    def _keep_best(self, ids: np.ndarray, u: torch.Tensor, holds: torch.Tensor) -> None:
        k, m, d = u.shape
        norms = self.threat.norm(u.reshape(k * m, d)).reshape(k, m)
        norms = torch.where(holds, norms, torch.full_like(norms, float("inf")))
        r, j = norms.min(dim=1)
        ti = torch.as_tensor(ids, device=u.device)
        better = r < self.best_r[ti]
        if better.any():
            tb = ti[better]
            self.best_r[tb] = r[better]
            self.best_u[tb] = u[better, j[better]]

    def output(self) -> SolverOutput:
        """The solver output: the best verified counterexample per input, its radius, and
        the queries this oracle made per input (``forward_queries``)."""
        radius = self.best_r.cpu().numpy().astype(np.float64)
        n = self.n
        return SolverOutput(
            x_adv=self.candidates(), radius=radius, lower_bound=np.zeros(n),
            status=np.where(np.isfinite(radius), ATTACKED, CENSORED).astype(object),
            adv_prediction=np.full(n, -1, dtype=np.int64), forward_queries=self.used.copy(),
            seconds=np.zeros(n))

    def candidates(self) -> torch.Tensor:
        """Best counterexample per input in original units ``(n, *shape)``; the input itself
        where none was found."""
        return (self.flat + self.best_u * self.scale).reshape(self.x.shape)

    def nearest_in_pool(self, pool: torch.Tensor, pool_labels: torch.Tensor | None,
                        k: int) -> torch.Tensor:
        """Scaled offsets ``(n, k, d)`` to the ``k`` pool points nearest each input in the
        threat's norm, among those whose label differs from the input's when labels are
        given (fewer valid points are padded with the nearest ones)."""
        pool_flat = pool.reshape(pool.shape[0], -1).to(self.flat.dtype)
        if pool_flat.shape[1] != self.d:
            raise InputError(f"X_pool has {pool_flat.shape[1]} features; inputs have {self.d}")
        offsets = (pool_flat.unsqueeze(0) - self.flat.unsqueeze(1)) / self.scale  # (n, P, d)
        offsets = torch.where(self.mutable, offsets, torch.zeros_like(offsets))
        dist = self.threat.norm(offsets.reshape(-1, self.d)).reshape(self.n, -1)
        if pool_labels is not None:
            same = pool_labels.reshape(1, -1).to(self.y.device) == self.y.reshape(-1, 1)
            dist = torch.where(same, dist + 1e30, dist)
        k = min(k, dist.shape[1])
        order = dist.topk(k, dim=1, largest=False).indices
        return torch.gather(offsets, 1, order.unsqueeze(2).expand(-1, -1, self.d))
