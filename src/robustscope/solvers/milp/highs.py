"""One way to make a HiGHS solver object (``highspy.Highs``) for every exact solver.

The first ``highspy.Highs()`` of a process prints a banner on the C-level stdout before any
option can silence it; that first one is made with file descriptor 1 sent to /dev/null, so
that robustscope's own output (tables, JSON on stdout) stays clean.
"""

from __future__ import annotations

import os
import sys
import threading

_LOCK = threading.Lock()
_BANNER_DONE = False


def new_highs():
    """A fresh ``highspy.Highs`` instance, without the process's first banner."""
    global _BANNER_DONE
    import highspy

    if _BANNER_DONE:
        return highspy.Highs()
    with _LOCK:  # descriptor 1 is process-wide: one redirect at a time
        if _BANNER_DONE:
            return highspy.Highs()
        sys.stdout.flush()
        saved, devnull = os.dup(1), os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 1)
            h = highspy.Highs()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            os.close(devnull)
        _BANNER_DONE = True
        return h
