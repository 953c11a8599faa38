"""Runners of robustscope and its peers, all with one signature:

``run(case, threat, X, y, cfg) -> Run`` with ``radius`` the radius each method *claims* per
input (``inf`` where it found nothing), ``x_adv`` its counterexamples, ``queries`` the model
passes it spent per input (forward rows + backward rows, counted on the model itself) and the
wall-clock seconds of the whole call. Nothing here decides success: run_all.py re-checks every
counterexample with the model's own ``predict`` and its norm against the claimed radius.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from robustscope.core.errors import InputError
from robustscope.models import wrap_model
from robustscope.search.engine import radius
from robustscope.search.plan import REFERENCE_CONFIG, SearchConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ (recipe, MILP)


@dataclass
class Run:
    radius: np.ndarray
    x_adv: np.ndarray
    queries: np.ndarray
    seconds: float
    note: str = ""


@dataclass
class Config:
    budget: int = 1000            # robustscope passes per input (white box)
    pgd_steps: int = 40           # PGD steps per probe of the peers' bisections
    bisect: int = 10              # bisection steps after the bracket is found
    fmn_steps: int = 100
    hsj_iter: int = 20
    hsj_eval: int = 1000
    rd_dirs: int = 1000           # random directions per dichotomy step
    recipe_iters: int = 100
    exact_time_limit: float = 10.0  # seconds per input for the MILPs (a bracket left open:
    # the input falls back to the best-known radius)


def max_radius(threat: str, d: int) -> float:
    return 1.0 if threat == "linf" else math.sqrt(d)


def norms(x_adv: np.ndarray, x: np.ndarray, threat: str) -> np.ndarray:
    u = (x_adv - x).reshape(len(x), -1)
    if threat == "l1":
        return np.abs(u).sum(1)
    return np.abs(u).max(1) if threat == "linf" else np.sqrt((u ** 2).sum(1))


class Counting(nn.Module):
    """Wraps a module; counts forward rows and backward rows (passes, as robustscope does)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net
        self.passes = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.net(x.float())
        self.passes += x.shape[0]
        if out.requires_grad:
            rows = x.shape[0]

            def hook(grad, rows=rows):
                self.passes += rows
            out.register_hook(hook)
        return out


# -- robustscope ----------------------------------------------------------------------------
def robustscope_auto(case, threat, X, y, cfg: Config, mult: int = 1, seed: int = 0,
                     budget: int | None = None) -> Run:
    """``radius(..., solver="auto")`` with ``cfg.budget`` passes per input (white box) or its
    black-box default (trees); ``mult`` > 1: the strong reference configuration."""
    if budget is None:
        budget = None if case.kind == "trees" and mult == 1 else cfg.budget * mult
    if case.kind == "trees" and mult > 1:
        budget = 5000 * mult
    kw = {}
    if mult > 1 and case.kind != "trees":
        kw["config"] = REFERENCE_CONFIG
        kw["rtol"] = 0.001
    t = time.perf_counter()
    res = radius(case.native, X, y, threat=threat, space=case.space, budget=budget, seed=seed,
                 **kw)
    secs = time.perf_counter() - t
    r = np.where(res.status == "censored", np.inf, res.radius)
    note = ",".join(sorted({str(s) for s in res.status}))
    return Run(r, res.x_adv, res.queries.astype(float), secs, f"statuses: {note}")


def tree_reference_runs(case, threat, X, y, mult: int = 10) -> list[tuple[str, Run]]:
    """Long runs of robustscope's two black-box solvers (cube search, HopSkipJump) with
    ``mult`` x 5,000 queries per input: the best-known radius of tree models without an
    exact solver (the auto cascade stops on its own bracket before a bigger budget helps)."""
    from robustscope.solvers.attacks.decision.cube_search import cube_search
    from robustscope.solvers.attacks.decision.hop_skip_jump import hop_skip_jump
    model = wrap_model(case.native)
    xt, yt = torch.as_tensor(X), torch.as_tensor(y)
    pool = {"X_pool": torch.as_tensor(case.meta["Xtr"]),
            "y_pool": torch.as_tensor(case.meta["ytr"])}
    out = []
    for name, fn, kw in (("cube search", cube_search, {"stage_queries": 1500, "rtol": 0.002}),
                         ("HopSkipJump", hop_skip_jump, {})):
        t = time.perf_counter()
        run = fn(model, xt, yt, case.space, threat, generator=torch.Generator().manual_seed(100),
                 budget=5000 * mult, **pool, **kw)
        out.append((f"robustscope {name} {mult}x budget",
                    Run(np.asarray(run.radius, dtype=float), np.asarray(run.x_adv),
                        np.asarray(run.forward_queries, dtype=float), time.perf_counter() - t,
                        "reference run")))
    return out


