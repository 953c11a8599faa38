"""The statement's smooth margin: a lower bound of the margin within log(k - 1), equal to it
for two classes and for targeted runs, and steering the minimum-norm run's first steps."""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from robustscope.core.statement import DECISION_CHANGE, Statement


@settings(max_examples=100, deadline=None)
@given(logits=arrays(np.float64, st.tuples(st.integers(1, 6), st.integers(2, 8)),
                     elements=st.floats(-50, 50)),
       seed=st.integers(0, 1000))
def test_smooth_margin_bounds_the_margin_from_below(logits, seed):
    z = torch.as_tensor(logits)
    n, k = z.shape
    y = torch.as_tensor(np.random.default_rng(seed).integers(0, k, n))
    hard = DECISION_CHANGE.margin(z, y)
    smooth = DECISION_CHANGE.smooth_margin(z, y)
    assert (smooth <= hard + 1e-9).all()
    assert (smooth >= hard - math.log(k - 1) - 1e-9).all()
    if k == 2:
        torch.testing.assert_close(smooth, hard)


def test_targeted_runs_and_statements_keep_the_margin():
    z = torch.tensor([[3.0, 1.0, 2.0, -1.0]])
    y = torch.tensor([0])
    towards = torch.tensor([3])
    torch.testing.assert_close(DECISION_CHANGE.smooth_margin(z, y, towards),
                               DECISION_CHANGE.margin(z, y, towards))
    targeted = Statement(target=1)
    torch.testing.assert_close(targeted.smooth_margin(z, y), targeted.margin(z, y))


def test_smooth_gradient_weighs_every_other_class():
    # the runner-up (class 1) alone drives the margin's gradient; the smooth margin's gradient
    # also pulls towards class 2, in proportion to its softmax share among the others
    z = torch.tensor([[4.0, 2.0, 1.9, -5.0]], requires_grad=True)
    y = torch.tensor([0])
    (g_hard,) = torch.autograd.grad(DECISION_CHANGE.margin(z, y).sum(), z)
    (g_smooth,) = torch.autograd.grad(DECISION_CHANGE.smooth_margin(z, y).sum(), z)
    assert g_hard[0, 2] == 0 and g_hard[0, 1] == -1
    share = torch.softmax(z.detach()[0, 1:], dim=0)
    torch.testing.assert_close(-g_smooth[0, 1:], share)
