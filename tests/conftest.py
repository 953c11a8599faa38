"""Shared fixtures: small data sets and models made by the tests themselves (no network)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.datasets import load_breast_cancer, load_digits


@pytest.fixture(scope="session")
def digits():
    X, y = load_digits(return_X_y=True)
    return X / 16.0, y


@pytest.fixture(scope="session")
def breast_cancer():
    X, y = load_breast_cancer(return_X_y=True)
    return X, y


def train_mlp(X: np.ndarray, y: np.ndarray, hidden: int = 32, epochs: int = 150,
              seed: int = 0) -> torch.nn.Module:
    """A small ReLU MLP trained full-batch with Adam (deterministic for a seed)."""
    torch.manual_seed(seed)
    k = int(y.max()) + 1
    net = torch.nn.Sequential(torch.nn.Linear(X.shape[1], hidden), torch.nn.ReLU(),
                              torch.nn.Linear(hidden, k))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    xt, yt = torch.tensor(X, dtype=torch.float32), torch.tensor(y)
    for _ in range(epochs):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(xt), yt).backward()
        opt.step()
    return net.eval()


@pytest.fixture(scope="session")
def digits_mlp(digits):
    X, y = digits
    return train_mlp(X, y)


@pytest.fixture
def one_thread():
    """torch on one thread for the test: tiny batches only pay for the pool (and the tests
    share a machine); the caller's setting is restored."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
