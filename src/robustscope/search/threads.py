"""How many threads a search uses: one for tiny batches, the caller's pools for large ones.

This is the thread *policy*; it lives with the search, which owns the call. The model layer
only offers the mechanism (:meth:`Classifier.thread_setter
<robustscope.models.base.Classifier.thread_setter>`, :mod:`robustscope.models.threads`): how
to set a library's own thread count, never when or to what.

A radius search calls the model hundreds or thousands of times on a few dozen rows. On such
batches the thread pools of torch, BLAS, OpenMP and the model libraries cost more than they
give: their workers spin waiting for work and steal each other's cores (and a busy
neighbour's), so a black-box search runs many times slower than on one thread. Parallelism
comes from processes and shards instead (``docs/scaling.md``).

The public entry points (:func:`robustscope.radius`, :func:`robustscope.grid_robustness`,
:func:`robustscope.random_directions_radius`) run inside :func:`limited_threads`, chosen by
their ``threads`` argument:

``"auto"`` (default)
    Before every model call the search makes (through its metered views,
    :class:`~robustscope.models.metered.MeteredModel`, built by
    :func:`robustscope.search.metering.charged` with :func:`fit_threads` as their thread
    hook) and every large solver batch (``SolverProblem.fit_threads``), :func:`fit_threads`
    looks at the work, ``rows × features``: below :data:`SMALL_WORK` elements everything
    runs on one thread; above it, the caller's own settings are in force (all cores by
    default), so a CNN forward on a batch of 512 images or the exact linear solver on 10^5
    rows keeps its threads. The count is switched only when it changes.
``k`` (an int >= 1)
    Every pool set to ``k`` threads for the whole call.
``None``
    Nothing is touched: the caller's settings stay in force everywhere.

What is set: torch's intra-op threads (``torch.set_num_threads``); the OpenMP and BLAS pools
of every loaded native library, through ``threadpoolctl`` (XGBoost, LightGBM and
scikit-learn's OpenMP, OpenBLAS / MKL); and a model's own thread setting, through the setter
its adapter offers (``thread_setter()``): an XGBoost booster's ``nthread``, a LightGBM or
scikit-learn estimator's ``n_jobs`` (also when the search is given its bound
``predict_proba``), the per-call count of a LightGBM booster or an ONNX Runtime session made
by :func:`robustscope.load_model` (a one-thread session for limited calls). Everything is
restored when the entry point returns or raises; a nested entry point joins the scope
already open.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import sys
from collections.abc import Callable, Iterator

import torch

from robustscope.models.threads import Setter, native_thread_setter
from robustscope.search.options import AUTO, Threads

log = logging.getLogger(__name__)

#: The default policy (one thread for small work, the caller's settings for large work) and
#: the one check of a ``threads`` value, both declared with the options.
THREADS = Threads()
#: Work (elements: rows × features of one model call or solver batch) from which threads pay.
#: A black-box call of 60 tabular rows is ~10^3, a finite-difference batch ~10^5; a CNN
#: forward at batch 512 on 3×32×32 images is 1.6·10^6, the exact linear solver on 10^5 rows
#: of 64 features 6.4·10^6.
SMALL_WORK = 1 << 18

_ACTIVE: contextvars.ContextVar[ThreadScope | None] = contextvars.ContextVar(
    "robustscope_threads", default=None)


def check_threads(threads: object, name: str = "threads") -> str | int | None:
    """``threads`` as ``"auto"``, ``None`` or an int >= 1; :class:`InputError` otherwise.
    The rule is the options declaration's (:class:`~robustscope.search.options.Threads`), so
    ``radius()``, ``grid_robustness`` and ``random_directions_radius`` accept the same values."""
    return THREADS.check(threads, name)


class ThreadScope:
    """The thread settings of one public call: the caller's, captured on entry, and the
    count in force now (``current``; ``None`` = the caller's settings)."""

    def __init__(self, policy: str | int | None) -> None:
        self.policy = policy
        self.current: int | None = None
        self._caller_torch = torch.get_num_threads()
        self._controller = None  # threadpoolctl's, looked up on the first limit
        self._limiter = None
        #: id(owner) -> (the owner, its setter); the owner is kept alive meanwhile.
        self._natives: dict[int, tuple[object, Setter]] = {}

    def wanted(self, elements: int) -> int | None:
        """Threads for ``elements`` of work (``None``: the caller's settings)."""
        if self.policy is None:
            return None
        if self.policy == AUTO:
            return 1 if elements < SMALL_WORK else None
        return int(self.policy)

    def fit(self, elements: int, owner: object | None = None,
            make_setter: Callable[[], Setter | None] | None = None) -> None:
        """Switch to the count ``elements`` of work wants, adopting first the thread setting
        of ``owner`` (the library object a model calls): on first sight, ``make_setter()``
        gives its :data:`Setter` (captured before the scope changes anything of it)."""
        if self.policy is None:
            return
        if owner is not None and make_setter is not None and id(owner) not in self._natives:
            setter = make_setter()
            if setter is not None:
                self._natives[id(owner)] = (owner, setter)
                if self.current is not None:
                    _quietly(setter, self.current)
        n = self.wanted(elements)
        if n != self.current:
            self._switch(n)

    def _switch(self, n: int | None) -> None:
        if n is None:  # back to the caller's settings
            torch.set_num_threads(self._caller_torch)
            if self._limiter is not None:
                self._limiter.restore_original_limits()
                self._limiter = None
        else:
            if self._controller is None:
                self._controller = _controller()
            if self._limiter is not None:
                self._limiter.restore_original_limits()
            # threadpoolctl first: it records the caller's limits before torch changes its own
            self._limiter = self._controller.limit(limits=n)
            torch.set_num_threads(n)
        for _, setter in self._natives.values():
            _quietly(setter, n)
        self.current = n

    def close(self) -> None:
        """Restore every setting the scope changed."""
        if self.current is not None:
            self._switch(None)
        self._natives.clear()


_CONTROLLER: tuple[int, object] | None = None


def _controller() -> object:
    """threadpoolctl's controller of the native pools loaded in this process. Making one scans
    the loaded libraries (about 10 ms), so it is kept and made again only after modules were
    imported since (a new library may have brought a new pool)."""
    global _CONTROLLER
    loaded = len(sys.modules)
    if _CONTROLLER is None or _CONTROLLER[0] != loaded:
        from threadpoolctl import ThreadpoolController

        _CONTROLLER = (loaded, ThreadpoolController())
    return _CONTROLLER[1]


def _quietly(setter: Setter, n: int | None) -> None:
    try:
        setter(n)
    except Exception as exc:  # a model's own setting must not fail the search
        log.warning("could not set a model's thread count to %s: %s", n, exc)


@contextlib.contextmanager
def limited_threads(threads: str | int | None = AUTO, work: int = 0) -> Iterator[ThreadScope]:
    """Run the block under the thread policy ``threads`` (see the module's text), starting
    from the count that ``work`` elements want. Inside an open scope, joins it (the outer
    call's policy holds). Restores the caller's settings on exit, also after an error."""
    threads = check_threads(threads)
    outer = _ACTIVE.get()
    if outer is not None:
        yield outer
        return
    scope = ThreadScope(threads)
    token = _ACTIVE.set(scope)
    try:
        scope.fit(work)
        yield scope
    finally:
        _ACTIVE.reset(token)
        scope.close()


def fit_threads(elements: int, model: object | None = None) -> None:
    """Inside a scope: switch to the thread count that ``elements`` of work wants, adopting
    first the thread setting of ``model``: a :class:`~robustscope.models.base.Classifier`
    (its ``thread_setter()``, keyed by its ``native`` library object where it has one) or a
    raw library object (an estimator, a booster, a bound ``predict_proba``'s model).
    Outside any scope: nothing. The metered views the search builds call it before every
    model call."""
    scope = _ACTIVE.get()
    if scope is None:
        return
    if model is None:
        scope.fit(int(elements))
    elif callable(getattr(model, "thread_setter", None)):
        native = getattr(model, "native", None)
        scope.fit(int(elements), model if native is None else native, model.thread_setter)
    else:
        scope.fit(int(elements), model, lambda: native_thread_setter(model))


def current_threads() -> int | None:
    """The thread count in force in the open scope; ``None`` outside a scope or when the
    caller's own settings are in force."""
    scope = _ACTIVE.get()
    return None if scope is None else scope.current
