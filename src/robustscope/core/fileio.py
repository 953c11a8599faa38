"""Writing files so that a failure or a kill never leaves one half-written."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path


def atomic_write(path: str | Path, write: Callable[[Path], None], durable: bool = False) -> None:
    """Call ``write(tmp)`` on a temporary file beside ``path``, then rename it to ``path``.

    The rename is atomic, so readers see the old file or the whole new one. With ``durable``
    the data is also flushed to disk (fsync) before the rename, so that it survives a crash
    of the machine, not only of the process (checkpoints need this).
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        if durable:
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
        tmp.replace(path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
