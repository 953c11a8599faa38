"""Where a results store lives: a file path or a database URL, told apart without importing
the store's database libraries (the spec and the command line read locations too)."""

from __future__ import annotations

import re
from pathlib import Path

_URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
#: ``scheme://user:password@``: the password part of a URL.
_PASSWORD_RE = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*):[^@/\s]*@")


def is_store_url(location: str | Path) -> bool:
    """True when ``location`` is a database URL (``scheme://...``) rather than a file path."""
    return isinstance(location, str) and bool(_URL_RE.match(location))


def hide_password(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@host`` URL in it replaced
    by ``***`` (for manifests, reports and messages)."""
    return _PASSWORD_RE.sub(r"\g<head>:***@", text)
