"""The one verification: every candidate of every solver passes here before it can define a
radius.

A candidate is projected into the feature space (bounds, integer / binary / one-hot /
immutable features), the model is called again on it (charged to its input in the ledger),
candidates that break a relation between features (``space.relations``: linear rows within
their tolerance, the user's predicate) are rejected without a query, the statement is checked
on the model's own decision, and its size is measured: the scaled
norm of the projected perturbation for an Lp threat, the threat's own strength of the
parameters that made it for an image threat (whose ``apply`` already gives a valid image).
Only then may it improve its input's best counterexample.

A network's float32 rounding can differ between batch sizes (batched convolutions and matrix
products use other kernels than a batch of one), so a counterexample verified in a batch
within about 1e-6 of the decision boundary may not change the decision when the model is
called on it alone. :meth:`Verifier.confirm_alone` therefore calls the model once more on
each input's final counterexample alone (unless it was verified alone already), pushes it
outward along its perturbation (:data:`ALONE_PUSH_RANGE`) where that call does not confirm
it, and withdraws it where no push does.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from robustscope.core.space import FeatureSpace
from robustscope.core.statement import Statement, rounding_margin
from robustscope.models.base import Classifier, QueryLedger
from robustscope.search.metering import charged
from robustscope.threats.image import ImageThreat
from robustscope.threats.lp import LpThreat

#: Where the model called alone on a counterexample does not confirm it, the counterexample
#: is pushed outward along its scaled perturbation, ``x + (1 + push) (x_adv - x)``: the first
#: push aims, by the margins at ``x`` and (alone) at ``x_adv`` extrapolated along the segment,
#: twice as far past the boundary as the model's rounding
#: (:func:`~robustscope.core.statement.rounding_margin`), and is kept within these ends; each
#: further push (where the caller allows more passes) is ten times the last.
ALONE_PUSH_RANGE = (1e-5, 1e-2)


class Verifier:
    """Best verified counterexample per input of one batch.

    Parameters
    ----------
    model, space, threat, statement : what is searched (the model is called on every
        candidate; calls are charged to ``owners`` in ``ledger``). ``threat`` is an
        :class:`LpThreat` (candidates projected into ``space``, measured by the threat's norm
        of the scaled perturbation) or an :class:`ImageThreat` (candidates come with the
        parameters that made them, measured by ``threat.strength``).
    x : ``(n, *shape)`` inputs in original units; ``y`` ``(n,)`` class indices.
    owners : ``(n,)`` positions of these inputs in ``ledger``.
    clean_logits : ``(n, K)`` the model's logits at ``x`` (already charged).
    broken : ``(n,)`` bool, inputs for which the clean input already satisfies the statement
        (their radius is 0 and the input itself is the counterexample).

    Attributes ``best_x`` ``(n, *shape)``, ``best_r`` ``(n,)`` (size; ``inf`` where nothing
    was verified) and ``best_logits`` ``(n, K)`` only ever hold verified candidates;
    ``alone`` ``(n,)`` says where the best one was verified by a call on its row alone.
    """

    def __init__(self, model: Classifier, space: FeatureSpace, threat: LpThreat | ImageThreat,
                 statement: Statement, ledger: QueryLedger, x: torch.Tensor, y: torch.Tensor,
                 owners: np.ndarray, clean_logits: torch.Tensor, broken: torch.Tensor) -> None:
        self.model, self.space, self.threat, self.statement = model, space, threat, statement
        self.ledger = ledger
        self.x, self.y, self.owners = x, y, np.asarray(owners, dtype=np.int64)
        self.clean_logits = clean_logits
        self.best_x = x.clone()
        self.best_r = torch.where(broken, 0.0, math.inf).to(torch.float64)
        self.best_logits = clean_logits.clone()
        #: ``(n,)`` candidates per input rejected because they break a relation of ``space``
        self.rejected = torch.zeros(len(x), dtype=torch.int64, device=x.device)
        #: ``(n,)`` the best counterexample was verified by a model call on its row alone
        self.alone = torch.zeros(len(x), dtype=torch.bool, device=x.device)

    def affordable(self, sub: torch.Tensor, cost: int) -> torch.Tensor:
        """The inputs of ``sub`` (batch positions) whose budget still allows ``cost`` passes."""
        ok = self.ledger.remaining(self.owners[sub.cpu().numpy()]) >= cost
        return sub[torch.as_tensor(ok, device=sub.device)]

    def check(self, sub: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        """Verify ``candidates`` ``(len(sub), *shape)`` for inputs ``sub`` (batch positions).

        Returns a boolean ``(len(sub),)``: the projected candidate satisfies the statement.
        See :meth:`verify`.
        """
        return self.verify(sub, candidates)[0] >= 0

    def verify(self, sub: torch.Tensor, candidates: torch.Tensor,
               params: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Verify ``candidates`` ``(len(sub), *shape)`` for inputs ``sub`` (batch positions);
        ``params`` ``(len(sub), ...)``: the image threat's parameters that made them.

        Inputs whose budget is spent are not queried and fail. Returns ``(classes, logits,
        size)``, each with ``len(sub)`` rows: the model's class at the (projected) candidate
        where the statement holds, else -1; the model's logits there (float64; NaN rows where
        not queried); the candidate's size (``inf`` where not queried). Improvements (a
        smaller size) replace the input's best counterexample.
        """
        m = len(sub)
        out = torch.full((m,), -1, dtype=torch.int64, device=sub.device)
        size = torch.full((m,), math.inf, dtype=torch.float64, device=sub.device)
        logits_out = torch.full((m, self.clean_logits.shape[1]), math.nan, dtype=torch.float64,
                                device=sub.device)
        can = torch.as_tensor(self.ledger.remaining(self.owners[sub.cpu().numpy()]) >= 1,
                              device=sub.device)
        if not can.any():
            return out, logits_out, size
        rows, cand = sub[can], candidates[can]
        x = self.x[rows]
        cand = cand.to(x.dtype).reshape(x.shape)
        if params is None:
            cand = self.space.project(cand, x)
            if self.space.has_relations:
                # a candidate that breaks a relation is no input at all: never a radius
                valid = torch.as_tensor(self.space.relations_hold(cand.cpu().numpy()),
                                        device=sub.device)
                self.rejected[rows[~valid]] += 1
                can[torch.nonzero(can).reshape(-1)[~valid]] = False
                if not valid.any():
                    return out, logits_out, size
                rows, cand, x = rows[valid], cand[valid], x[valid]
        with torch.no_grad():
            logits = charged(self.model, self.ledger,
                             self.owners[rows.cpu().numpy()]).logits(cand).detach().to(torch.float64)
            if params is None:
                norm = self.threat.norm(self.space.scaled_delta(cand, x))
            else:
                norm = self.threat.strength(x, params[can], cand)
        norm = norm.detach().to(torch.float64)
        pred = logits.argmax(dim=1)
        holds = self.statement.holds(pred, self.y[rows])
        better = holds & (norm < self.best_r[rows])
        where = rows[better]
        self.best_r[where] = norm[better]
        self.best_x[where] = cand[better]
        self.best_logits[where] = logits[better]
        self.alone[where] = len(rows) == 1
        out[can] = torch.where(holds, pred, -1)
        logits_out[can] = logits
        size[can] = norm
        return out, logits_out, size

    def check_one(self, i: int, candidate: np.ndarray) -> int:
        """Verify one candidate (original units, ``d`` entries in any shape) for batch input
        ``i``: the model's class there when the statement holds, else -1 (also when the
        input's budget is spent). For exact solvers that verify inside their own loop."""
        sub = torch.tensor([i], device=self.x.device)
        cand = torch.as_tensor(np.asarray(candidate), dtype=self.x.dtype,
                               device=self.x.device).reshape(self.x[sub].shape)
        return int(self.verify(sub, cand)[0][0])

    def confirm_alone(self, sub: torch.Tensor, passes: int) -> torch.Tensor:
        """Confirm the best counterexample of each input of ``sub`` (batch positions) by a
        model call on its row alone (batch size one, the model's own device and dtype, as a
        user re-checking one row calls it), at most ``passes`` such calls per input, each
        charged to it. Counterexamples of size 0 (the clean input) and those verified alone
        already cost nothing.

        Where the call alone does not satisfy the statement (float32 rounding differs
        between batch sizes: a counterexample verified in a batch within rounding of the
        boundary), the counterexample is pushed outward (Lp threats, see
        :data:`ALONE_PUSH_RANGE`; projected into the feature space, a point that breaks a
        relation counted in ``rejected`` and not queried) and the first push the model
        confirms alone replaces it, a little larger. Where none does within ``passes``, or
        the budget allows no call, the input keeps no counterexample (size ``inf``, the
        clean input and logits back). A confirmed counterexample's logits become those of
        its call alone.

        Returns the inputs of ``sub`` whose counterexample was pushed or withdrawn.
        """
        r = self.best_r[sub]
        todo = sub[torch.isfinite(r) & (r > 0) & ~self.alone[sub]]
        moved = [i for i in todo.tolist() if not self._confirm_one(i, passes)]
        return torch.as_tensor(moved, dtype=torch.long, device=sub.device)

    def _confirm_one(self, i: int, passes: int) -> bool:
        """:meth:`confirm_alone` for batch input ``i``: True where its counterexample was
        confirmed as it is."""
        x, best = self.x[i:i + 1], self.best_x[i:i + 1]
        logits = self._alone(i, best)
        if logits is not None and self._holds(i, logits):
            self.best_logits[i], self.alone[i] = logits[0], True
            return True
        if logits is not None and isinstance(self.threat, LpThreat) and passes > 1:
            u, tried = self.space.scaled_delta(best, x), best
            push = self._first_push(i, logits)
            for _ in range(passes - 1):
                cand = self.space.project(self.space.apply_delta(x, u * (1 + push)), x)
                push *= 10
                if torch.equal(cand, tried):  # the projection undid the push: no new point
                    continue
                tried = cand
                if self.space.has_relations and not self.space.relations_hold(
                        cand.cpu().numpy())[0]:
                    self.rejected[i] += 1
                    continue
                logits = self._alone(i, cand)
                if logits is None:
                    break
                if self._holds(i, logits):
                    with torch.no_grad():
                        norm = self.threat.norm(self.space.scaled_delta(cand, x))
                    self.best_r[i] = norm.detach().to(torch.float64)[0]
                    self.best_x[i], self.best_logits[i], self.alone[i] = cand[0], logits[0], True
                    return False
        # no call alone confirms a counterexample: the input claims none
        self.best_r[i] = math.inf
        self.best_x[i], self.best_logits[i] = self.x[i], self.clean_logits[i]
        self.alone[i] = False
        return False

    def _first_push(self, i: int, logits: torch.Tensor) -> float:
        """The first outward push of input ``i``'s counterexample, whose logits alone are
        ``logits`` ``(1, K)``: the margin, linear along the segment from the clean input
        (margin ``m0``) to the counterexample (margin ``m1`` alone), taken twice the model's
        rounding past zero, within :data:`ALONE_PUSH_RANGE`."""
        y = self.y[i:i + 1]
        m0 = float(self.statement.margin(self.clean_logits[i:i + 1].to(torch.float64), y)[0])
        m1 = float(self.statement.margin(logits, y)[0])
        tol = float(rounding_margin(logits, self.model.dtype)[0])
        lo, hi = ALONE_PUSH_RANGE
        push = 2 * (max(m1, 0.0) + tol) / (m0 - m1) if m0 > m1 else hi
        return min(max(push, lo), hi)

    def _alone(self, i: int, row: torch.Tensor) -> torch.Tensor | None:
        """The model's logits ``(1, K)`` (float64) at ``row`` ``(1, *shape)``, a call of
        its own charged to input ``i``; ``None`` where the input's budget is spent."""
        owner = self.owners[i:i + 1]
        if self.ledger.remaining(owner)[0] < 1:
            return None
        with torch.no_grad():
            return charged(self.model, self.ledger, owner).logits(row).detach().to(
                torch.float64)

    def _holds(self, i: int, logits: torch.Tensor) -> bool:
        """The statement holds for input ``i`` at ``logits`` ``(1, K)``."""
        return bool(self.statement.holds(logits.argmax(dim=1), self.y[i:i + 1])[0])
