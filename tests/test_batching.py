"""Batch sizes from free memory (#45 item 3)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robustscope.core.errors import InputError
from robustscope.models.toy import stripes_dataset, train_tiny_cnn
from robustscope.models.wrap import wrap_model
from robustscope.search import batching
from robustscope.search.grid import grid_robustness
from robustscope.search.metering import charged
from robustscope.search.preamble import open_ledger


@pytest.fixture(scope="module")
def setup():
    torch.set_num_threads(1)
    return train_tiny_cnn(steps=100), *stripes_dataset(6, seed=4)


def test_saved_bytes_grow_with_the_network(setup):
    net, x, y = setup
    clf = wrap_model(net, input_shape=(3, 32, 32), n_classes=4)
    ledger = open_ledger(clf, 2, probe=False)
    view = charged(clf, ledger, np.arange(2))
    small = batching.saved_bytes_per_row(view, x[:2], lambda z: z[:, 0])
    torch.manual_seed(0)
    wide_clf = wrap_model(torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3, padding=1),
                                              torch.nn.ReLU(), torch.nn.Conv2d(64, 3, 1), net),
                          input_shape=(3, 32, 32), n_classes=4)
    big = batching.saved_bytes_per_row(charged(wide_clf, open_ledger(wide_clf, 2, probe=False),
                                               np.arange(2)), x[:2], lambda z: z[:, 0])
    # the first conv's 64 x 32 x 32 float32 output alone is 256 KiB per row
    assert big - small >= 64 * 32 * 32 * 4
    assert ledger.forward.sum() == 2 and ledger.backward.sum() == 2  # charged


def test_auto_batch_size_divides_the_free_memory(setup, monkeypatch):
    net, x, _ = setup
    clf = wrap_model(net, input_shape=(3, 32, 32), n_classes=4)
    view = charged(clf, open_ledger(clf, 2, probe=False), np.arange(2))
    row = batching.saved_bytes_per_row(view, x[:2], lambda z: z[:, 0])
    per_image = row + batching.IMAGE_COPIES * 3 * 32 * 32 * 4
    monkeypatch.setattr(batching, "free_memory", lambda device: int(100 * per_image / 0.5))
    assert batching.auto_batch_size(view, x[:2], lambda z: z[:, 0]) in (99, 100)
    monkeypatch.setattr(batching, "free_memory", lambda device: None)
    assert batching.auto_batch_size(view, x[:2], lambda z: z[:, 0]) == batching.FALLBACK_BATCH
    monkeypatch.setattr(batching, "free_memory", lambda device: 10 ** 15)
    assert batching.auto_batch_size(view, x[:2], lambda z: z[:, 0]) == batching.MAX_BATCH
    with pytest.raises(InputError, match="share"):
        batching.auto_batch_size(view, x[:2], lambda z: z[:, 0], share=0)


def test_grid_with_auto_batches_equals_one_batch(setup, monkeypatch):
    net, x, y = setup
    fixed = grid_robustness(net, x, y, "linf", steps=5, batch_size=6)
    auto = grid_robustness(net, x, y, "linf", steps=5, batch_size="auto")
    np.testing.assert_array_equal(fixed.level, auto.level)
    # the measurement's pass on two inputs is charged to them
    assert (auto.forward_queries[:2] == fixed.forward_queries[:2] + 1).all()
    with pytest.raises(InputError, match="batch_size"):
        grid_robustness(net, x, y, "linf", batch_size="big")
    assert batching.free_memory(torch.device("cpu")) is None or \
        batching.free_memory(torch.device("cpu")) > 0
