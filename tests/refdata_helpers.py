"""The published MultiRobustBench figures that ship inside the package (``robustscope/refdata``,
see its README), opened through :mod:`importlib.resources` as the installed package holds them.

Tests never read ``../shared``: a clean clone (or an installed wheel) has everything they need.
"""

from __future__ import annotations

import atexit
import csv
import json
from contextlib import ExitStack
from functools import cache
from importlib import resources
from pathlib import Path

#: Files of ``robustscope/refdata`` the tests use.
ACC_STAR = "acc_star_cifar10.json"
DEFENCES = "defences.json"
LEADERBOARD = "leaderboard.csv"

_OPEN_FILES = ExitStack()
atexit.register(_OPEN_FILES.close)


def refdata_text(name: str) -> str:
    """The text of package data file ``robustscope/refdata/<name>``."""
    return resources.files("robustscope").joinpath("refdata", name).read_text(encoding="utf-8")


@cache
def refdata_path(name: str) -> Path:
    """A file-system path of ``robustscope/refdata/<name>``, for APIs that take a path.

    The package's own file where it lies on disk; a temporary copy, kept until the interpreter
    exits, where the package is imported from an archive."""
    resource = resources.files("robustscope").joinpath("refdata", name)
    if not resource.is_file():
        raise FileNotFoundError(f"robustscope/refdata/{name}: not shipped with the package")
    return _OPEN_FILES.enter_context(resources.as_file(resource))


def refdata_json(name: str) -> dict:
    """``robustscope/refdata/<name>`` parsed as JSON (a fresh object on each call)."""
    return json.loads(refdata_text(name))


def leaderboard_rows() -> list[dict[str, str]]:
    """The rows of the published ``leaderboard.csv``: one dict per defence, values as text."""
    return list(csv.DictReader(refdata_text(LEADERBOARD).splitlines()))