def robustscope_exact(case, threat, X, y, cfg: Config) -> np.ndarray | None:
    """Exact radii (NaN where the solver could not close its bracket within
    ``cfg.exact_time_limit`` seconds per input) from ``radius(..., solver="exact")``: the
    closed-form solver for linear models, the tree MILP, the ReLU MILP (Linf / L1); None where
    robustscope has no exact solver for the model and threat. Before the library's tree MILP
    existed, the benchmark-only XGBoost MILP served as the reference."""
    try:
        res = radius(case.native, X, y, threat=threat, space=case.space, solver="exact",
                     config=SearchConfig(exact_time_limit=cfg.exact_time_limit))
    except InputError:
        if case.meta.get("estimator") == "xgboost" and threat == "linf":
            from exact_xgb_linf import exact_linf
            return np.asarray(exact_linf(case.native, X, y, case.space), dtype=float)
        return None
    return np.where(res.status == "exact", res.radius, np.nan)


def robustscope_blackbox(case, threat, X, y, cfg: Config) -> Run:
    """``radius(..., solver="auto")`` on the model seen only through ``predict_proba`` (a
    plain callable): the gradient-free cascade (cube search + HopSkipJump), default budget."""
    def proba(x: np.ndarray) -> np.ndarray:
        return case.proba(x)
    t = time.perf_counter()
    res = radius(proba, X, y, threat=threat, space=case.space, seed=0)
    secs = time.perf_counter() - t
    r = np.where(res.status == "censored", np.inf, res.radius)
    note = ",".join(sorted({str(s) for s in res.status}))
    return Run(r, res.x_adv, res.queries.astype(float), secs, f"statuses: {note}")


def random_directions(case, threat, X, y, cfg: Config) -> Run:
    from robustscope.search.random_directions import random_directions_radius
    model = wrap_model(case.native, input_shape=X.shape[1:], example=X)
    t = time.perf_counter()
    res = random_directions_radius(model, X, y, threat=threat, space=case.space,
                                   n_directions=cfg.rd_dirs,
                                   max_radius=max_radius(threat, case.space.n_features))
    r = np.where(res.status == "censored", np.inf, res.radius)
    return Run(r, res.x_adv, res.queries.astype(float), time.perf_counter() - t)


def advertorch_recipe(case, threat, X, y, cfg: Config) -> Run:
    """The AdverTorch tutorial's recipe (finite-difference Linf PGD, 10 bisection steps x 100
    iterations, step 0.0625) as re-implemented in benchmarks/blackbox_trees.py, finite
    difference step 0.01 in scaled units (features are range-scaled here)."""
    from blackbox_trees import tutorial_recipe
    model = wrap_model(case.native, input_shape=X.shape[1:], example=X)
    t = time.perf_counter()
    r, xa, q = tutorial_recipe(model, torch.as_tensor(X), torch.as_tensor(y), case.space,
                               fd_scaled=True, iters=cfg.recipe_iters)
    return Run(np.asarray(r), xa.numpy(), np.asarray(q, dtype=float), time.perf_counter() - t)


