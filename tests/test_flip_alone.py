"""Counterexamples that flip alone (issue #42, item 6): float32 rounding differs between batch
sizes, so a counterexample the search verified in a batch within rounding of the decision
boundary may not change the decision when the model is called on its row alone, as a user
re-checking one row calls it. The search checks each final counterexample alone, pushes it
outward where that call disagrees, and withdraws it where no push helps; the extra rows are
charged to the input.

The model here makes the difference deterministic: in any batch of more than one row, one
logit is raised by ``skew``, so a point just inside the boundary flips in a batch only.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import robustscope as rs


class BatchSkew(nn.Module):
    """``net``'s logits, class 1's raised by ``skew`` in batches of more than one row; counts
    the rows and the one-row calls it sees."""

    def __init__(self, net: nn.Module, skew: float) -> None:
        super().__init__()
        self.net, self.skew = net, skew
        self.rows = self.single_calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.rows += x.shape[0]
        self.single_calls += x.shape[0] == 1
        out = self.net(x)
        if x.shape[0] > 1:
            out = out + torch.tensor([0.0, self.skew], dtype=out.dtype, device=out.device)
        return out


def _model(skew: float, seed: int = 0) -> tuple[BatchSkew, np.ndarray, np.ndarray]:
    """A float32 two-class network and 8 inputs of class 0 (margins about 1)."""
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 2))
    X = np.random.default_rng(seed).random((64, 10))
    with torch.no_grad():
        net[2].weight *= 20  # steep enough that the margins break within the data's box
        z = net(torch.as_tensor(X, dtype=torch.float32))
        net[2].bias[0] += 1.0 - float((z[:, 0] - z[:, 1]).median())  # median margin 1
        z = net(torch.as_tensor(X, dtype=torch.float32))
    keep = (z[:, 0] - z[:, 1] > 0.5).numpy()
    X = X[keep][:8]
    return BatchSkew(net, skew), X, np.zeros(len(X), dtype=np.int64)


def _alone(model: nn.Module, x_adv: np.ndarray) -> np.ndarray:
    """Each row's class, the model called on it alone (float32, as a user would)."""
    with torch.no_grad():
        return np.array([int(model(torch.as_tensor(row[None], dtype=torch.float32)).argmax())
                         for row in x_adv])


@pytest.mark.parametrize("threat", ["linf", "l2"])
@pytest.mark.parametrize("budget", [None, 60])
def test_every_counterexample_flips_alone_and_its_rows_are_charged(threat, budget):
    model, X, y = _model(skew=3e-5)
    res = rs.radius(model, X, y, threat=threat, budget=budget, certify="none")
    found = np.isin(res.status, ["attacked", "exact"])
    assert found.sum() == len(X)
    # the skew is real: in a batch, the search's points sit within it of the boundary
    with torch.no_grad():
        z = model.net(torch.as_tensor(res.x_adv, dtype=torch.float32)).double()
    assert ((z[:, 1] - z[:, 0]).abs() < 1e-2).all()
    seen = model.rows
    model.rows = 0
    alone = _alone(model, res.x_adv)
    assert (alone != y).all(), f"{(alone == y).sum()} of {len(y)} do not flip alone"
    assert (res.adv_prediction == alone).all()  # the logits reported are the call alone's
    # query counts are the rows the model saw, the checks alone included
    assert int(res.forward_queries.sum()) == seen
    parts = res.meta["passes_by_part"]
    assert parts["check alone"] >= found.sum()  # one row each, more where pushed
    assert sum(parts.values()) == int(res.queries.sum())
    if budget is not None:
        assert res.queries.max() <= budget


def test_a_pushed_counterexample_stays_in_the_feature_space():
    model, X, y = _model(skew=3e-5, seed=1)
    space = rs.FeatureSpace.box(10, lower=0.0, upper=1.0)
    res = rs.radius(model, X, y, threat="linf", space=space, certify="none")
    assert (res.x_adv >= 0).all() and (res.x_adv <= 1).all()
    assert (_alone(model, res.x_adv) != y).all()
    # the radius is the pushed point's own size
    size = np.abs(res.x_adv - X).max(axis=1)
    found = np.isfinite(res.radius)
    np.testing.assert_allclose(res.radius[found], size[found], rtol=1e-12)


def test_a_counterexample_no_push_confirms_alone_is_withdrawn():
    """A skew of a third of the median margin: the points the batched search finds sit far
    inside the boundary for a call alone, beyond the push; those inputs claim no
    counterexample."""
    model, X, y = _model(skew=0.3)
    res = rs.radius(model, X, y, threat="linf", certify="none")
    flips = _alone(model, res.x_adv) != y
    claimed = np.isfinite(res.radius)
    assert (flips[claimed]).all()
    assert (~claimed).any()
    assert (res.status[~claimed] == "censored").all()
    np.testing.assert_array_equal(res.x_adv[~claimed], X[~claimed])
    assert (res.adv_prediction[~claimed] == y[~claimed]).all()


def test_a_counterexample_verified_alone_costs_no_extra_row():
    """One input: every verification is a call on its row alone, so nothing is checked
    again."""
    model, X, y = _model(skew=3e-5)
    res = rs.radius(model, X[:1], y[:1], threat="linf", space=rs.FeatureSpace.box(10),
                    certify="none")
    assert np.isfinite(res.radius[0])
    assert "check alone" not in res.meta["passes_by_part"]
    assert (_alone(model, res.x_adv) != y[:1]).all()
