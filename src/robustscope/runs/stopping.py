"""Stopping a run from outside: SIGINT (Ctrl-C) and SIGTERM end it cleanly.

Python turns SIGINT into :class:`KeyboardInterrupt`; :func:`terminate_raises` turns SIGTERM
into :class:`Terminated` the same way, so that both unwind the run: the backend ends its
worker processes, the store is closed, and the finished shards (each written atomically,
journalled with an fsync) stay on disk for ``robustscope run SPEC --resume DIR``.
:class:`RunInterrupted` is what the run raises then: the signal and the exact command that
resumes it.
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