# -- bisection over a fixed-strength attack (peers' PGD) --------------------------------------
def bisect_attack(attack_at, X, y, threat, d, cfg: Config):
    """Per input: double eps from max/64 until the attack succeeds (7 probes at most), then
    ``cfg.bisect`` bisection steps. ``attack_at(x, y, eps) -> (x_adv, success)`` for one
    input. Returns the smallest successful eps and its counterexample."""
    top = max_radius(threat, d)
    radii = np.full(len(X), np.inf)
    advs = X.copy()
    for i in range(len(X)):
        x, t = X[i:i + 1], y[i:i + 1]
        lo, hi, eps = 0.0, None, top / 64
        while hi is None and eps <= top * (1 + 1e-9):
            xa, ok = attack_at(x, t, eps)
            if ok:
                hi, advs[i] = eps, xa[0]
            else:
                lo, eps = eps, eps * 2
        if hi is None:
            continue
        for _ in range(cfg.bisect):
            mid = (lo + hi) / 2
            xa, ok = attack_at(x, t, mid)
            if ok:
                hi, advs[i] = mid, xa[0]
            else:
                lo = mid
        radii[i] = hi
    return radii, advs


def _run_counted(case, X, y, threat, cfg, make):
    net = Counting(case.torch_model).eval()
    attack_at = make(net)
    t = time.perf_counter()
    r, xa = bisect_attack(attack_at, X, y, threat, case.space.n_features, cfg)
    return Run(r, xa, np.full(len(X), net.passes / len(X)), time.perf_counter() - t)


def foolbox_pgd(case, threat, X, y, cfg: Config) -> Run:
    import foolbox as fb

    def make(net):
        fmodel = fb.PyTorchModel(net, bounds=(0, 1))
        attack = (fb.attacks.LinfPGD(steps=cfg.pgd_steps) if threat == "linf"
                  else fb.attacks.L2PGD(steps=cfg.pgd_steps))

        def at(x, t, eps):
            xt = torch.as_tensor(x, dtype=torch.float32)
            _, clipped, ok = attack(fmodel, xt, torch.as_tensor(t), epsilons=eps)
            return clipped.double().numpy(), bool(ok[0])
        return at
    return _run_counted(case, X, y, threat, cfg, make)


def torchattacks_pgd(case, threat, X, y, cfg: Config) -> Run:
    import torchattacks

    def make(net):
        if X.ndim == 2:  # torchattacks' L2 code assumes image batches (n, C, H, W)
            net = AsImage(net, X.shape[1])

        def at(x, t, eps):
            x = x.reshape(1, 1, 1, -1) if x.ndim == 2 else x
            if threat == "linf":
                atk = torchattacks.PGD(net, eps=eps, alpha=2.5 * eps / cfg.pgd_steps,
                                       steps=cfg.pgd_steps, random_start=True)
            else:
                atk = torchattacks.PGDL2(net, eps=eps, alpha=2.5 * eps / cfg.pgd_steps,
                                         steps=cfg.pgd_steps, random_start=True)
            xa = atk(torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(t))
            with torch.no_grad():
                ok = bool(net(xa).argmax(1)[0] != int(t[0]))
            return xa.double().numpy().reshape(1, *X.shape[1:]), ok
        return at
    return _run_counted(case, X, y, threat, cfg, make)


class AsImage(nn.Module):
    """Feeds (n, 1, 1, d) tensors to a tabular module (for torchattacks' image-only code)."""

    def __init__(self, net: nn.Module, d: int) -> None:
        super().__init__()
        self.net, self.d = net, d

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.reshape(-1, self.d))


def foolbox_minnorm(case, threat, X, y, cfg: Config, which: str) -> Run:
    import foolbox as fb
    net = Counting(case.torch_model).eval()
    fmodel = fb.PyTorchModel(net, bounds=(0, 1))
    if which == "fmn":
        attack = (fb.attacks.LInfFMNAttack(steps=cfg.fmn_steps) if threat == "linf"
                  else fb.attacks.L2FMNAttack(steps=cfg.fmn_steps))
    else:
        attack = fb.attacks.DDNAttack(steps=cfg.fmn_steps)
    t = time.perf_counter()
    xt = torch.as_tensor(X, dtype=torch.float32)
    _, clipped, ok = attack(fmodel, xt, torch.as_tensor(y), epsilons=None)
    xa = clipped.double().numpy()
    r = np.where(ok.numpy(), norms(xa, X, threat), np.inf)
    return Run(r, xa, np.full(len(X), net.passes / len(X)), time.perf_counter() - t)


