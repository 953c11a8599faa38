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
"""

from __future__ import annotations

import math

import numpy as np
import torch

from robustscope.core.space import FeatureSpace
from robustscope.core.statement import Statement
from robustscope.models.base import Classifier, QueryLedger
from robustscope.search.metering import charged
from robustscope.threats.image import ImageThreat
from robustscope.threats.lp import LpThreat


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
    was verified) and ``best_logits`` ``(n, K)`` only ever hold verified candidates.
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
