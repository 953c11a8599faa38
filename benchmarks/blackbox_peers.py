"""Black-box peers for ``blackbox_budget.py``, all measured one way: per input, the smallest
counterexample among the first ``B`` rows the attack showed the model.

Each peer attacks one input at a time through a :class:`Tracker`, which calls the model on the
rows the attack asks about, counts them, and keeps, for every row that changes the decision,
its norm in range-scaled units (the threat's). After ``budget`` rows it raises
:class:`Spent`, which ends the attack; rows of a batch past the budget are not counted as
seen. The best radius within ``B`` rows, for every ``B`` up to the budget, comes from one run
(:meth:`Tracker.best_within`): the peers below do not plan on a budget, so a run cut at ``B``
would have asked the same first ``B`` rows.

Peers (each attack works on ``z = (x - lower) / scale`` in ``[0, 1]^d``, where the threat's
norm of ``z - z0`` is the range-scaled radius):

* ``hsj`` - ART's HopSkipJump (decisions only), untargeted, Linf or L2;
* ``sign-opt`` - ART's Sign-OPT (decisions only; it minimises the L2 distance, and is measured
  in the benchmark's threat);
* ``rays`` - a RayS-style Linf search (Chen & Gu, 2020), written here: sign directions, the
  radius along each ray by bisection on decisions, block sign flips of halving size kept when
  the flipped ray already changes the decision at the best radius.
"""

from __future__ import annotations

import math

import numpy as np


class Spent(Exception):
    """The attack asked for more rows than its budget."""


class Tracker:
    """The model as one attack on one input sees it, in ``z`` units.

    ``proba(x) -> (m, k)`` probabilities on original units; ``lower``, ``scale`` ``(d,)`` map
    ``z`` to ``x = lower + z * scale``; ``z0`` the input, ``label`` its decision; ``p`` the
    threat's norm order (``inf``, 2, 1).
    """

    def __init__(self, proba, lower, scale, z0, label, p, budget) -> None:
        self.proba, self.lower, self.scale = proba, lower, scale
        self.z0, self.label, self.p, self.budget = z0, label, p, budget
        self.rows = 0
        self.hits: list[tuple[int, float]] = []  # (row number, norm) of counterexamples

    def __call__(self, z: np.ndarray) -> np.ndarray:
        z = np.asarray(z, dtype=np.float64).reshape(-1, len(self.z0))
        take = min(len(z), self.budget - self.rows)
        if take <= 0:
            raise Spent
        out = np.asarray(self.proba(self.lower + z * self.scale), dtype=np.float64)
        flipped = out.argmax(1) != self.label
        for i in np.flatnonzero(flipped[:take]):
            self.hits.append((self.rows + i + 1, float(np.linalg.norm(z[i] - self.z0, self.p))))
        self.rows += len(z)
        if take < len(z):
            raise Spent
        return out

    def best_within(self, budgets) -> np.ndarray:
        """Smallest counterexample norm among the first ``B`` rows, for each ``B``."""
        out = np.full(len(budgets), np.inf)
        for row, norm in self.hits:
            for j, b in enumerate(budgets):
                if row <= b:
                    out[j] = min(out[j], norm)
        return out


def _art_classifier(predict, d: int, k: int):
    from art.estimators.classification import BlackBoxClassifier

    return BlackBoxClassifier(predict, input_shape=(d,), nb_classes=k, clip_values=(0.0, 1.0))


def run_hsj(tracker: Tracker, d: int, k: int, seed: int) -> None:
    from art.attacks.evasion import HopSkipJump

    np.random.seed(seed)  # noqa: NPY002 - ART draws from numpy's global generator
    attack = HopSkipJump(_art_classifier(tracker, d, k), targeted=False,
                         norm=np.inf if tracker.p == math.inf else 2, max_iter=100,
                         max_eval=200, init_eval=20, init_size=100, verbose=False)
    attack.generate(tracker.z0[None].astype(np.float32))


def run_sign_opt(tracker: Tracker, d: int, k: int, seed: int) -> None:
    from art.attacks.evasion import SignOPTAttack

    np.random.seed(seed)  # noqa: NPY002 - ART draws from numpy's global generator
    model = tracker
    if k == 2:  # ART's Sign-OPT refuses two classes: a third, never-chosen class is added
        def model(z):
            p = tracker(z)
            return np.concatenate([p, np.zeros((len(p), 1))], axis=1)
        k = 3
    attack = SignOPTAttack(_art_classifier(model, d, k), targeted=False, num_trial=20,
                           max_iter=1000, query_limit=10**9, k=20, verbose=False,
                           eval_perform=False)
    attack.generate(tracker.z0[None].astype(np.float32))


def run_rays(tracker: Tracker, d: int, k: int, seed: int, rtol: float = 1e-3) -> None:
    """RayS-style Linf search in ``[0, 1]^d``: the ray ``clip(z0 + t * s)`` for a sign vector
    ``s``; the best radius ``t*`` so far; a block of ``s`` flipped is kept when its ray
    already changes the decision at ``t*`` (one row), then its radius is bisected."""
    rng = np.random.default_rng(seed)
    z0 = tracker.z0

    def point(s, t):
        return np.clip(z0 + t * s, 0.0, 1.0)

    def adversarial(s, t) -> bool:
        return bool(tracker(point(s, t)[None]).argmax(1)[0] != tracker.label)

    def bisect(s, hi, lo=0.0):
        while hi - lo > rtol * hi:
            mid = (lo + hi) / 2
            if adversarial(s, mid):
                hi = mid
            else:
                lo = mid
        return hi

    s = rng.choice([-1.0, 1.0], size=d)
    best = math.inf
    for t in (1.0,):  # the whole box along the first ray, then random rays until one breaks
        if adversarial(s, t):
            best = bisect(s, t)
    while not math.isfinite(best):
        s = rng.choice([-1.0, 1.0], size=d)
        if adversarial(s, 1.0):
            best = bisect(s, 1.0)
    block = d
    while True:
        for start in range(0, d, block):
            trial = s.copy()
            trial[start:start + block] *= -1
            if adversarial(trial, best):
                s, best = trial, bisect(trial, best)
        block = max(1, block // 2)


PEERS = {"hsj": run_hsj, "sign-opt": run_sign_opt, "rays": run_rays}


def peer_radii(name: str, proba, lower, scale, X, labels, p, budgets, k, seed=0):
    """``(n, len(budgets))`` best radius per input within each budget (``inf``: none)."""
    d = X.shape[1]
    out = np.full((len(X), len(budgets)), np.inf)
    for i in range(len(X)):
        z0 = (X[i] - lower) / scale
        tracker = Tracker(proba, lower, scale, z0, labels[i], p, max(budgets))
        try:
            PEERS[name](tracker, d, k, seed + i)
        except Spent:
            pass
        out[i] = tracker.best_within(budgets)
    return out
