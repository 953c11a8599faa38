"""Robust accuracy on a strength grid, by per-input bisection over the grid levels.

For each input and threat, :func:`grid_robustness` finds the smallest grid level at which the
attack breaks the input (its radius for that threat, on the grid). Under the assumption that
a counterexample at level ``k`` is also found at every level above ``k`` (threat sets are
nested), the answer is found by binary search over the ``K`` indices: ``ceil(log2(K + 1))``
attack runs per input (5 for the benchmark's 20 levels) instead of ``K``. Inputs at the same
bisection step are attacked together, each with its own strength. A counterexample whose
measured strength lies below the level it was found at also settles every level down to its
own, which often saves further runs.

Every counterexample is re-verified by calling the model again (the statement must hold for
the model's own prediction) and its perturbation is checked to lie within the level's bound
(``threat.within``); unverified candidates count as failures.

The accuracy curve ``acc(eps_k)`` is the share of inputs *not* broken at level ``k``;
misclassified clean inputs count as broken at every level. :meth:`GridResult.to_benchmark`
gives it in MultiRobustBench's accuracy-file format (percent, keys ``str(float(round(eps,
5)))``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from robustscope.core.checks import check_seed, make_generator
from robustscope.core.ecdf import share_above
from robustscope.core.errors import InputError
from robustscope.core.numerics import PROBA_FLOOR
from robustscope.core.result import ATTACKED, CENSORED, MISCLASSIFIED, RadiusResult
from robustscope.core.statement import DECISION_CHANGE, Statement
from robustscope.models.base import Classifier
from robustscope.search.batching import FALLBACK_BATCH, auto_batch_size
from robustscope.search.metering import charged
from robustscope.search.preamble import class_indices, default_space, open_ledger, wrap_inputs
from robustscope.search.state import registered
from robustscope.search.threads import AUTO, check_threads, limited_threads
from robustscope.search.verify import Verifier
from robustscope.solvers.problem import Budget, SolverProblem
from robustscope.threats.image import ImageThreat
from robustscope.threats.registry import (
    find_threat,
    get_image_threat,
    implemented_threat,
    threat_names,
)

#: ``level`` of an input misclassified without any perturbation.
CLEAN_WRONG = -1
#: The registry's solver over an image threat's parameters, looked up at each call.
IMAGE_PGD = registered("image-pgd")


@dataclass
class GridResult:
    """Per-input breaking levels of one threat on one grid.

    ``level[i]``: the smallest grid index at which a verified counterexample was found;
    ``-1`` when the clean input is already misclassified; ``K`` (= ``len(grid)``) when none
    was found (censored). ``x_adv[i]`` is the counterexample at that level (the input itself
    when censored or misclassified); ``strength[i]`` its measured strength (``nan`` when
    censored, 0 when misclassified). ``runs[i]``: attack runs spent on the input;
    ``forward_queries[i]`` / ``backward_queries[i]``: the model's passes charged to it;
    ``proba`` / ``proba_adv`` ``(n, K)``: the model's probabilities at the input and at the
    counterexample (the input where there is none), as the search saw them.
    """

    threat: str
    attack_name: str
    grid: np.ndarray
    level: np.ndarray
    label: np.ndarray
    x_adv: torch.Tensor
    strength: np.ndarray
    runs: np.ndarray
    method: str
    seconds: float
    forward_queries: np.ndarray
    backward_queries: np.ndarray
    proba: np.ndarray
    proba_adv: np.ndarray
    broken: np.ndarray | None = field(default=None, repr=False)

    @property
    def forward_passes(self) -> int:
        """Forward passes of the model over all inputs (the sum of ``forward_queries``)."""
        return int(self.forward_queries.sum())

    @property
    def backward_passes(self) -> int:
        """Backward passes over all inputs (the sum of ``backward_queries``)."""
        return int(self.backward_queries.sum())

    @property
    def n(self) -> int:
        return len(self.level)

    @property
    def clean_accuracy(self) -> float:
        """Share of inputs classified correctly without perturbation."""
        return float(np.mean(self.level != CLEAN_WRONG))

    @property
    def accuracy(self) -> np.ndarray:
        """Robust accuracy at each grid level, shape ``(K,)``, as a share in [0, 1]."""
        k = np.arange(len(self.grid))
        return share_above(self.level, k)

    @property
    def radius(self) -> np.ndarray:
        """Grid radius per input: ``grid[level]``; 0 if misclassified, ``inf`` if censored."""
        out = np.full(self.n, np.inf)
        ok = (self.level >= 0) & (self.level < len(self.grid))
        out[ok] = self.grid[self.level[ok]]
        out[self.level == CLEAN_WRONG] = 0.0
        return out

    @property
    def status(self) -> np.ndarray:
        out = np.full(self.n, ATTACKED, dtype=object)
        out[self.level == CLEAN_WRONG] = MISCLASSIFIED
        out[self.level >= len(self.grid)] = CENSORED
        return out

    @property
    def full_grid_runs(self) -> int:
        """Attack runs that attacking every level for every correctly classified input costs."""
        return int(len(self.grid) * np.sum(self.level != CLEAN_WRONG))

    @property
    def runs_saved(self) -> int:
        return self.full_grid_runs - int(self.runs.sum())

    def to_result(self, classes: np.ndarray | None = None, meta: dict | None = None
                  ) -> RadiusResult:
        """The per-input result every other path returns: the radius of an input is the
        smallest grid level at which a verified counterexample was found (``inf`` censored
        above the grid); queries are the passes charged to each input; ``seconds`` is the
        search's time shared out equally (``meta['seconds_are']``)."""
        n = self.n
        rows = np.arange(n)
        return RadiusResult(
            radius=self.radius, lower_bound=np.zeros(n), status=self.status.astype(object),
            x_adv=self.x_adv.detach().cpu().double().numpy(), label=self.label,
            prediction=self.proba.argmax(1), adv_prediction=self.proba_adv.argmax(1),
            proba=self.proba, proba_adv=self.proba_adv,
            loss=-np.log(np.maximum(self.proba[rows, self.label], PROBA_FLOOR)),
            forward_queries=self.forward_queries, backward_queries=self.backward_queries,
            seconds=np.full(n, self.seconds / max(n, 1)), threat=self.threat,
            solver=f"grid-{self.method}", max_radius=float(self.grid[-1]), classes=classes,
            meta={"grid": self.grid.tolist(), "attack_runs": self.runs.tolist(),
                  "attack_name": self.attack_name, "seconds_are": "batch average",
                  **(meta or {})})

    def to_benchmark(self) -> dict:
        """``{"NoAttack": acc, attack_name: {"<eps>": acc}}`` with accuracies in percent."""
        curve = {str(float(round(float(e), 5))): float(100 * a)
                 for e, a in zip(self.grid, self.accuracy, strict=True)}
        return {"NoAttack": 100 * self.clean_accuracy, self.attack_name: curve}

    def to_dataframe(self) -> pd.DataFrame:
        return pd.DataFrame({
            "sample": np.arange(self.n), "threat": self.threat, "label": self.label,
            "level": self.level, "radius": self.radius, "strength": self.strength,
            "status": self.status, "runs": self.runs,
        })


