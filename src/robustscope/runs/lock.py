"""One run per folder: an operating-system lock on ``<run folder>/run.lock``.

The lock is an advisory ``flock`` held on an open file for the life of the run. The kernel
releases it when the process ends in any way (an exception, SIGKILL, a crash), so a lock
left by a killed run is never in the way: the file stays, with the dead process's id in it,
and the next run takes it over. A second run on a folder whose lock is held stops at once,
naming the process that holds it.

The file is not deleted on release: deleting a lock file that another process may be
opening at that moment would let two processes lock two different files of the same name.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from robustscope.core.errors import InputError

log = logging.getLogger(__name__)

#: The lock file's name in a run folder.
LOCK = "run.lock"


class FolderInUse(InputError):
    """Another live process holds the run folder's lock."""


def _try_lock(fd: int) -> bool:
    """Take an exclusive lock on ``fd`` without waiting; False when another process has it."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _holder(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 64).decode(errors="replace").strip()
    return text or "unknown"


@contextlib.contextmanager
def run_folder_lock(out_dir: Path) -> Iterator[None]:
    """Hold ``out_dir/run.lock`` (the folder is created if needed) while the block runs.

    Raises :class:`FolderInUse` (an :class:`InputError`: ``run folder … is in use by process
    N``) when a live process holds it. The lock's file descriptor is not inherited by
    programs the run starts (``O_CLOEXEC``); worker processes are started with ``spawn``
    (see :mod:`robustscope.runs.backends`), so they never hold it."""
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(out_dir / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise InputError(f"cannot lock the run folder {out_dir} ({exc.strerror or exc})"
                         ) from exc
    try:
        if not _try_lock(fd):
            raise FolderInUse(f"run folder {out_dir} is in use by process {_holder(fd)} "
                              "(another robustscope run); wait for it to end or use another "
                              "--out-dir")
        previous = _holder(fd)
        if previous != "unknown" and previous != str(os.getpid()):
            log.info("took over the lock of %s left by process %s, which has ended",
                     out_dir, previous)
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)  # releases the lock
