"""Memory-mapped NPZ data: uncompressed archives are mapped, others read as before."""

from __future__ import annotations

import numpy as np

from robustscope.runs.data import load_data
from robustscope.runs.npzmap import mmap_npz


def test_uncompressed_npz_is_memory_mapped(tmp_path):
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(500, 7)), rng.integers(0, 3, 500)
    np.savez(tmp_path / "a.npz", X=X, y=y, F=np.asfortranarray(rng.normal(size=(4, 3))),
             E=np.zeros((0, 3)))
    arrays = mmap_npz(tmp_path / "a.npz")
    assert isinstance(arrays["X"], np.memmap) and not arrays["X"].flags.writeable
    np.testing.assert_array_equal(arrays["X"], X)
    np.testing.assert_array_equal(arrays["y"], y)
    with np.load(tmp_path / "a.npz") as z:
        np.testing.assert_array_equal(arrays["F"], z["F"])
    assert arrays["E"].shape == (0, 3)
    ds = load_data(tmp_path / "a.npz")
    assert isinstance(ds.X, np.memmap)
    np.testing.assert_array_equal(ds.X[100:200], X[100:200])


def test_compressed_or_non_float64_npz_is_read_whole(tmp_path):
    X, y = np.ones((10, 2)), np.zeros(10, dtype=int)
    np.savez_compressed(tmp_path / "c.npz", X=X, y=y)
    assert mmap_npz(tmp_path / "c.npz") is None
    assert not isinstance(load_data(tmp_path / "c.npz").X, np.memmap)
    np.savez(tmp_path / "f.npz", X=X.astype(np.float32), y=y)
    ds = load_data(tmp_path / "f.npz")
    assert not isinstance(ds.X, np.memmap) and ds.X.dtype == np.float64