def benchmark_accuracies(results: Sequence[GridResult]) -> dict:
    """Merge several threats' results (same inputs) into one accuracy file dict."""
    if not results:
        raise InputError("results is empty")
    clean = {round(r.clean_accuracy, 12) for r in results}
    if len(clean) != 1:
        raise InputError("results disagree on clean accuracy: they were not computed on the "
                         "same inputs and model")
    out: dict = {"NoAttack": 100 * results[0].clean_accuracy}
    for r in results:
        out[r.attack_name] = r.to_benchmark()[r.attack_name]
    return out


def _check_grid(grid) -> np.ndarray:
    g = np.asarray(grid, dtype=np.float64).reshape(-1)
    if g.size == 0:
        raise InputError("grid is empty")
    if not np.all(np.isfinite(g)) or np.any(g <= 0):
        raise InputError("grid strengths must be finite and > 0")
    if np.any(np.diff(g) <= 0):
        raise InputError("grid must be strictly increasing")
    return g


class _Attacker:
    """Runs the solver on a subset of inputs at per-input strengths; every candidate is
    verified by the search's one verification (:class:`~robustscope.search.verify.Verifier`:
    the model called again, charged, the threat's strength measured)."""

    def __init__(self, clf, x, y, threat, statement, steps, restarts, batch_size, seed,
                 verifier: Verifier):
        self.clf, self.x, self.y, self.threat = clf, x, y, threat
        self.statement, self.steps, self.restarts = statement, steps, restarts
        self.batch_size, self.seed, self.calls = batch_size, seed, 0
        self.verifier = verifier

    def __call__(self, idx: torch.Tensor, eps: torch.Tensor, init: torch.Tensor | None = None):
        """Attack inputs ``idx`` at strengths ``eps`` (optionally starting from parameters
        ``init``); returns (verified within ``eps`` (m,), x_adv, strength (m,), params,
        logits at x_adv (m, K))."""
        oks, advs, strengths, params, logits = [], [], [], [], []
        for start in range(0, len(idx), self.batch_size):
            sub = idx[start:start + self.batch_size]
            e = eps[start:start + self.batch_size]
            gen = make_generator(self.seed + self.calls, self.x.device)
            self.calls += 1
            xs = self.x[sub]
            start_at = None if init is None else init[start:start + self.batch_size]
            owners = sub.cpu().numpy()
            problem = SolverProblem(charged(self.clf, self.verifier.ledger, owners), xs,
                                    self.y[sub], self.verifier.space, self.threat,
                                    self.statement, e, Budget(self.verifier.ledger, owners), gen)
            res = IMAGE_PGD(problem, steps=self.steps, restarts=self.restarts, init=start_at)
            found = res.meta["params"]
            classes, adv_logits, strength = self.verifier.verify(sub, res.x_adv, params=found)
            with torch.no_grad():
                ok = (classes >= 0) & self.threat.within(xs, found, e, res.x_adv)
            oks.append(ok)
            advs.append(res.x_adv)
            strengths.append(strength.to(xs.dtype))
            params.append(found)
            logits.append(adv_logits)
        return (torch.cat(oks), torch.cat(advs), torch.cat(strengths), torch.cat(params),
                torch.cat(logits))


