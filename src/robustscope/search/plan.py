"""How the white-box radius search spends a per-input budget of model passes.

A *pass* is one row through the model, forward or backward: a gradient call costs
``grad_cost`` passes per input (2 for autograd: one forward, one backward; ``2d + 1`` for
finite differences). Given a per-input budget ``B`` (or, without one, the default of
:attr:`SearchConfig.default_gradients` gradient calls), :func:`plan_attack` splits it into

1. an untargeted minimum-norm run (``minnorm_steps``): under Linf / L2 aimed at a runner-up
   class where the first-order distance to its boundary (``aimed`` classes, a gradient
   each) is clearly the nearest, and where the budget gives both enough steps, beside a
   second one from the input with longer steps (``wide_steps``); under L1 followed by a
   refining run (``refine_steps``) in the class it reached, from its best counterexample;
2. targeted minimum-norm runs at runner-up classes (``targets`` runs of ``target_steps``):
   an untargeted run follows the steepest class, which on 5–15% of inputs is not the class
   of the nearest boundary;
3. under L1, the projection (``project`` classes, ``project_rounds`` rounds): each input moved
   onto the boundary linearised at its best counterexample by the smallest L1 step in the
   box (FAB's step); the counterexample's own class before the line search, which then skips
   the counterexamples it put on the boundary, the other classes after it; only the first
   class is planned (:func:`projection_passes`), the rest is paid from what is left;
4. a forward-only line search of the best counterexample towards its input
   (``line_steps``);
5. fixed-strength PGD probes that bisect the bracket until it is within ``rtol`` or the budget
   is spent (``probe_steps`` each).

Under ``solver="auto"`` the engine then spends what an input has left under its ceiling on
further minimum-norm runs at other classes (``minnorm_runs.spend_leftover``; not planned here:
it takes whatever the parts above did not use), and, under any Lp threat
(``project_left``), what is then left on projections onto classes not yet projected onto.

A part that cannot be given at least ``SearchConfig.min_run_steps`` steps (or four probes) is
dropped and its share goes to the untargeted run, so that a small budget is spent where it
helps most. Budgets are ceilings per input: inputs whose bracket closes stop early.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass

from robustscope.models.base import QueryLedger

#: Passes kept aside for the clean prediction and one to spare (under a budget, the check
#: alone below).
RESERVED_PASSES = 2
#: Most passes per input for the model calls on its final counterexample alone
#: (:meth:`~robustscope.search.verify.Verifier.confirm_alone`: the check, and where it fails
#: one push outward; none where the counterexample was verified alone already). Under a
#: budget they are kept aside from it while a batch is searched
#: (``BatchState.keeping_aside``), the check in the spare pass of ``RESERVED_PASSES``, the
#: push beside it; without one they come on top of the plan's passes.
ALONE_PASSES = 2
#: Fewest probes worth planning: one probe moves the bracket by half at most, and below four
#: the passes do more in the untargeted run (default plan, LeNet-5 Linf: median ratio to the
#: best known radius 1.0041 with room for two probes, 1.0033 without them).
MIN_PROBES = 4


@dataclass
class SearchConfig:
    """Knobs of the radius search (tuned on the networks of ``benchmarks/peers``).

    The white-box cascade (``solver="auto"`` / ``"minnorm"`` on a differentiable model, or
    any model under ``solver="minnorm"`` / ``"pgd"``) is planned by :func:`plan_attack` from
    the per-input budget; the fields below are shares of it and the sizes of its parts.
    """

    #: Gradient calls per input planned when no budget is given (300 passes for autograd).
    default_gradients: int = 150
    #: Share of the per-input passes for the untargeted minimum-norm run.
    minnorm_share: float = 0.5
    #: Share of the per-input passes for the targeted minimum-norm runs (all together).
    target_share: float = 0.3
    #: Most runner-up classes given a targeted minimum-norm run.
    targets: int = 2
    #: Classes (by clean logit) whose first-order distance is computed to choose the targets
    #: (one gradient each per input; only where there is a choice to make) ...
    rank_classes: int = 9
    #: ... and only where that costs at most this share of the passes: on 10-class networks
    #: the 9 gradients cost more tightness than they bring at 100 passes per input
    #: (LeNet-5 Linf at 100 passes: median ratio 1.011 without, 1.023 with), while on a
    #: 10-class linear model under L1 at 1,000 passes they brought the p90 from 1.109 to 1.002.
    rank_share: float = 0.05
    #: Fewest steps a minimum-norm run is worth (a part below it is dropped).
    min_run_steps: int = 10
    #: Linf / L2: before the untargeted run, the first-order distance to the boundary of each
    #: of this many runner-up classes (by clean logit; a gradient each, taken from the run's
    #: steps) ...
    aim_classes: int = 3
    #: ... aims the run at the nearest of them where its estimate is below this share of the
    #: logit runner-up's; elsewhere the run stays untargeted (see ``docs/budget.md``).
    aim_ratio: float = 0.9
    #: Under L1, the share of the untargeted run's steps given to a second, refining run: dense
    #: steps in the class the first run reached, from its best counterexample (see
    #: ``minnorm_runs.refine_best_class``); only where each of the two gets ``2 * min_run_steps``
    #: (below, a run of 15 steps often finds no counterexample at all).
    l1_refine_share: float = 0.5
    #: Linf / L2: this share of the untargeted run's steps goes to a second untargeted run
    #: from the input, aimed alike, whose step starts ``wide_step`` times as long relative to
    #: the strength (``minnorm``'s ``step_start``); the smaller counterexample of the two
    #: counts. A run's outcome depends on its step scale in no orderly way, and the best of
    #: two scales beats one run of their summed length (see ``docs/budget.md``, "Two step
    #: scales") ...
    wide_share: float = 0.5
    #: ... the second run's starting step, relative to the first run's ...
    wide_step: float = 6.0
    #: ... and the fewest steps each of the two runs needs (at 200 passes per input, 31
    #: steps each, the split was mixed on the peer suite; from 300 it was not).
    wide_min_steps: int = 40
    #: Under L1, the projection (FAB's step,
    #: :mod:`~robustscope.solvers.attacks.gradient.boundary_projection`): each
    #: input moved onto the boundary linearised at its best counterexample, one gradient
    #: each for this many classes (the largest logits there other than the label: the
    #: counterexample's own class first, before the line search; the next ones after it,
    #: only for inputs the first one improved) ... (0: no projection at all, also none of
    #: the passes left at the end under any threat)
    project_classes: int = 3
    #: ... then this many more rounds in the best counterexample's class, each only for the
    #: inputs the round before improved (see ``docs/budget.md``, "Projection").
    project_rounds: int = 1
    #: Steps of each fixed-strength PGD probe of the bisection.
    pgd_steps: int = 10
    #: Restarts of each probe (restart 0 is warm-started, the others aim at runner-ups).
    pgd_restarts: int = 1
    #: Forward-only bisection steps of the line search towards the input.
    line_search_steps: int = 8
    #: Most bisection probes per input (doublings to find a first bracket come on top).
    max_probes: int = 12
    #: The first probe of a bracket tests this share of the warm start's radius.
    first_probe: float = 0.9
    #: Seconds per input for a MILP (tree ensembles, ReLU networks).
    exact_time_limit: float = 10.0
    #: Stop on evidence (:mod:`robustscope.search.convergence`, issue #39): after the planned
    #: cascade, rounds of attacks try to beat each open input's radius until a whole cycle
    #: of them in a row fails at ``rtol`` below it (converged), its
    #: bracket closes, or the next round would take it past this many passes per input (a
    #: budget stays the hard ceiling below it). ``None``: no rounds, the planned cascade alone.
    converge_ceiling: int | None = 3000
    #: Gradient calls of each round's PGD attack ...
    converge_steps: int = 15
    #: ... and of each minimum-norm round.
    converge_minnorm_steps: int = 40
    #: Classes (nearest boundary first) given a targeted round in each cycle of rounds; a
    #: radius has converged when a whole cycle (these, a random start and a minimum-norm run)
    #: failed to beat it by ``rtol`` in a row.
    converge_targets: int = 9
    #: Under L1 the targeted rounds are minimum-norm runs from the input (a fixed-strength
    #: PGD step moves few coordinates and rarely reaches a far class's boundary), at this
    #: many classes (tune half of the zoo, the four L1 rows with misses: p90 1.015 / 1.039 /
    #: 1.051 with 9 PGD rounds, 1.007 / 1.014 / 1.029 with 4 minimum-norm ones, at 754
    #: against 718 passes per input).
    converge_l1_targets: int = 4
    #: Most rounds (the ceiling usually ends them first).
    converge_max_rounds: int = 200
    #: ``time.perf_counter()`` seconds after which no further convergence round, certified
    #: bound probe or branch-and-bound proof starts (inputs still open are reported not
    #: converged; bounds keep what was proven); ``None``: no clock. ``robustscope verify``
    #: sets it so that a radius bracket keeps within its share of a property's timeout.
    deadline: float | None = None


#: Models without gradients (finite differences: ``2d + 1`` queries per gradient) under
#: ``solver="minnorm"`` or ``"pgd"`` (no aiming: it was measured on networks only).
BLACKBOX_CONFIG = SearchConfig(default_gradients=120, targets=0, max_probes=6, aim_classes=0,
                               project_classes=0, wide_share=0.0)


#: Differentiable models on a feature space with relations between features: the projection
#: onto the relations makes every step non-convex, and random restarts of longer probes are
#: what finds the nearer counterexamples (credit MLP 14-16-2 of ``benchmarks/relations.py``,
#: 40 inputs: p90 ratio to the best radius of five settings 1.57 with the plain default's 291
#: passes per input, 1.00 with this one's 2,325). Tabular models are cheap to query. No aiming:
#: it was measured on image networks only.
RELATIONS_CONFIG = SearchConfig(default_gradients=1200, pgd_steps=20, pgd_restarts=3,
                                aim_classes=0, project_classes=0, wide_share=0.0)


#: The strong setting of the benchmarks' best-known radii (with a 10x budget and a tight
#: ``rtol``): four runner-up classes, three restarts per probe, twenty probes.
REFERENCE_CONFIG = SearchConfig(targets=4, pgd_steps=20, pgd_restarts=3, max_probes=20)


@dataclass(frozen=True)
class AttackPlan:
    """Steps of each part of the white-box cascade for one batch (see the module doc)."""

    passes: int          # per-input passes the plan was made for
    minnorm_steps: int   # untargeted minimum-norm run (0: not run)
    targets: int         # runner-up classes with a targeted run
    target_steps: int    # steps of each targeted run
    line_steps: int      # forward-only line search
    probe_steps: int     # PGD steps per bisection probe (0: no bisection)
    probe_restarts: int
    ranked: int = 0      # candidate classes ranked by first-order distance before targeting
    refine_steps: int = 0  # L1: refining run in the class the untargeted run reached
    aimed: int = 0       # runner-ups whose first-order distance aims the untargeted run
    project: int = 0     # classes of the projection (0: no projection)
    project_rounds: int = 0  # further projection rounds in the best counterexample's class
    project_left: bool = False  # passes left at the end go to projections (any threat)
    wide_steps: int = 0  # Linf / L2: second untargeted run, longer steps (config.wide_step)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def plan_attack(budget: int | None, grad_cost: int, n_classes: int, config: SearchConfig,
                solver: str = "auto", l1: bool = False, aim: bool = True) -> AttackPlan:
    """Split ``budget`` passes per input (``None``: ``config.default_gradients`` gradient
    calls) among the parts of the cascade that ``solver`` runs (``auto``: all four;
    ``minnorm``: minimum-norm runs and line search; ``pgd``: the bisection only). Under an
    L1 threat (``l1``) the untargeted run's steps are shared with a refining run
    (``config.l1_refine_share``) where both get at least ``2 * config.min_run_steps``; under
    Linf / L2 (and ``aim``: an untargeted statement) ``config.aim_classes`` of them pay for
    aiming it.

    The planned parts never add up to more than the budget (less the clean pass and, under
    a budget, :data:`ALONE_PASSES`): ranking the candidate classes
    costs ``ranked · grad_cost``, each run its steps times ``grad_cost`` plus one
    verification pass, each probe ``pgd_restarts · (pgd_steps ·
    grad_cost + 1) + 1``.
    """
    total = budget if budget is not None else config.default_gradients * grad_cost
    kept = RESERVED_PASSES + (ALONE_PASSES - 1 if budget is not None else 0)
    avail = max(0, total - kept)
    probe_cost = config.pgd_restarts * (config.pgd_steps * grad_cost + 1) + 1
    if solver == "pgd":
        return AttackPlan(total, 0, 0, 0, 0, config.pgd_steps, config.pgd_restarts)
    line = min(config.line_search_steps, avail // 4)
    k = max(0, min(config.targets, n_classes - 2))
    target_steps = ranked = 0
    while k:
        # ranking the candidates only pays where more classes remain than runs aim at
        ranked = min(config.rank_classes, n_classes - 1) if n_classes - 2 > k else 0
        if ranked * grad_cost > config.rank_share * avail:
            ranked = 0
        pool = avail - ranked * grad_cost
        target_steps = int(config.target_share * max(0, pool) / k) // grad_cost
        if target_steps >= config.min_run_steps:
            break
        k -= 1
    if not k:
        target_steps = ranked = 0
    pool = avail - ranked * grad_cost
    # passes of everything but the untargeted run's steps; rounding at a small budget can
    # leave its share short of them, and the untargeted run gives the difference back
    others = line + k * target_steps * grad_cost + 1 + k
    minnorm_steps = max(0, min(int(config.minnorm_share * pool) // grad_cost,
                               (pool - others) // grad_cost))
    rest = pool - others - minnorm_steps * grad_cost
    probes = solver == "auto" and rest >= MIN_PROBES * probe_cost
    if not probes:  # too little for a bracket: the untargeted run gets it
        minnorm_steps += max(0, rest) // grad_cost
    if minnorm_steps == 0 and avail >= grad_cost + 1:  # one step, the line search shrinks
        minnorm_steps = 1
        line = min(line, avail - grad_cost - 1)
    # under L1 the projection's first class is paid from the untargeted run's steps, where
    # they leave the run enough beside the aiming's (below); its other classes and rounds
    # from what the inputs have left (under Linf / L2 the runs converge, and the two steps
    # cost more than the projection brings: measured in docs/budget.md, "Projection")
    aim_wanted = 0 if l1 or not aim or n_classes < 3 else min(config.aim_classes, n_classes - 1)
    project = min(config.project_classes, n_classes - 1 if aim else 1)
    rounds = config.project_rounds if project else 0
    steps = -(-projection_passes(grad_cost) // grad_cost)
    if project and l1 and minnorm_steps - steps - aim_wanted >= config.min_run_steps:
        minnorm_steps -= steps
    else:
        project = rounds = steps = 0
    floor = MIN_PROBES * probe_cost if probes else 0
    minnorm_steps, refine = _second_run(
        minnorm_steps, config.l1_refine_share if l1 else 0.0, minnorm_steps + steps,
        2 * config.min_run_steps, others + floor, pool, grad_cost)
    # aiming costs a gradient per class, taken from the untargeted run's steps
    aimed = aim_wanted
    if aimed and minnorm_steps - aimed >= config.min_run_steps:
        minnorm_steps -= aimed
    else:
        aimed = 0
    wide = 0
    if not l1 and config.wide_share > 0:
        minnorm_steps, wide = _second_run(minnorm_steps, config.wide_share,
                                          minnorm_steps + aimed, config.wide_min_steps,
                                          others + floor, pool, grad_cost)
    return AttackPlan(total, minnorm_steps, k, target_steps, line,
                      config.pgd_steps if probes else 0, config.pgd_restarts, ranked, refine,
                      aimed, project, rounds, config.project_classes > 0, wide)


def _second_run(steps: int, share: float, paid: int, minimum: int, overhead: int, pool: int,
                grad_cost: int) -> tuple[int, int]:
    """Split the untargeted run's ``steps`` gradient calls per input between it and a second
    run that gets ``share`` of them (L1's refining run, Linf / L2's long-step run):
    ``(first, second)`` steps. The second run's verification pass comes out of the first
    run's steps where the passes already planned (``overhead`` plus ``paid`` gradient calls
    at ``grad_cost`` passes each) leave no pass for it in ``pool``. Where either run would
    get fewer than ``minimum`` steps there is no second run: ``(steps, 0)``."""
    second = int(share * steps)
    first = steps - second
    if overhead + 1 + paid * grad_cost > pool:
        first -= 1  # pays for the second run's verification pass
    if min(first, second) >= minimum:
        return first, second
    return steps, 0


def projection_passes(grad_cost: int) -> int:
    """Passes per input the plan sets aside for the projection: a gradient and a check for
    the best counterexample's own class. Its other classes, its rounds and its second tries
    are paid from what each input has left after the line search, which skips the
    counterexamples the projection put on the boundary (see ``refine.project``)."""
    return grad_cost + 1


class StageLedger:
    """Passes spent per part of the search, summed over inputs. ``with stages.stage(name,
    ledger):`` adds what the ledger's total grew by inside the block, so the parts add up to
    the ledger's total when every model call sits inside one."""

    def __init__(self) -> None:
        self.passes: dict[str, int] = {}

    @contextlib.contextmanager
    def stage(self, name: str, ledger: QueryLedger) -> Iterator[None]:
        before = int(ledger.used().sum())
        try:
            yield
        finally:
            spent = int(ledger.used().sum()) - before
            self.passes[name] = self.passes.get(name, 0) + spent

    def as_dict(self) -> dict[str, int]:
        """``{part: passes}`` for the parts that spent any."""
        return {k: v for k, v in self.passes.items() if v}
