"""Competitiveness ratios of MultiRobustBench (Dai et al., ICML 2023, arXiv:2302.10980).

A *point* ``P`` is either the clean setting or one (attack, strength) pair. For a model ``f``
with accuracy ``acc(f, P)`` (percent) and a reference accuracy ``acc*(P)`` (the best accuracy
known to be reachable at ``P``; by default the benchmark's published table of individually
adversarially trained models on CIFAR-10), the *competitiveness ratio* at ``P`` is::

    r(f, P) = acc(f, P) / acc*(P)

The point set is ``𝒫 = {clean} ∪ {(t, ε) : t in the chosen attacks, ε in acc*'s grid for t}``
(181 points for the 9 ranked attacks with 20 strengths each). The metrics, all in percent:

* ``CR_ind-avg   = 100 · mean_{P∈𝒫} r(f, P)``
* ``CR_ind-worst = 100 · min_{P∈𝒫} r(f, P)``, with the arg-min point reported;
* single-CR of attack ``t``: the same mean / min over ``{clean} ∪ {(t, ε_k)}`` (21 points);
* with the attacks the model was trained on (attack -> training strength), the *seen* set
  ``S(f) = {clean} ∪ {(t, ε) : t trained on, ε ≤ its training strength}``;
  ``CR_in`` / ``CR_out`` = mean (or min) of ``100 · r`` over ``S ∩ 𝒫`` / ``𝒫 \\ S``, and
  ``pct_seen = 100 · |S ∩ 𝒫| / |𝒫|``;
* the stability constant (lower is better)::

      SC = max over P1 ∈ S, P2 ∈ 𝒫, P2 ≠ P1, 0 < |acc*(P1) - acc*(P2)| < 3 of
           |acc(f, P1) - acc(f, P2)| / |acc*(P1) - acc*(P2)|

  i.e. how much faster than the reference the model's accuracy changes between points of
  nearly equal reference difficulty, anchored at the points it was trained for.

A model that lacks some points either raises an error naming them (default) or, with
``missing="skip"``, is scored over the points it has (as the published leaderboard does);
``pct_seen`` still counts the full ``𝒫``.

A point where ``acc*(P) = 0`` (no reference model resists there: the usual case at the top
strengths when acc* is the best of a few stored models) cannot discriminate and has no
ratio. The published table has no such point, so the benchmark does not say how to treat
one; here it is *excluded* from every metric (ratios and SC), and the report lists the
excluded points (``PointTable.excluded``, ``excluded`` in :meth:`CRReport.to_dict`).
``pct_seen`` counts the full ``𝒫``, as for missing points.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np

from robustscope.core.errors import InputError
from robustscope.core.result import RadiusResult
from robustscope.scores.accuracy_grid import (
    AccuracyGrid,
    check_training_strength,
    read_accuracy_file,
)
from robustscope.threats.grids import CLEAN, canonical_eps, eps_key
from robustscope.threats.registry import RANKED_ATTACKS, benchmark_name, default_grid

#: Half-open window (percentage points of acc*) of point pairs compared by the stability
#: constant: pairs with ``0 < |acc*(P1) - acc*(P2)| < SC_WINDOW``.
SC_WINDOW = 3.0

_PUBLISHED = "acc_star_cifar10.json"  # in robustscope/refdata/


# -- reference accuracies ------------------------------------------------------------------
@lru_cache(maxsize=1)
def _published_doc() -> str:
    return resources.files("robustscope").joinpath("refdata", _PUBLISHED).read_text()


def published_reference() -> AccuracyGrid:
    """acc*(P) of the MultiRobustBench leaderboard (CIFAR-10, percent): the accuracy of
    individual adversarial training per attack and strength, as published by Dai et al.,
    "MultiRobustBench: Benchmarking Robustness Against Multiple Attacks", ICML 2023. Shipped
    as package data ``robustscope/refdata/acc_star_cifar10.json``; a fresh copy on each call."""
    return AccuracyGrid.from_dict(json.loads(_published_doc()), "published acc* table")


#: The dataset of :func:`published_reference`: CIFAR-10's 3×32×32 test images.
PUBLISHED_DATASET = {"dataset": "CIFAR-10", "input_shape": [3, 32, 32]}


def _dataset_key(name: object) -> str:
    return "".join(ch for ch in str(name).lower() if ch.isalnum())


def dataset_mismatch(model: str, details: Mapping, reference: Mapping,
                     reference_name: str) -> tuple[str, str] | None:
    """Whether ``model`` (its accuracy file's ``details``) was evaluated on another dataset
    than ``reference`` (its ``dataset`` and ``input_shape``, as far as known): ``None``, or
    ``("error", message)`` when the images' shapes differ (the ratios to that acc* mean
    nothing), ``("warning", message)`` when only the dataset names differ."""
    shape, ref_shape = details.get("input_shape"), reference.get("input_shape")
    name, ref_name = details.get("dataset"), reference.get("dataset")

    def describe(s, n):
        return " ".join(filter(None, [str(n) if n else None,
                                      f"({'×'.join(map(str, s))} images)" if s else None]))

    said = (f"model '{model}' was evaluated on {describe(shape, name)}, but the reference "
            f"acc* ({reference_name}) is of {describe(ref_shape, ref_name)}")
    if shape and ref_shape and list(shape) != list(ref_shape):
        return "error", (said + ": its ratios would mean nothing; give --reference best or "
                         "a reference of that dataset")
    if name and ref_name and _dataset_key(name) not in _dataset_key(ref_name) \
            and _dataset_key(ref_name) not in _dataset_key(name):
        return "warning", said + " (check that they are the same data)"
    return None


def load_reference(path: str | Path) -> AccuracyGrid:
    """acc*(P) from a single-model accuracy JSON file given by the user."""
    models = read_accuracy_file(path)
    if len(models) != 1:
        raise InputError(f"reference file {path}: must hold one accuracy grid, "
                         f"found {len(models)} models")
    return models[0].grid


def best_reference(grids: Iterable[AccuracyGrid]) -> AccuracyGrid:
    """acc*(P) as the best accuracy any of ``grids`` reaches at each point (max per point);
    a point is present when at least one grid has it."""
    grids = list(grids)
    if not grids:
        raise InputError("best reference: no accuracy grids to take the maximum over")
    clean = max(g.clean for g in grids)
    attacks: dict[str, dict[float, float]] = {}
    for g in grids:
        for attack, curve in g.attacks.items():
            best = attacks.setdefault(attack, {})
            for eps, acc in curve.items():
                best[eps] = max(acc, best.get(eps, -math.inf))
    return AccuracyGrid(clean, {a: dict(sorted(c.items())) for a, c in attacks.items()})


def resolve_reference(reference: AccuracyGrid | str | Path | None) -> AccuracyGrid:
    """``None`` or ``"published"``: the published table; a path: that file; a grid: itself."""
    if reference is None or (isinstance(reference, str) and reference == "published"):
        return published_reference()
    if isinstance(reference, AccuracyGrid):
        return reference
    if isinstance(reference, (str, Path)):
        return load_reference(reference)
    raise InputError(f"reference: expected None, 'published', a file path or an AccuracyGrid, "
                     f"got {type(reference).__name__}")


#: Words of ``attacks`` that name groups of points (see :func:`resolve_attacks`).
ATTACK_GROUPS: tuple[str, ...] = ("ranked", "unforeseen", "corruptions")


def attack_group(word: str) -> tuple[str, ...] | None:
    """The benchmark names a group word stands for, or ``None`` if ``word`` is no group:
    ``ranked`` (the leaderboard's 9), ``corruptions`` (the 19 of CIFAR-10-C, severities as
    strengths), ``unforeseen`` (every attack type outside the 9 ranked ones — the other 9
    parametric attacks, snow, fog and Gabor among them — and the 19 corruptions)."""
    from robustscope.threats.corruptions import CORRUPTIONS
    from robustscope.threats.registry import THREATS

    key = word.strip().lower() if isinstance(word, str) else None
    if key == "ranked":
        return RANKED_ATTACKS
    if key == "corruptions":
        return tuple(CORRUPTIONS)
    if key == "unforeseen":
        return tuple(e.attack_name for e in THREATS if not e.ranked and e.attack_name) + \
            tuple(CORRUPTIONS)
    return None


class AttackNames(tuple):
    """Benchmark names as :func:`resolve_attacks` returns them. Resolving them again returns
    them unchanged: the corruptions ``snow``, ``fog``, ``brightness`` and ``contrast`` share
    their names with short names of threats (``"fog"`` -> ``"FogAttack"``), so a second
    resolution would turn the corruptions of a group into those attacks."""

    __slots__ = ()


def resolve_attacks(attacks: Sequence[str] | None) -> tuple[str, ...]:
    """Benchmark names of the chosen attacks (short names accepted, and the group words of
    :func:`attack_group`); default: the 9 ranked. Returns an :class:`AttackNames`, which
    passes through a second call unchanged (the corruptions of a group stay corruptions)."""
    if attacks is None:
        return RANKED_ATTACKS
    if isinstance(attacks, AttackNames):
        return attacks
    if isinstance(attacks, str):
        attacks = [attacks]
    names: list[str] = []
    for a in attacks:
        group = attack_group(a)
        names += list(group) if group is not None else [benchmark_name(a)]
    out = AttackNames(dict.fromkeys(names))
    if not out:
        raise InputError("attacks: choose at least one attack")
    return out


# -- the point table -----------------------------------------------------------------------
@dataclass
class PointTable:
    """All points of ``𝒫`` a model has, aligned with the reference.

    Arrays have one entry per point, clean first, then attacks in the chosen order with
    strengths increasing: ``attack`` (``"NoAttack"`` for clean), ``eps`` (0 for clean),
    ``acc`` and ``acc_star`` (percent), ``seen`` (bool; all False but clean when the
    training attacks are unknown). ``n_points`` / ``n_seen`` count the full ``𝒫`` and
    ``S ∩ 𝒫`` including points the model lacks (listed in ``missing``) and points where
    acc* is 0 (listed in ``excluded``: they have no ratio and enter no metric).
    """

    attack: np.ndarray
    eps: np.ndarray
    acc: np.ndarray
    acc_star: np.ndarray
    seen: np.ndarray
    n_points: int
    n_seen: int
    attacks: tuple[str, ...]
    missing: list[tuple[str, float]] = field(default_factory=list)
    excluded: list[tuple[str, float]] = field(default_factory=list)

    @property
    def ratio(self) -> np.ndarray:
        """``100 · acc / acc*`` per point."""
        return 100.0 * self.acc / self.acc_star

    def label(self, i: int) -> str:
        """``"Attack@eps"`` (benchmark key) of point ``i``; ``"NoAttack"`` for clean."""
        if self.attack[i] == CLEAN:
            return CLEAN
        return f"{self.attack[i]}@{eps_key(self.eps[i])}"


def _is_seen(attack: str, eps: float, trained_on: Mapping[str, float] | None) -> bool:
    if attack == CLEAN:
        return True
    if not trained_on or attack not in trained_on:
        return False
    # Strengths are compared after the benchmark's 5-decimal rounding of grid points; the
    # tolerance only absorbs float noise (8/255 vs 0.03 is far from it).
    return eps <= trained_on[attack] + 1e-12


def _training_strengths(trained_on: Mapping[str, float] | None) -> dict[str, float] | None:
    if not trained_on:
        return None
    if not isinstance(trained_on, Mapping):
        raise InputError(f"trained_on: expected a mapping attack -> training strength, got "
                         f"{type(trained_on).__name__}")
    return {benchmark_name(attack): check_training_strength(
                eps, f"trained_on: training strength of '{attack}'")
            for attack, eps in trained_on.items()}


def point_table(grid: AccuracyGrid, reference: AccuracyGrid | str | Path | None = None,
                attacks: Sequence[str] | None = None,
                trained_on: Mapping[str, float] | None = None,
                missing: str = "error", model: str = "model") -> PointTable:
    """Align ``grid`` with the reference over ``𝒫`` (the reference's strengths of each chosen
    attack). ``trained_on`` maps attacks (either name) to training strengths.
    ``missing="error"`` raises :class:`InputError` naming the points the model lacks;
    ``"skip"`` scores the model on the points it has. ``model`` names the model in errors."""
    if missing not in ("error", "skip"):
        raise InputError(f"missing: expected 'error' or 'skip', got {missing!r}")
    ref = resolve_reference(reference)
    chosen = resolve_attacks(attacks)
    trained = _training_strengths(trained_on)
    if ref.clean <= 0:
        raise InputError("reference: clean acc* must be > 0")
    rows = [(CLEAN, 0.0, grid.clean, ref.clean)]
    absent: list[tuple[str, float]] = []
    excluded: list[tuple[str, float]] = []
    n_points, n_seen = 1, 1
    for attack in chosen:
        if attack not in ref.attacks or not ref.attacks[attack]:
            raise InputError(f"reference: no acc* values for attack '{attack}'; it has "
                             f"{', '.join(sorted(ref.attacks)) or 'none'}")
        for eps, star in sorted(ref.attacks[attack].items()):
            if star < 0 or not math.isfinite(star):
                raise InputError(f"reference: acc* of {attack} at strength "
                                 f"{eps_key(eps)} is {star}; accuracies lie in [0, 100]")
            n_points += 1
            n_seen += _is_seen(attack, eps, trained)
            acc = grid.get(attack, eps)
            if star == 0:  # no ratio: the point cannot discriminate (see the module doc)
                excluded.append((attack, eps))
            elif acc is None:
                absent.append((attack, eps))
            else:
                rows.append((attack, eps, acc, star))
    if absent and missing == "error":
        raise InputError(f"model '{model}': no accuracy for {_describe_missing(absent, ref)}; "
                         "give every point or pass missing='skip' (--allow-missing) to score "
                         "the points given")
    att, eps, acc, star = zip(*rows, strict=True)
    seen = np.array([_is_seen(a, e, trained) for a, e in zip(att, eps, strict=True)])
    return PointTable(np.array(att, dtype=object), np.array(eps, dtype=np.float64),
                      np.array(acc, dtype=np.float64), np.array(star, dtype=np.float64),
                      seen, n_points, n_seen, chosen, absent, excluded)


def _describe_missing(absent: list[tuple[str, float]], ref: AccuracyGrid) -> str:
    """``"AutoL2Attack (all 20 strengths), ElasticAttack at strength 0.05, 0.1"``."""
    by_attack: dict[str, list[float]] = {}
    for attack, eps in absent:
        by_attack.setdefault(attack, []).append(eps)
    parts = []
    for attack, eps in by_attack.items():
        if len(eps) == len(ref.attacks[attack]):
            parts.append(f"{attack} (all {len(eps)} strengths)")
        else:
            keys = ", ".join(eps_key(e) for e in eps[:6]) + (", ..." if len(eps) > 6 else "")
            parts.append(f"{attack} at strength{'s' if len(eps) > 1 else ''} {keys}")
    return "; ".join(parts)


# -- metrics over a point table ------------------------------------------------------------
def cr_ind_avg(table: PointTable) -> float:
    """``CR_ind-avg = 100 · mean over 𝒫 of acc(f,P)/acc*(P)`` (percent)."""
    return float(table.ratio.mean())


def cr_ind_worst(table: PointTable) -> tuple[float, str]:
    """``CR_ind-worst = 100 · min over 𝒫 of acc(f,P)/acc*(P)`` and its arg-min point
    (``"Attack@eps"``; the first in table order on ties)."""
    r = table.ratio
    i = int(np.argmin(r))
    return float(r[i]), table.label(i)


def single_cr(table: PointTable, attack: str) -> tuple[float, float]:
    """(avg, worst) of ``100 · r`` over ``{clean} ∪ {(attack, ε_k)}``. An attack the model
    lacks entirely (``missing="skip"``) is scored on the clean point alone. A name the table
    scores is taken as it is (the corruption ``"fog"``), any other spelling is resolved
    (``"linf"``)."""
    attack = attack if attack in table.attacks else benchmark_name(attack)
    if attack not in table.attacks:
        raise InputError(f"attack '{attack}' is not among the scored attacks "
                         f"{', '.join(table.attacks)}")
    mask = (table.attack == CLEAN) | (table.attack == attack)
    r = table.ratio[mask]
    return float(r.mean()), float(r.min())


def seen_unseen(table: PointTable) -> dict[str, float]:
    """``CR_in_avg``, ``CR_in_worst`` (over ``S ∩ 𝒫``), ``CR_out_avg``, ``CR_out_worst``
    (over ``𝒫 \\ S``; NaN when every point is seen) and ``pct_seen = 100·|S∩𝒫|/|𝒫|``."""
    r = table.ratio
    inside, outside = r[table.seen], r[~table.seen]
    nan = float("nan")
    return {
        "CR_in_avg": float(inside.mean()),
        "CR_in_worst": float(inside.min()),
        "CR_out_avg": float(outside.mean()) if outside.size else nan,
        "CR_out_worst": float(outside.min()) if outside.size else nan,
        "pct_seen": 100.0 * table.n_seen / table.n_points,
    }


def stability_constant(table: PointTable, window: float = SC_WINDOW) -> float:
    """``SC = max |acc(P1) - acc(P2)| / |acc*(P1) - acc*(P2)|`` over ``P1 ∈ S``, ``P2 ∈ 𝒫``
    with ``0 < |acc*(P1) - acc*(P2)| < window`` (percentage points; the pair's points differ
    since their acc* differ). NaN when no pair qualifies. Lower is better; a model equal to
    the reference has SC = 1."""
    s1, a1 = table.acc_star[table.seen], table.acc[table.seen]
    d_star = np.abs(s1[:, None] - table.acc_star[None, :])
    ok = (d_star > 0) & (d_star < window)
    if not ok.any():
        return float("nan")
    d_acc = np.abs(a1[:, None] - table.acc[None, :])
    return float((d_acc[ok] / d_star[ok]).max())


# -- one report per model ------------------------------------------------------------------
@dataclass
class CRReport:
    """All competitiveness metrics of one model (percent, except ``SC``; NaN = undefined).

    ``single`` maps attack -> ``{"avg": ..., "worst": ...}``. The seen/unseen metrics and
    ``SC`` are ``None`` when the training attacks are unknown.
    """

    model: str
    clean: float
    cr_ind_avg: float
    cr_ind_worst: float
    worst_point: str
    single: dict[str, dict[str, float]]
    table: PointTable
    cr_in_avg: float | None = None
    cr_in_worst: float | None = None
    cr_out_avg: float | None = None
    cr_out_worst: float | None = None
    pct_seen: float | None = None
    sc: float | None = None

    def to_dict(self) -> dict:
        """JSON-ready: keys ``model, clean, CR_ind_avg, CR_ind_worst, worst_point, single``,
        ``missing`` and ``excluded`` (``"Attack@eps"`` lists: points the model lacks, points
        where acc* is 0), ``n_excluded`` and, when the training attacks are known,
        ``CR_in_avg, CR_in_worst, CR_out_avg, CR_out_worst, pct_seen, SC``. NaN -> None."""
        def num(x: float | None) -> float | None:
            return None if x is None or not math.isfinite(x) else float(x)

        out = {
            "model": self.model,
            "clean": num(self.clean),
            "CR_ind_avg": num(self.cr_ind_avg),
            "CR_ind_worst": num(self.cr_ind_worst),
            "worst_point": self.worst_point,
            "single": {a: {k: num(v) for k, v in s.items()} for a, s in self.single.items()},
            "missing": [f"{a}@{eps_key(e)}" for a, e in self.table.missing],
            "excluded": [f"{a}@{eps_key(e)}" for a, e in self.table.excluded],
            "n_excluded": len(self.table.excluded),
        }
        if self.pct_seen is not None:
            out.update({"CR_in_avg": num(self.cr_in_avg), "CR_in_worst": num(self.cr_in_worst),
                        "CR_out_avg": num(self.cr_out_avg),
                        "CR_out_worst": num(self.cr_out_worst),
                        "pct_seen": num(self.pct_seen), "SC": num(self.sc)})
        return out


def competitiveness(grid: AccuracyGrid, reference: AccuracyGrid | str | Path | None = None,
                    attacks: Sequence[str] | None = None,
                    trained_on: Mapping[str, float] | None = None,
                    missing: str = "error", model: str = "model") -> CRReport:
    """Every MultiRobustBench metric of one model (see the module docstring for formulas).

    ``grid``: the model's accuracies (percent). ``reference``: acc* (``None`` = published
    table, a path, or a grid, e.g. :func:`best_reference` of stored models). ``attacks``:
    subset of attacks (default: the 9 ranked). ``trained_on``: attack -> training strength
    (``details["Attacks Used"]``); when given (even empty: clean only is seen), the seen /
    unseen metrics and SC are computed.
    """
    table = point_table(grid, reference, attacks, trained_on, missing, model)
    worst, point = cr_ind_worst(table)
    single = {}
    for attack in table.attacks:
        avg, w = single_cr(table, attack)
        single[attack] = {"avg": avg, "worst": w}
    report = CRReport(model, grid.clean, cr_ind_avg(table), worst, point, single, table)
    if trained_on is not None:
        su = seen_unseen(table)
        report.cr_in_avg, report.cr_in_worst = su["CR_in_avg"], su["CR_in_worst"]
        report.cr_out_avg, report.cr_out_worst = su["CR_out_avg"], su["CR_out_worst"]
        report.pct_seen = su["pct_seen"]
        report.sc = stability_constant(table)
    return report


# -- accuracy grids from radii -------------------------------------------------------------
def grid_from_radii(results: Mapping[str, RadiusResult],
                    strengths: Mapping[str, Sequence[float]] | None = None) -> AccuracyGrid:
    """Accuracy grid (percent) from per-input radii, one :class:`RadiusResult` per attack
    (keyed by either name) over the *same* inputs. Accuracy at ``ε`` is the share of inputs
    with radius ``> ε`` (exact for the solver used, since threat sets are nested); clean is
    the share not misclassified. ``strengths`` overrides the default 20-level grid per attack.
    Strengths above a result's ``max_radius`` are undetermined and raise an error."""
    if not results:
        raise InputError("results: give at least one RadiusResult")
    clean_values = set()
    attacks: dict[str, dict[float, float]] = {}
    n = None
    for name, res in results.items():
        attack = benchmark_name(name)
        if n is None:
            n = len(res)
        elif len(res) != n:
            raise InputError(f"results['{name}']: {len(res)} inputs, but another result has "
                             f"{n}; all must score the same inputs")
        if len(res) == 0:
            raise InputError(f"results['{name}']: no inputs")
        clean_values.add(float(np.mean(res.status != "misclassified")))
        grid = (strengths or {}).get(name)
        if grid is None:
            grid = (strengths or {}).get(attack)
        eps = np.asarray(default_grid(attack) if grid is None else grid, dtype=np.float64)
        acc = res.robust_accuracy(eps)
        if np.isnan(acc).any():
            bad = eps[np.isnan(acc)][0]
            raise InputError(f"results['{name}']: strength {bad:g} exceeds the largest "
                             f"strength searched ({res.max_radius:g}); accuracy there is "
                             "unknown")
        attacks[attack] = {canonical_eps(e): 100.0 * float(a)
                           for e, a in zip(eps, acc, strict=True)}
    if len(clean_values) != 1:
        raise InputError("results: clean accuracy differs between results; they must score "
                         "the same inputs with the same model")
    return AccuracyGrid(100.0 * clean_values.pop(), attacks)