def grid_robustness(
    model: Classifier | torch.nn.Module,
    X: torch.Tensor,
    y,
    threat: str | ImageThreat,
    grid: Sequence[float] | np.ndarray | None = None,
    *,
    method: str = "bisection",
    statement: Statement | None = None,
    steps: int = 20,
    restarts: int = 1,
    batch_size: int | str = 256,
    seed: int = 0,
    device: str | torch.device = "cpu",
    n_classes: int | None = None,
    warm_start: bool = True,
    threads: str | int | None = AUTO,
    **threat_options,
) -> GridResult:
    """Breaking level per input, and robust accuracy on ``grid``, for an image threat.

    Parameters
    ----------
    model : a :class:`Classifier` or a ``torch.nn.Module`` returning logits (wrapped on
        ``device``).
    X : (n, C, H, W) images in [0, 1]. y : (n,) labels (values of the model's
        ``classes_`` where it has them, else class indices).
    threat : a name (``linf``, ``elastic``, ``jpeg-l1``, ``ElasticAttack``, ...) or an
        :class:`ImageThreat`; ``threat_options`` go to its constructor (``features=`` for
        LPIPS).
    grid : increasing strengths; default the threat's 20-level benchmark grid.
    method : ``"bisection"`` (about log2(K) + 1 runs per input) or ``"full"`` (every level;
        also fills ``GridResult.broken``, the (n, K) matrix of verified successes).
    batch_size : inputs attacked together, or ``"auto"``: from the device's free memory and
        the network's activations measured on two inputs
        (:func:`robustscope.search.batching.auto_batch_size`; results may then differ in the
        last digits between machines).
    steps, restarts : solver settings (see
    :func:`robustscope.solvers.attacks.gradient.image_pgd.image_pgd`).
    warm_start : in bisection, start the attack at a smaller level from the input's latest
        counterexample projected onto that level (it keeps the search closer to monotone).
    threads : thread use, as for :func:`robustscope.radius`: ``"auto"`` (one thread for
        batches under 2^18 elements, the caller's settings above), an int, or ``None`` (leave
        every setting alone); the caller's settings are restored on return.
    """
    t0 = time.perf_counter()
    threads = check_threads(threads)
    if batch_size != "auto" and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                 or batch_size < 1):
        raise InputError(f"batch_size must be an integer >= 1 or 'auto', got {batch_size!r}")
    planned = FALLBACK_BATCH if batch_size == "auto" else batch_size
    work = min(len(X), planned) * int(np.prod(np.shape(X)[1:]))
    with limited_threads(threads, work):
        return _grid_robustness(model, X, y, threat, grid, method, statement, steps,
                                restarts, batch_size, seed, device, n_classes, warm_start,
                                threat_options, t0)