def _art_classifier(case, X, net=None):
    from art.estimators.classification import BlackBoxClassifier, PyTorchClassifier
    if net is not None:
        return PyTorchClassifier(model=net, loss=nn.CrossEntropyLoss(),
                                 input_shape=X.shape[1:], nb_classes=case.n_classes,
                                 clip_values=(0.0, 1.0), device_type="cpu")
    counter = {"rows": 0}

    def predict(x):
        counter["rows"] += len(x)
        return case.proba(x)
    clf = BlackBoxClassifier(predict, input_shape=X.shape[1:], nb_classes=case.n_classes,
                             clip_values=(0.0, 1.0))
    clf.counter = counter
    return clf


def art_deepfool(case, threat, X, y, cfg: Config) -> Run:
    from art.attacks.evasion import DeepFool
    net = Counting(case.torch_model).eval()
    clf = _art_classifier(case, X, net)
    t = time.perf_counter()
    xa = DeepFool(clf, max_iter=100, verbose=False).generate(X.astype(np.float32))
    xa = xa.astype(np.float64)
    ok = case.predict(xa) != y
    r = np.where(ok, norms(xa, X, threat), np.inf)
    return Run(r, xa, np.full(len(X), net.passes / len(X)), time.perf_counter() - t)


def art_hsj(case, threat, X, y, cfg: Config) -> Run:
    from art.attacks.evasion import HopSkipJump
    net = Counting(case.torch_model).eval() if case.torch_model is not None else None
    clf = _art_classifier(case, X, net)
    attack = HopSkipJump(clf, norm=np.inf if threat == "linf" else 2, max_iter=cfg.hsj_iter,
                         max_eval=cfg.hsj_eval, init_eval=100, verbose=False)
    t = time.perf_counter()
    xa = attack.generate(X.astype(np.float32)).astype(np.float64)
    secs = time.perf_counter() - t
    ok = case.predict(xa) != y
    r = np.where(ok, norms(xa, X, threat), np.inf)
    used = net.passes if net is not None else clf.counter["rows"]
    return Run(r, xa, np.full(len(X), used / len(X)), secs)


def art_clique_bound(case, threat, X, y, cfg: Config) -> Run:
    """ART's clique method: a certified *lower bound* per input (no counterexample)."""
    from art.estimators.classification import SklearnClassifier, XGBoostClassifier
    from art.metrics.verification_decisions_trees import (
        RobustnessVerificationTreeModelsCliqueMethod,
    )
    if case.meta.get("estimator") == "xgboost":
        clf = XGBoostClassifier(model=case.native, nb_features=X.shape[1], nb_classes=2)
    else:
        clf = SklearnClassifier(model=case.native)
    verifier = RobustnessVerificationTreeModelsCliqueMethod(classifier=clf, verbose=False)
    t = time.perf_counter()
    bounds = np.array([verifier.verify(X[i:i + 1], y[i:i + 1], eps_init=0.1, norm=np.inf,
                                       nb_search_steps=10, max_clique=2, max_level=2)[0]
                       for i in range(len(X))])
    return Run(bounds, np.full_like(X, np.nan), np.zeros(len(X)), time.perf_counter() - t,
               "lower bound")


def art_empirical_robustness(case, X, adv_rs: np.ndarray) -> tuple[float, float]:
    """ART's ``empirical_robustness`` (minimal FGSM, Linf) next to the same statistic
    (mean of ||x' - x||_inf / ||x||_inf) over robustscope's counterexamples."""
    from art.metrics import empirical_robustness
    clf = _art_classifier(case, X, Counting(case.torch_model).eval())
    er = empirical_robustness(clf, X.astype(np.float32), "fgsm",
                              attack_params={"norm": np.inf, "minimal": True,
                                             "eps_step": 0.005, "eps": 1.0})
    ok = np.isfinite(adv_rs).all(axis=tuple(range(1, adv_rs.ndim)))
    num = norms(adv_rs[ok], X[ok], "linf")
    den = np.abs(X[ok].reshape(ok.sum(), -1)).max(1)
    return float(er), float(np.mean(num / den))
