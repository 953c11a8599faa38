"""L2 / L1: counterexamples built from single-feature crossings, chosen by what each buys.

A tree ensemble's nearest counterexample under L2 moves many features, each by a small amount
just past one of the model's thresholds: a squared norm is cheapest spread thin. The random
searches of the gradient-free cascade end with counterexamples that move fewer features by
more (on the four tune tree ensembles of ``benchmarks/blackbox_budget.py``, the exact
counterexample moved more features than the cascade's in 19 of the 24 inputs with the
largest ratios). :func:`crossing_search` reads the margin along each feature and builds sets
of moves:

1. **profile**: for each mutable feature, each sign and each level ``a·R`` of :data:`LEVELS`
   (``R`` the input's best radius so far, scaled units), the margin at ``x ± a·R·e_j``; a
   level whose margin is below both the previous level's and the input's has crossed a
   threshold that helps, and becomes a *move*, worth its drop from the input's margin per
   cost ``|a·R|^p``;
2. **constructions**, until the budget is spent: from the input (even rounds) or from the
   best counterexample with one to three of its moves taken back (odd rounds: ruin and
   recreate), the moves are tried in a random order weighted by worth (Gumbel keys on
   ``log worth``); a move is kept when the margin falls and the point stays within
   :data:`REACH` times the best radius, and the construction ends at a counterexample;
3. **pin**: each move of a construction's counterexample is bisected towards the input's
   value, largest first, the others held, so that each ends just past its threshold
   (:func:`~robustscope.solvers.attacks.decision.coordinates.bisect_moves`, the polish's
   bisection).

The margin is the statement's, from the model's scores (``log`` probabilities for a
``predict_proba`` model). On a label-only model only a level that changes the decision by
itself lowers it; where none does, the search stops after its profile (the cascade does not
run it on models whose scores it has not seen move:
:attr:`~robustscope.solvers.attacks.decision.scaled_oracle.ScaledOracle.scored`).
Every candidate goes through the oracle: valid points only (the box, integer rounding,
one-hot groups, immutable features), each query charged, and only a verified, smaller
counterexample replaces the one held.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from robustscope.core.errors import InputError
from robustscope.solvers.attacks.decision.coordinates import bisect_moves
from robustscope.solvers.attacks.decision.scaled_oracle import ScaledOracle

#: Levels of the profile, as shares of the input's best radius: steps of sqrt(2) from 1.
LEVELS = tuple(2.0 ** (-k / 2) for k in range(7, -1, -1))
#: Levels where the budget cannot pay for :data:`LEVELS`' profile (steps of about 1.68, up
#: to 0.71: the moves of a spread counterexample are well below the radius).
COARSE_LEVELS = (0.25, 0.42, 0.71)
#: Fewest queries per input worth keeping for the search: 190, a budget of 475 at the
#: default share (500 reaches the cascade as 499, a share of 199, which pays for the coarse
#: profile of up to 16 features). Chosen on the tune tree ensembles of
#: ``benchmarks/blackbox_budget.py`` (L2, 40 inputs, seeds 0-3, mean of the seeds' p90
#: radius / exact) at 500 queries: XGBoost of depth 10 1.394 -> 1.267, the multi-class
#: LightGBM 1.605 -> 1.536 and XGBoost 1.524 -> 1.492, the small-data XGBoost 1.412 -> 1.195
#: and LightGBM 1.448 -> 1.218, the random forest 1.263 -> 1.256; medians lower on all six.
#: At 400 queries (seeds 0-1) the random forest lost (p90 1.24-1.30 -> 1.25-1.35) and the
#: multi-class XGBoost's p90 rose while its median fell; at 250, with a profile of two levels
#: (the one that fits there), two of three lost; hence the floor (``docs/budget.md``).
MIN_RESERVE = 190
#: Bisection steps per move when a counterexample is pinned.
PIN_STEPS = 6
#: A construction's point may reach this multiple of the best radius: the profile's levels
#: overshoot each threshold (by up to sqrt(2), or 1.7 with the coarse levels), which the
#: pinning takes back.
REACH = 1.3
#: Moves a ruin takes back from the best counterexample: 1 to this many.
RUIN_MOST = 3


def profile_cost(oracle: ScaledOracle, levels: tuple[float, ...] = LEVELS) -> int:
    """Queries per input of the profile: one for the input, one per feature, sign and
    level."""
    return 1 + 2 * int(oracle.mutable.sum()) * len(levels)


def search_plan(oracle: ScaledOracle, budget: int, share: float = 0.4
                ) -> tuple[int, tuple[float, ...]]:
    """Queries of a per-input ``budget`` kept for :func:`crossing_search` and the levels of
    its profile: ``share`` of the budget with the finest of :data:`LEVELS` and
    :data:`COARSE_LEVELS` whose profile takes at most half of it; ``(0, ())`` where that
    share is under :data:`MIN_RESERVE` or neither profile fits (many features)."""
    keep = int(share * budget)
    if keep < MIN_RESERVE:
        return 0, ()
    for levels in (LEVELS, COARSE_LEVELS):
        if profile_cost(oracle, levels) <= keep / 2:
            return keep, levels
    return 0, ()


@dataclass
class Profile:
    """What a profile found, kept for more constructions: the inputs ``idx`` ``(k,)`` with a
    move, their margins ``m0`` ``(k,)``, their moves ``(k, o, d)`` (one feature each) and
    the worth of each ``(k, o)`` (``-inf``: no move); ``rounds`` constructions were built
    from it so far (ruins are the odd ones)."""

    idx: np.ndarray
    m0: torch.Tensor
    move: torch.Tensor
    worth: torch.Tensor
    rounds: int = 0


def crossing_search(oracle: ScaledOracle, generator: torch.Generator,
                    levels: tuple[float, ...] = LEVELS, pin_steps: int = PIN_STEPS,
                    rounds: int | None = None) -> Profile | None:
    """Profile, constructions and pinning (module docstring) for every input with a
    counterexample and the queries for its profile plus one, until their budgets are spent
    (or ``rounds`` constructions); its counterexamples go to the oracle's record. Returns
    the profile, for :func:`construct_more` (None: no input had a move to build with, and
    nothing was spent beyond the profile)."""
    _need_an_end(oracle, rounds)
    every = np.arange(oracle.n)
    live = oracle.holding().cpu().numpy()
    idx = np.flatnonzero(live & (oracle.remaining(every) >= profile_cost(oracle, levels) + 1))
    if not len(idx):
        return None
    moves = _profile(oracle, idx, levels)
    if moves is None:
        return None
    profile = Profile(*moves)
    construct_more(oracle, profile, generator, pin_steps, rounds)
    return profile


def construct_more(oracle: ScaledOracle, profile: Profile, generator: torch.Generator,
                   pin_steps: int = PIN_STEPS, rounds: int | None = None) -> None:
    """Constructions from ``profile`` (from the input and ruins of the best counterexample,
    in turn) until the budgets of its inputs are spent, or ``rounds`` more."""
    _need_an_end(oracle, rounds)
    idx = profile.idx
    t = 0
    while rounds is None or t < rounds:
        go = oracle.remaining(idx) >= 1
        if not go.any():
            break
        before = oracle.used[idx].sum()
        _construct(oracle, idx[go], profile.m0[go], profile.move[go], profile.worth[go],
                   generator, ruin=profile.rounds % 2 == 1, pin_steps=pin_steps)
        if oracle.used[idx].sum() == before:  # every move was skipped: nothing left to try
            break
        profile.rounds += 1
        t += 1


def _need_an_end(oracle: ScaledOracle, rounds: int | None) -> None:
    """Refuse an oracle without a budget when no number of rounds is given (for
    :func:`crossing_search` and :func:`construct_more` alike)."""
    if rounds is None and oracle.budget is None and (oracle.ledger is None
                                                     or oracle.ledger.budget is None):
        raise InputError("the crossing search (crossing_search, construct_more) needs a "
                         "budget or a number of rounds: without either its constructions "
                         "never end")


def _profile(oracle: ScaledOracle, idx: np.ndarray, levels: tuple[float, ...]
             ) -> tuple[np.ndarray, torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """The profile of the inputs ``idx``: returns the inputs asked, their margins ``(k,)``,
    the moves ``(k, o, d)`` (one feature each, ``o = 2·c·L``) and their worth ``(k, o)``
    (``-inf`` where the level crossed no helpful threshold), for the inputs with a move; None
    when none has one."""
    device, dtype = oracle.flat.device, oracle.flat.dtype
    ti = torch.as_tensor(idx, device=device)
    radius = oracle.best_r[ti]
    columns = torch.nonzero(oracle.mutable).reshape(-1)
    c, L, k, d = len(columns), len(levels), len(idx), oracle.d
    steps = torch.as_tensor(levels, dtype=dtype, device=device)
    size = (torch.stack([steps, -steps]).reshape(1, 1, 2, L)
            * radius.reshape(k, 1, 1, 1)).expand(k, c, 2, L)
    probe = torch.zeros(k, c, 2, L, d, dtype=dtype, device=device)
    probe.scatter_(4, columns.reshape(1, c, 1, 1, 1).expand(k, c, 2, L, 1), size.unsqueeze(4))
    probe = torch.cat([torch.zeros(k, 1, d, dtype=dtype, device=device),
                       probe.reshape(k, c * 2 * L, d)], dim=1)
    _, margin, valid, asked = oracle.query(idx, probe)
    if not asked.any():
        return None
    sel = torch.as_tensor(asked, device=device)
    idx, margin, valid = idx[asked], margin[sel], valid[sel]
    k = len(idx)
    m0 = margin[:, 0]
    level_margin = margin[:, 1:].reshape(k, c, 2, L)
    before = torch.cat([m0.reshape(k, 1, 1, 1).expand(k, c, 2, 1), level_margin[..., :-1]],
                       dim=3)
    crossed = (level_margin < before) & (level_margin < m0.reshape(k, 1, 1, 1))
    move = valid[:, 1:]  # (k, o, d)
    cost = oracle.threat.norm(move.reshape(-1, d)).reshape(k, -1) ** oracle.threat.p
    drop = m0.reshape(k, 1) - level_margin.reshape(k, -1)
    ok = crossed.reshape(k, -1) & torch.isfinite(drop) & (cost > 0)
    has = ok.any(dim=1)  # an input without a move has nothing to build with
    if not has.any():
        return None
    worth = torch.where(ok, torch.log(drop.clamp_min(1e-30) / cost.clamp_min(1e-30)),
                        torch.full_like(drop, -math.inf))
    return idx[has.cpu().numpy()], m0[has], move[has], worth[has]


def _construct(oracle: ScaledOracle, idx: np.ndarray, m0: torch.Tensor, move: torch.Tensor,
               worth: torch.Tensor, generator: torch.Generator, ruin: bool,
               pin_steps: int) -> None:
    """One construction per input of ``idx`` from its moves ``(k, o, d)``, then the pinning
    of the counterexamples it reached."""
    device, dtype = move.device, move.dtype
    k, o, d = move.shape
    ti = torch.as_tensor(idx, device=device)
    cur = torch.zeros(k, d, dtype=dtype, device=device)
    margin = m0.clone()
    open_ = np.ones(k, dtype=bool)
    hit = np.zeros(k, dtype=bool)
    if ruin:
        cur = _ruined(oracle.best_u[ti], generator)
        adv, mg, valid, asked = oracle.query(idx, cur.unsqueeze(1))
        cur, margin = valid[:, 0], torch.where(torch.as_tensor(asked, device=device),
                                               mg[:, 0], m0)
        hit = adv[:, 0].cpu().numpy()  # still a counterexample without those moves: pin it
        open_ = asked & ~hit
    gumbel = -torch.log(-torch.log(torch.rand(k, o, generator=generator, dtype=dtype)
                                   .clamp(1e-12, 1 - 1e-12))).to(device)
    keys = worth + gumbel
    order = keys.argsort(dim=1, descending=True)
    usable = int(torch.isfinite(worth).sum(1).max())
    rows = torch.arange(k, device=device)
    reach = oracle.best_r[ti] * REACH
    for t in range(usable):
        pick = order[:, t]
        step = move[rows, pick]  # (k, d): one feature moved
        j = step.abs().argmax(dim=1)
        v = step[rows, j]
        held = cur[rows, j]
        further = (torch.sign(held) != torch.sign(v)) | (held.abs() < v.abs())
        trial = cur.clone()
        trial[rows, j] = v
        go = (open_ & torch.isfinite(worth[rows, pick]).cpu().numpy() & further.cpu().numpy()
              & (oracle.threat.norm(trial) < reach).cpu().numpy()
              & (oracle.remaining(idx) >= 1))
        if not go.any():
            if not (open_ & (oracle.remaining(idx) >= 1)).any():
                break
            continue
        g = np.flatnonzero(go)
        gt = torch.as_tensor(g, device=device)
        adv, mg, valid, _ = oracle.query(idx[g], trial[gt].unsqueeze(1))
        better = (mg[:, 0] < margin[gt]) | adv[:, 0]  # a counterexample ends it, kept
        cur[gt] = torch.where(better.unsqueeze(1), valid[:, 0], cur[gt])
        margin[gt] = torch.where(better, mg[:, 0], margin[gt])
        reached = adv[:, 0].cpu().numpy()
        hit[g[reached]] = True
        open_[g[reached]] = False
    if hit.any():
        h = np.flatnonzero(hit)
        bisect_moves(oracle, idx[h], cur[torch.as_tensor(h, device=device)], pin_steps)


def _ruined(best: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """``best`` ``(k, d)`` with 1 to :data:`RUIN_MOST` of each row's moves set to zero."""
    k, d = best.shape
    moved = best != 0
    keys = torch.rand(k, d, generator=generator, dtype=best.dtype).to(best.device)
    keys = torch.where(moved, keys, torch.full_like(keys, 2.0))  # unmoved ones last
    count = torch.randint(1, RUIN_MOST + 1, (k,), generator=generator).to(best.device)
    count = torch.minimum(count, moved.sum(1))
    rank = keys.argsort(dim=1).argsort(dim=1)
    return torch.where(rank < count.unsqueeze(1), torch.zeros_like(best), best)