def _grid_robustness(model, X, y, threat, grid, method, statement, steps, restarts,
                     batch_size, seed, device, n_classes, warm_start, threat_options,
                     t0) -> GridResult:
    threat = get_image_threat(threat, **threat_options)
    if grid is None and len(threat.default_grid) == 0:
        raise InputError(f"threat '{threat.name}' has no default grid; pass grid=")
    g = _check_grid(threat.default_grid if grid is None else grid)
    seed = check_seed(seed)
    if method not in ("bisection", "full"):
        raise InputError(f"method must be 'bisection' or 'full', got {method!r}")
    statement = DECISION_CHANGE if statement is None else statement
    if not torch.is_tensor(X):
        X = torch.as_tensor(np.asarray(X))
    threat.check_input(X, "X")
    clf = wrap_inputs(model, X, device, n_classes=n_classes, example=X[:2])
    x = X.to(device=clf.device, dtype=clf.dtype)
    yt = torch.as_tensor(class_indices(clf, y, x.shape[0]), device=clf.device)
    n, k_levels = x.shape[0], len(g)
    ledger = open_ledger(clf, n)
    grid_t = torch.as_tensor(g, dtype=x.dtype, device=x.device)

    with torch.no_grad():
        clean_logits = charged(clf, ledger).logits(x).detach().to(torch.float64)
    if batch_size == "auto":  # one forward and backward on two rows, charged to them
        rows = torch.arange(min(2, n), device=x.device)
        batch_size = auto_batch_size(
            charged(clf, ledger, rows.cpu().numpy()), x[rows],
            lambda z: statement.margin(z, yt[rows]), int(np.prod(threat.param_shape(x[:1]))))
    clean_wrong = statement.holds(clean_logits.argmax(dim=1), yt)
    adv_logits = clean_logits.clone()
    level = torch.full((n,), k_levels, dtype=torch.long, device=x.device)
    level[clean_wrong] = CLEAN_WRONG
    x_adv = x.clone()
    strength = torch.full((n,), float("nan"), dtype=x.dtype, device=x.device)
    strength[clean_wrong] = 0.0
    runs = torch.zeros(n, dtype=torch.long, device=x.device)
    verifier = Verifier(clf, default_space(x), threat, statement, ledger, x, yt, np.arange(n),
                        clean_logits, clean_wrong)
    attack = _Attacker(clf, x, yt, threat, statement, steps, restarts, batch_size, seed,
                       verifier)
    broken = None

    if method == "full":
        broken = torch.zeros((n, k_levels), dtype=torch.bool, device=x.device)
        todo = torch.nonzero(~clean_wrong).flatten()
        for k in range(k_levels):
            ok, adv, s, _, lg = attack(todo, grid_t[k].expand(len(todo)))
            runs[todo] += 1
            broken[todo, k] = ok
            first = todo[ok & (level[todo] == k_levels)]
            sel = ok & (level[todo] == k_levels)
            level[first] = k
            x_adv[first] = adv[sel]
            strength[first] = s[sel]
            adv_logits[first] = lg[sel]
    else:
        lo = torch.zeros(n, dtype=torch.long, device=x.device)
        hi = torch.full((n,), k_levels, dtype=torch.long, device=x.device)
        lo[clean_wrong] = hi[clean_wrong] = 0
        # parameters of each input's latest counterexample: projected onto a smaller level,
        # they start the next attack there (zeros = the identity until one is found)
        cx_params = threat.zero_params(x)
        while True:
            todo = torch.nonzero(lo < hi).flatten()
            if len(todo) == 0:
                break
            mid = (lo[todo] + hi[todo]) // 2
            ok, adv, s, par, lg = attack(todo, grid_t[mid],
                                         cx_params[todo] if warm_start else None)
            runs[todo] += 1
            # a counterexample of strength s settles every level whose strength is >= s
            settled = torch.searchsorted(grid_t, s * (1 - 1e-6))
            new_hi = torch.minimum(mid, settled)
            rows = todo[ok]
            hi[rows] = new_hi[ok]
            lo[rows] = torch.minimum(lo[rows], new_hi[ok])
            x_adv[rows] = adv[ok]
            strength[rows] = s[ok]
            adv_logits[rows] = lg[ok]
            cx_params[rows] = par[ok]
            fail = todo[~ok]
            lo[fail] = mid[~ok] + 1
        found = ~clean_wrong & (hi < k_levels)
        level[found] = hi[found]

    return GridResult(
        threat=threat.name, attack_name=threat.attack_name, grid=g,
        level=level.cpu().numpy(), label=yt.cpu().numpy(), x_adv=x_adv,
        strength=strength.detach().cpu().double().numpy(), runs=runs.cpu().numpy(),
        method=method, seconds=time.perf_counter() - t0,
        forward_queries=ledger.forward.copy(), backward_queries=ledger.backward.copy(),
        proba=torch.softmax(clean_logits, dim=1).cpu().numpy(),
        proba_adv=torch.softmax(adv_logits, dim=1).cpu().numpy(),
        broken=None if broken is None else broken.cpu().numpy(),
    )


