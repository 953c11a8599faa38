"""The bookkeeping of one batch of the radius search, changed only by its own methods.

:class:`BatchState` holds the batch's :class:`~robustscope.search.verify.Verifier` (the best
verified counterexample per input) and beside it what the search learns: certified lower
bounds, closed brackets, failed probes and their iterates, the aiming's first-order
distances. The stages of the search (:mod:`.cascade`, :mod:`.exact`, :mod:`.certification`)
read it and report to it; they hand solvers a :class:`~robustscope.solvers.problem.
SolverProblem` of some of its rows (:meth:`BatchState.problem`) and call the solvers through
the registry (:func:`registered`).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator

import numpy as np
import torch

from robustscope.search.metering import charged
from robustscope.search.plan import AttackPlan, SearchConfig, StageLedger
from robustscope.search.verify import Verifier
from robustscope.solvers.output import SolverOutput
from robustscope.solvers.problem import Budget, SolverProblem
from robustscope.solvers.registry import get_solver
from robustscope.solvers.tolerances import BRACKET_RTOL


def registered(name: str) -> Callable[..., SolverOutput]:
    """``solve(problem, **options)`` of the registry's solver ``name``, looked up at each
    call (the search's one way to call a solver)."""
    def solve(problem: SolverProblem, **options) -> SolverOutput:
        return get_solver(name).solve(problem, **options)
    solve.__name__ = solve.__qualname__ = f"solve[{name}]"
    return solve


def _verifier_attribute(name: str) -> property:
    """The verifier's attribute ``name``, read and written through the state."""
    return property(lambda self: getattr(self.verifier, name),
                    lambda self, value: setattr(self.verifier, name, value),
                    doc=f"The verifier's ``{name}``.")


class BatchState:
    """One batch of the search: its :class:`Verifier` (built from the positional arguments,
    see there: model, space, threat, statement, ledger, inputs, labels, owners, clean logits,
    inputs already broken) plus the search's settings (``max_radius``, ``rtol``,
    ``generator``, ``config``) and its bookkeeping (arrays of the batch's length): certified
    lower bounds, closed brackets, the largest strength at which an attack failed (not a
    certificate), the bracketing PGD runs made per input and the last failed probe's iterate
    (a warm start for the next, larger strength). ``stages`` sums the passes of each part of
    the search."""

    model = _verifier_attribute("model")
    space = _verifier_attribute("space")
    threat = _verifier_attribute("threat")
    statement = _verifier_attribute("statement")
    ledger = _verifier_attribute("ledger")
    x = _verifier_attribute("x")
    y = _verifier_attribute("y")
    owners = _verifier_attribute("owners")
    clean_logits = _verifier_attribute("clean_logits")
    best_x = _verifier_attribute("best_x")
    best_r = _verifier_attribute("best_r")
    best_logits = _verifier_attribute("best_logits")
    rejected = _verifier_attribute("rejected")
    alone = _verifier_attribute("alone")

    def __init__(self, *args, max_radius: float, rtol: float, generator: torch.Generator,
                 config: SearchConfig, stages: StageLedger) -> None:
        self.verifier = Verifier(*args)
        #: passes allowed per input (``None``: no limit), the check alone included, also
        #: while :meth:`keeping_aside` lowers the ledger's budget
        self.budget = self.ledger.budget
        self.max_radius, self.rtol = max_radius, rtol
        self.generator, self.config, self.stages = generator, config, stages
        self.started = time.perf_counter()  # the search's time on the batch starts here
        self.plan: AttackPlan | None = None
        x = self.x
        n = len(x)
        self.lower = torch.zeros(n, dtype=torch.float64, device=x.device)
        self.exact = torch.zeros(n, dtype=torch.bool, device=x.device)
        #: the radius converged by the evidence of the convergence rounds (only where
        #: ``config.converge_ceiling`` is set, see :mod:`robustscope.search.convergence`) or
        #: of the black-box step-down search
        self.converged = torch.zeros(n, dtype=torch.bool, device=x.device)
        #: the black-box step-down search ran and its budget ran out before it converged
        self.still_falling = torch.zeros(n, dtype=torch.bool, device=x.device)
        self.attack_lo = torch.zeros(n, dtype=torch.float64, device=x.device)
        self.probes = torch.zeros(n, dtype=torch.int64, device=x.device)
        #: scaled iterate ``(n, d)`` of the last probe that failed (lowest margin), valid
        #: where ``near_ok``: inside the ball of ``attack_lo``
        self.near_u = torch.zeros(n, self.space.n_features, dtype=x.dtype, device=x.device)
        self.near_ok = torch.zeros(n, dtype=torch.bool, device=x.device)
        #: first-order distances ``(n, c)`` at the clean input to the boundaries of the classes
        #: ``aim_classes`` ``(n, c)`` (-1 rows: not computed), kept by the aiming for the
        #: ranking of the targets, which would otherwise pay for the same gradients again
        self.aim_classes = torch.full((n, 0), -1, dtype=torch.long, device=x.device)
        self.aim_distance = torch.zeros(n, 0, dtype=torch.float64, device=x.device)

    # -- the verifier's ------------------------------------------------------------------

    def affordable(self, sub: torch.Tensor, cost: int) -> torch.Tensor:
        """The inputs of ``sub`` whose budget still allows ``cost`` passes."""
        return self.verifier.affordable(sub, cost)

    def check(self, sub: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        """:meth:`Verifier.check`: boolean ``(len(sub),)``, the candidate verified."""
        return self.verifier.check(sub, candidates)

    def verify(self, sub: torch.Tensor, candidates: torch.Tensor,
               params: torch.Tensor | None = None):
        """:meth:`Verifier.verify`: ``(classes, logits, size)``."""
        return self.verifier.verify(sub, candidates, params)

    def confirm_alone(self, sub: torch.Tensor, passes: int) -> None:
        """:meth:`Verifier.confirm_alone` on the inputs ``sub`` (at most ``passes`` calls
        each): each counterexample confirmed by a model call on its row alone, else pushed
        outward or withdrawn; a pushed one stays ``exact`` only where it still meets the
        certified bound within ``BRACKET_RTOL``."""
        moved = self.verifier.confirm_alone(sub, passes)
        if len(moved):
            r = self.best_r[moved]
            met = torch.isfinite(r) & (r - self.lower[moved] <= BRACKET_RTOL * r)
            self.exact[moved] = self.exact[moved] & met

    @contextlib.contextmanager
    def keeping_aside(self, passes: int) -> Iterator[None]:
        """Inside the block the ledger's budget (if any) is ``passes`` lower, so that what
        the search spends leaves each input that many passes for :meth:`confirm_alone`."""
        ledger = self.ledger
        if ledger.budget is None:
            yield
            return
        ledger.budget -= passes
        try:
            yield
        finally:
            ledger.budget += passes

    # -- reading ---------------------------------------------------------------------------

    def still_open(self, sub: torch.Tensor, probes: bool = True) -> torch.Tensor:
        """Boolean ``(len(sub),)``: the input has no counterexample yet, or its bracket
        ``[max(lower bound, attack_lo), best_r]`` is wider than ``rtol`` and not certified;
        with ``probes=False`` the bracket's lower end is the certified lower bound alone (a
        failed probe's strength ``attack_lo`` proves nothing)."""
        hi = self.best_r[sub]
        lo = torch.maximum(self.attack_lo[sub], self.lower[sub]) if probes else self.lower[sub]
        return ~self.exact[sub] & (~torch.isfinite(hi) | (hi - lo > self.rtol * hi))

    def upper_ends(self, sub: torch.Tensor) -> torch.Tensor:
        """``(len(sub),)`` the brackets' upper ends: the best radius, else ``max_radius``."""
        return torch.where(torch.isfinite(self.best_r[sub]), self.best_r[sub],
                           torch.full_like(self.best_r[sub], self.max_radius))

    def stage(self, name: str):
        """Count the passes spent inside the block as part ``name`` of the search."""
        return self.stages.stage(name, self.ledger)

    def problem(self, sub: torch.Tensor, eps: torch.Tensor | float | None = None
                ) -> SolverProblem:
        """The solver problem of the batch inputs ``sub``: their rows, budget (the ledger and
        their owners), clean logits, the batch's generator, and the one verification (row
        ``i`` of the problem is batch input ``sub[i]``). ``eps``: per-input strengths (a
        number: the same for every input)."""
        if eps is not None and not torch.is_tensor(eps):
            eps = torch.full((len(sub),), float(eps), dtype=torch.float64, device=sub.device)

        def verify(rows, candidates, params=None):
            return self.verifier.verify(sub[rows], candidates, params)

        owners = self.owners[sub.cpu().numpy()]
        return SolverProblem(
            model=charged(self.model, self.ledger, owners), x=self.x[sub], y=self.y[sub],
            space=self.space, threat=self.threat, statement=self.statement, eps=eps,
            budget=Budget(self.ledger, owners),
            generator=self.generator, clean_logits=self.clean_logits[sub], verify=verify)

    # -- bookkeeping -------------------------------------------------------------------------

    def use_plan(self, plan: AttackPlan) -> None:
        """The attack plan the cascade follows on this batch."""
        self.plan = plan

    def apply_exact(self, sub: torch.Tensor, out: SolverOutput) -> torch.Tensor:
        """Apply an exact solver's output on the batch inputs ``sub`` (its candidates already
        verified through the problem's ``verify``): its ``lower_bound`` raises the certified
        bound; an input is exact where the solver closes the bracket (status ``exact``) and
        the verified radius meets the bound within ``BRACKET_RTOL``, or where the bound is
        infinite and the solver has no candidate (proven unbreakable inside the feature
        space). Returns, per input of ``sub``, whether its bracket stays open: neither exact
        nor certified beyond ``max_radius``."""
        device = self.x.device
        bound = torch.as_tensor(out.lower_bound, dtype=torch.float64, device=device)
        self.lower[sub] = torch.maximum(self.lower[sub], bound)
        r = self.best_r[sub]
        met = torch.isfinite(r) & (r - self.lower[sub] <= BRACKET_RTOL * r)
        closed = torch.as_tensor(out.closed, device=device)
        unbreakable = ~torch.as_tensor(out.found, device=device) & torch.isinf(bound)
        self.exact[sub] = self.exact[sub] | (closed & met) | unbreakable
        return ~(self.exact[sub] | (bound > self.max_radius))

    def keep_aim(self, sub: torch.Tensor, classes: torch.Tensor,
                 distance: torch.Tensor) -> None:
        """The aiming's first-order ``distance`` ``(len(sub), c)`` to the boundaries of
        ``classes`` at the clean inputs ``sub`` (the other rows: not computed)."""
        n, c = len(self.x), classes.shape[1]
        self.aim_classes = torch.full((n, c), -1, dtype=torch.long, device=self.x.device)
        self.aim_distance = torch.zeros(n, c, dtype=distance.dtype, device=self.x.device)
        self.aim_classes[sub], self.aim_distance[sub] = classes, distance

    def record_probes(self, todo: torch.Tensor, eps: torch.Tensor, ok: torch.Tensor,
                      x_adv: torch.Tensor, bracketed: torch.Tensor) -> None:
        """Fixed-strength probes at ``eps`` on the inputs ``todo`` (``ok``: verified, their
        iterates ``x_adv``): a failed probe raises ``attack_lo`` and keeps its iterate as the
        next probe's warm start; ``bracketed`` probes (the input had a counterexample) are
        counted."""
        self.probes[todo] += bracketed.to(self.probes.dtype)
        self.attack_lo[todo] = torch.where(ok, self.attack_lo[todo], eps)
        failed_u = self.space.scaled_delta(x_adv.to(self.x.dtype), self.x[todo])
        self.near_u[todo] = torch.where(ok[:, None], self.near_u[todo], failed_u)
        self.near_ok[todo] = self.near_ok[todo] | ~ok

    def forget_beyond(self, max_radius: float) -> np.ndarray:
        """Counterexamples beyond ``max_radius`` are censored: their inputs get the clean
        input and logits back. Returns the radii ``(n,)`` (``inf`` where censored)."""
        r = self.best_r.cpu().numpy()
        found = r <= max_radius
        lost = torch.as_tensor(~found & np.isfinite(r))
        self.best_x[lost] = self.x[lost]
        self.best_logits[lost] = self.clean_logits[lost]
        return np.where(found, r, math.inf)
