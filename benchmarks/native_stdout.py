"""Keep a benchmark's markdown on stdout when native libraries print there too.

HiGHS's C++ code writes some messages straight to file descriptor 1, past Python's
``sys.stdout``: a line from its MIP solver once landed in the middle of a table of
``benchmarks/results/certified.md``. :func:`markdown_only` points descriptor 1 at stderr
(the progress log of ``regenerate.py``) and rebinds ``sys.stdout`` to a copy of the original
descriptor, so that ``print`` still reaches the report and native chatter does not.
"""

from __future__ import annotations

import os
import sys


def markdown_only() -> None:
    """From now on, only Python's ``print`` reaches the process's standard output."""
    sys.stdout.flush()
    kept = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = os.fdopen(kept, "w", buffering=1)