#: Every threat the grid search can run (the registry's implemented threats), in the order of
#: the benchmark's leaderboard (9 ranked), then the parametric ones outside the ranking.
BENCHMARK_THREATS: tuple[str, ...] = threat_names()


def evaluate_threats(
    model: Classifier | torch.nn.Module,
    X: torch.Tensor,
    y,
    threats: Sequence[str | ImageThreat] | None = None,
    grids: dict[str, Sequence[float]] | None = None,
    features=None,
    **options,
) -> tuple[list[GridResult], dict]:
    """Run :func:`grid_robustness` for several threats on the same inputs.

    ``threats`` default to :data:`BENCHMARK_THREATS` (those that take a feature network,
    LPIPS, only when ``features`` is given); ``features`` goes to every named threat that takes
    it. ``grids`` maps a threat (any spelling) to its grid (default grids otherwise);
    ``options`` go to :func:`grid_robustness`. Returns the results and the merged
    accuracy-file dict.
    """
    if threats is None:
        threats = [t for t in BENCHMARK_THREATS
                   if features is not None or not implemented_threat(t).takes("features")]
    entries = [None if isinstance(t, ImageThreat) else implemented_threat(t) for t in threats]
    grids = {_grid_key(k): v for k, v in (grids or {}).items()}
    results = []
    for t, entry in zip(threats, entries, strict=True):
        opts = dict(options)
        if entry is not None and entry.takes("features"):
            opts["features"] = features
        key = t.name if entry is None else entry.name
        results.append(grid_robustness(model, X, y, t, grids.get(key), **opts))
    return results, benchmark_accuracies(results)


def _grid_key(name: str) -> str:
    """Key of ``grids``: the canonical name of a registered threat, else the name as given
    (a threat instance defined outside the registry)."""
    entry = find_threat(name)
    return name if entry is None else entry.name


def write_benchmark_json(results: Sequence[GridResult], path) -> dict:
    """Write the merged accuracy file (MultiRobustBench format) to ``path``; returns it."""
    import json

    from robustscope.core.fileio import atomic_write

    out = benchmark_accuracies(results)
    text = json.dumps(out, indent=1)
    atomic_write(path, lambda tmp: tmp.write_text(text))
    return out
