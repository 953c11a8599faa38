"""Stopping a run from outside: SIGINT (Ctrl-C) and SIGTERM end it cleanly.

Python turns SIGINT into :class:`KeyboardInterrupt`; :func:`terminate_raises` turns SIGTERM
into :class:`Terminated` the same way, so that both unwind the run: the backend ends its
worker processes, the store is closed, and the finished shards (each written atomically,
journalled with an fsync) stay on disk for ``robustscope run SPEC --resume DIR``.
:class:`RunInterrupted` is what the run raises then: the signal and the exact command that
resumes it.

Libraries that install their own handlers (``ray.init`` does, for SIGTERM: its handlers end
the process with ``SystemExit``, and the Ray core worker's crash handler dumps a C++ stack
and aborts) are started within :func:`handlers_kept`, which puts back the handlers in place
before.
"""

from __future__ import annotations

import contextlib
import shlex
import signal
import threading
from collections.abc import Iterator
from pathlib import Path


class Terminated(BaseException):
    """SIGTERM arrived (a :class:`BaseException`, like :class:`KeyboardInterrupt`, so that
    ``except Exception`` blocks do not swallow it)."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)


class RunInterrupted(Exception):
    """A run stopped by a signal; its finished shards are kept in ``out_dir``.

    signum : the signal (``signal.SIGINT`` or ``signal.SIGTERM``).
    command : the shell command that resumes the run.
    """

    def __init__(self, signum: int, out_dir: Path, command: str) -> None:
        name = signal.Signals(signum).name
        super().__init__(f"interrupted by {name}; the finished shards are kept in {out_dir}; "
                         f"resume with: {command}")
        self.signum = int(signum)
        self.out_dir = Path(out_dir)
        self.command = command


def resume_command(spec_path: str | Path, out_dir: str | Path) -> str:
    """The shell command that continues the run of ``spec_path`` in ``out_dir``."""
    return (f"robustscope run {shlex.quote(str(spec_path))} "
            f"--resume {shlex.quote(str(out_dir))}")


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated(signum)


@contextlib.contextmanager
def terminate_raises() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated` in the main thread (the previous
    handler is restored afterwards). Outside the main thread, where Python cannot set
    handlers, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


#: The signals whose handlers :func:`handlers_kept` keeps.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def handlers_kept(signums: tuple[int, ...] = STOP_SIGNALS) -> Iterator[None]:
    """Within the block, code may install handlers for ``signums``; afterwards (however the
    block ends) the Python handlers in place before are back, for the signal and at the C
    level, where a library's own handler is replaced. Outside the main thread, and for a
    signal whose handler was not set from Python, nothing changes.

    Under :func:`terminate_raises`, a ``SystemExit`` out of the block is raised as
    :class:`Terminated`: it is what the handlers such code installs (Ray's) raise when
    SIGTERM arrives meanwhile."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in signums}
    try:
        yield
    except SystemExit as exc:
        if previous.get(signal.SIGTERM) is _raise_terminated:
            raise Terminated(signal.SIGTERM) from exc
        raise
    finally:
        for signum, handler in previous.items():
            if handler is not None:
                signal.signal(signum, handler)
