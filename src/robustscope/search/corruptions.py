"""Accuracy under the common corruptions (CIFAR-10-C), in MultiRobustBench's file format.

A corruption is not adversarial: every image is corrupted once per (corruption, severity),
at random from the seed (:func:`robustscope.threats.corruptions.corrupt`), and the model is
called once on it. There is no radius; the result is an accuracy per severity, written
under the corruption's name with keys ``"1"`` .. ``"5"`` as the benchmark's accuracy files
hold them, so that :mod:`robustscope.scores.multiattack` scores them against acc*.
Every model call is charged to its input in the query ledger (one forward pass per input
per (corruption, severity), plus the clean pass).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from robustscope.core.checks import check_seed
from robustscope.core.errors import InputError
from robustscope.core.statement import DECISION_CHANGE, Statement
from robustscope.models.base import Classifier
from robustscope.search.metering import charged
from robustscope.search.preamble import class_indices, open_ledger, wrap_inputs
from robustscope.search.threads import AUTO, check_threads, limited_threads
from robustscope.threats.corruptions import (
    CORRUPTIONS,
    SEVERITIES,
    available,
    check_corruption,
    corrupt,
)
from robustscope.threats.image import check_images


@dataclass
class CorruptionResult:
    """Accuracies under corruptions of one model on one set of inputs.

    ``correct[name]`` is ``(n, 5)`` bool (severities 1..5; ``False`` too where a severity was
    not evaluated, see ``evaluated``); ``clean_correct`` ``(n,)``; ``passes`` the model
    passes per input (the ledger's forward count); ``seconds`` the wall time;
    ``skipped`` the (name, severity) pairs :func:`~robustscope.threats.corruptions.available`
    says are not produced (none: all 19 are made at 1..5).
    """

    clean_correct: np.ndarray
    correct: dict[str, np.ndarray]
    evaluated: dict[str, tuple[int, ...]]
    passes: np.ndarray
    seconds: float
    skipped: list[tuple[str, int]] = field(default_factory=list)

    @property
    def clean_accuracy(self) -> float:
        return float(self.clean_correct.mean())

    def accuracy(self, name: str, severity: int) -> float:
        """Share of inputs classified correctly under ``name`` at ``severity``."""
        if severity not in self.evaluated.get(name, ()):
            raise InputError(f"{name} at severity {severity} was not evaluated")
        return float(self.correct[name][:, severity - 1].mean())

    def to_benchmark(self) -> dict:
        """``{"NoAttack": clean %, name: {"1": %, ..., "5": %}}`` (evaluated severities)."""
        out: dict = {"NoAttack": 100 * self.clean_accuracy}
        for name, sevs in self.evaluated.items():
            if sevs:
                out[name] = {str(s): 100 * self.accuracy(name, s) for s in sevs}
        return out


def corruption_accuracies(
    model: Classifier | torch.nn.Module,
    X: torch.Tensor | np.ndarray,
    y,
    corruptions: Sequence[str] | None = None,
    severities: Sequence[int] = SEVERITIES,
    seed: int = 0,
    batch_size: int = 256,
    device: str | torch.device = "cpu",
    n_classes: int | None = None,
    statement: Statement | None = None,
    threads: str | int | None = AUTO,
) -> CorruptionResult:
    """Accuracy of ``model`` on ``X`` ``(n, 3, H, W)`` in [0, 1] under each corruption at
    each severity (default: the 19 of CIFAR-10-C). A named corruption that is not produced
    raises :class:`InputError`. ``y``: labels as for :func:`robustscope.radius`."""
    t0 = time.perf_counter()
    threads = check_threads(threads)
    seed = check_seed(seed)
    if batch_size < 1:
        raise InputError(f"batch_size must be >= 1, got {batch_size}")
    sevs = tuple(dict.fromkeys(int(s) for s in severities))
    if not sevs or any(s not in SEVERITIES for s in sevs):
        raise InputError(f"severities must be among 1..5, got {list(severities)}")
    explicit = corruptions is not None
    names = [check_corruption(c) for c in (CORRUPTIONS if corruptions is None else corruptions)]
    skipped = [(c, s) for c in names for s in sevs if not available(c, s)]
    for c in names:
        if explicit and not any(available(c, s) for s in sevs):
            corrupt(np.zeros((1, 3, 8, 8)), c, sevs[0])  # raises the reason
    if not torch.is_tensor(X):
        X = torch.as_tensor(np.asarray(X))
    check_images(X, "X")
    if X.shape[1] != 3:
        raise InputError(f"X must hold RGB images (n, 3, H, W); got {X.shape[1]} channels")
    statement = DECISION_CHANGE if statement is None else statement
    n = X.shape[0]
    work = min(n, batch_size) * int(np.prod(X.shape[1:]))
    with limited_threads(threads, work):
        clf = wrap_inputs(model, X, device, n_classes=n_classes, example=X[:2])
        yt = torch.as_tensor(class_indices(clf, y, n), device=clf.device)
        ledger = open_ledger(clf, n)

        def correct_on(images: np.ndarray | torch.Tensor) -> np.ndarray:
            ok = np.zeros(n, dtype=bool)
            for start in range(0, n, batch_size):
                rows = np.arange(start, min(n, start + batch_size))
                xb = torch.as_tensor(images[start:start + len(rows)]).to(
                    device=clf.device, dtype=clf.dtype)
                with torch.no_grad():
                    logits = charged(clf, ledger, rows).logits(xb)
                broken = statement.holds(logits.argmax(dim=1), yt[rows])
                ok[rows] = ~broken.cpu().numpy()
            return ok

        x_np = X.detach().cpu().numpy()
        clean = correct_on(x_np)
        correct, evaluated = {}, {}
        for name in names:
            correct[name] = np.zeros((n, len(SEVERITIES)), dtype=bool)
            done = []
            for s in sevs:
                if not available(name, s):
                    continue
                correct[name][:, s - 1] = correct_on(corrupt(x_np, name, s, seed))
                done.append(s)
            evaluated[name] = tuple(done)
    return CorruptionResult(clean, correct, evaluated, ledger.forward.copy(),
                            time.perf_counter() - t0, skipped)


__all__ = ["CorruptionResult", "corruption_accuracies"]
