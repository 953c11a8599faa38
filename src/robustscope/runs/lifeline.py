"""Worker processes that die with the process that started them.

A pool worker blocked in a long shard does not notice that its parent is gone: killed with
``kill -9``, the parent cannot stop it, and the worker (hundreds of MB with torch loaded) and
the ``multiprocessing`` resource tracker, which waits for every holder of its pipe, would
run on. :func:`die_with_parent` is called first thing in each worker:

- on Linux, ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` asks the kernel to kill the worker when its
  parent exits, however it exits;
- everywhere, a daemon thread checks every ``poll_seconds`` whether the parent is still the
  process that started the worker (``os.getppid()`` changes when a process is orphaned) and
  ends the worker when it is not;
- the parent may have died before either was in place: that is checked once at start-up.

The worker also ignores SIGINT: a Ctrl-C in a terminal reaches the whole process group, and
it is the parent that decides how the run stops (it ends its workers itself).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading

#: ``PR_SET_PDEATHSIG`` of ``<linux/prctl.h>``.
PR_SET_PDEATHSIG = 1
#: Exit status of a worker that found its parent gone.
ORPHANED_EXIT = 70


def set_parent_death_signal(signum: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``signum`` to this process when its parent exits (Linux only).
    Returns whether it was set."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _orphaned(parent_pid: int) -> bool:
    return os.getppid() != parent_pid


def _watch(parent_pid: int, poll_seconds: float, stop: threading.Event) -> None:
    while not stop.wait(poll_seconds):
        if _orphaned(parent_pid):
            os._exit(ORPHANED_EXIT)  # no clean-up: the work belongs to a run that is gone


def die_with_parent(parent_pid: int, poll_seconds: float = 1.0) -> threading.Event:
    """Make this process end when ``parent_pid`` (the process that started it) ends: the
    parent-death signal where the OS has one, a watchdog thread polling every
    ``poll_seconds`` seconds everywhere. Exits at once (status :data:`ORPHANED_EXIT`) when
    the parent is already gone. Returns the event that stops the watchdog."""
    set_parent_death_signal()
    if _orphaned(parent_pid):
        os._exit(ORPHANED_EXIT)
    stop = threading.Event()
    threading.Thread(target=_watch, args=(parent_pid, poll_seconds, stop),
                     name="robustscope-lifeline", daemon=True).start()
    return stop


def ignore_interrupts() -> None:
    """Ignore SIGINT in this (worker) process: its parent handles Ctrl-C for the run."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
