"""A logistic black box with a known nearest boundary point, for the tests of the
gradient-free cascade's stages (the last stretch, the projection again)."""

from __future__ import annotations

import numpy as np
import torch

from robustscope.core.space import FeatureSpace
from robustscope.models.blackbox import ProbaClassifier


def logistic_box(n: int, d: int, seed: int = 0, bias: float = 0.2):
    """A logistic ``predict_proba`` on ``d`` unbounded features of scale 1 and ``n`` inputs
    drawn from a standard normal. Returns the model, its space, the inputs ``(n, d)``, their
    labels and, per input, the step ``(n, d)`` onto the decision boundary nearest it under
    L2 (any step past it is a counterexample)."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=d)

    def proba(a):
        p1 = 1 / (1 + np.exp(-(np.asarray(a) @ w + bias)))
        return np.stack([1 - p1, p1], axis=1)

    model = ProbaClassifier(proba, 2, (d,))
    space = FeatureSpace.from_arrays([-np.inf] * d, [np.inf] * d)
    x = torch.as_tensor(rng.normal(size=(n, d)))
    margin = x.numpy() @ w + bias
    to_boundary = torch.as_tensor(-margin[:, None] * w[None, :] / (w @ w))
    return model, space, x, model.predict(x), to_boundary
