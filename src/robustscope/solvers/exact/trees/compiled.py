"""What every input of one (ensemble, feature space) shares, built once and cached.

:func:`compiled_for` returns the input-independent program
(:func:`~robustscope.solvers.exact.trees.program.build_program`) and the leaves' boxes
(:func:`~robustscope.solvers.exact.trees.leaf_bounds.leaf_boxes`) of a pair, from a
:class:`CompiledCache`.

The cache
---------
- **Keyed by** :func:`content_key`: a digest of the ensemble's arrays (every tree's features,
  thresholds, children and values, the offset, link, classes, feature count, split rule,
  float32 input and score flags, LightGBM's zero band) and of the space's bounds, scales,
  mutability, types and one-hot groups: everything the program is built from. A refitted or
  edited model, or another space, never meets a stale program; the same model wrapped again
  meets its own. (Relations are not in the key: the program does not hold them; each input's
  rows add them.)
- **Bounded**: at most :data:`~robustscope.solvers.exact.trees.settings.COMPILED_CACHE_SIZE`
  entries (8), least recently used out first.
- **Why it outlives a call**: the radius search calls the solver once per batch, shard or
  refinement of the same model; building the program and its boxes is most of a small call's
  time (``meta["program_cached"]`` says whether a call found it here).
- **Clearing**: :func:`clear_compiled_cache` (or ``COMPILED_CACHE.clear()``); a caller that
  wants its own cache passes one to :func:`compiled_for`.

Thread-safe: a lock guards every read and write (two threads that miss at once both build;
the later one's entry is kept).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from robustscope.core.space import FeatureSpace
from robustscope.models.trees import TreeEnsemble
from robustscope.solvers.exact.trees import settings
from robustscope.solvers.exact.trees.leaf_bounds import LeafBoxes, leaf_boxes
from robustscope.solvers.exact.trees.program import Program, build_program


@dataclass
class Compiled:
    """What every input of one (ensemble, feature space) shares."""

    prog: Program
    boxes: LeafBoxes


class CompiledCache:
    """A bounded, least-recently-used map ``content_key -> Compiled`` (see the module's
    docstring); ``size`` ``None`` reads
    :data:`~robustscope.solvers.exact.trees.settings.COMPILED_CACHE_SIZE` at each insert."""

    def __init__(self, size: int | None = None) -> None:
        self.size = size
        self._entries: OrderedDict[bytes, Compiled] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: bytes) -> Compiled | None:
        """The entry of ``key`` (now the most recently used), or ``None``."""
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
            return hit

    def put(self, key: bytes, comp: Compiled) -> None:
        """Store ``comp``, dropping the least recently used entries beyond the bound."""
        size = settings.COMPILED_CACHE_SIZE if self.size is None else self.size
        with self._lock:
            self._entries[key] = comp
            while len(self._entries) > size:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


#: The process's cache of compiled programs (module docstring: key, bound, lifetime).
COMPILED_CACHE = CompiledCache()


def clear_compiled_cache() -> None:
    """Empty :data:`COMPILED_CACHE` (the next call of each model builds its program again)."""
    COMPILED_CACHE.clear()


def content_key(ens: TreeEnsemble, space: FeatureSpace) -> bytes:
    """A 20-byte digest of everything the compiled program of ``(ens, space)`` is built from."""
    h = hashlib.blake2b(digest_size=20)
    for t in ens.trees:
        for a in (t.feature, t.threshold, t.left, t.right, t.value):
            h.update(np.ascontiguousarray(a).tobytes())
    h.update(ens.offset.tobytes())
    h.update(repr((ens.link, ens.n_classes, ens.n_features, ens.strict, ens.input_float32,
                   ens.zero_band, bool(ens.meta.get("float32_scores")))).encode())
    for a in (space.lower, space.upper, space.scale, space.mutable):
        h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
    h.update(repr(list(space.types)).encode())
    h.update(repr([np.asarray(g).tolist() for g in space.groups]).encode())
    return h.digest()


def compiled_for(ens: TreeEnsemble, space: FeatureSpace,
                 cache: CompiledCache | None = None) -> tuple[Compiled, bool]:
    """The program of ``(ens, space)``, built on first use; ``(compiled, was_cached)``.
    ``cache``: where to look and store (default :data:`COMPILED_CACHE`)."""
    cache = COMPILED_CACHE if cache is None else cache
    key = content_key(ens, space)
    hit = cache.get(key)
    if hit is not None:
        return hit, True
    prog = build_program(ens, space)
    comp = Compiled(prog, leaf_boxes(prog, ens.n_features))
    cache.put(key, comp)
    return comp, False
