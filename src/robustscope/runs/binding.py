"""What binds a run to its inputs: the content hashes of the files it reads, the spec it was
planned with and the robustscope version that planned it.

A run's plan (``plan.json``) records :func:`input_identity` when the run starts; a resume
compares it with the inputs as they are now (:func:`what_changed`) and refuses to go on when
anything differs, so a finished run never holds radii of two models or two datasets.
Files are hashed in chunks of :data:`CHUNK` bytes (memory does not grow with the file); a
folder (a model saved as a directory) is hashed over its files in name order.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
from importlib import metadata
from pathlib import Path

from robustscope.core.errors import InputError

#: Bytes read at a time while hashing a file.
CHUNK = 1 << 20

#: Keys of the spec that may change between a run and its resumption: where and on how many
#: workers it runs, and where it writes its folder.
FREE_KEYS = ("execution.backend", "execution.workers", "execution.address", "outputs.dir")


def file_digest(path: Path) -> str:
    """``sha256:<hex>`` of the file (or of a folder's files: names and contents, in name
    order) at ``path``."""
    digest = hashlib.sha256()
    if path.is_dir():
        for item in sorted(p for p in path.rglob("*") if p.is_file()):
            digest.update(str(item.relative_to(path)).encode() + b"\0")
            _update(digest, item)
    else:
        _update(digest, path)
    return f"sha256:{digest.hexdigest()}"


def _update(digest, path: Path) -> None:
    with open(path, "rb") as fh:
        while block := fh.read(CHUNK):
            digest.update(block)


def spec_document(spec) -> dict:
    """The spec as plain JSON values, without the keys of :data:`FREE_KEYS`."""
    doc = json.loads(spec.model_dump_json())
    for key in FREE_KEYS:
        section, _, name = key.partition(".")
        doc.get(section, {}).pop(name, None)
    return doc


@functools.cache
def installed_version() -> str:
    """The installed robustscope's version (``0+unknown`` from a source tree that is not
    installed)."""
    try:
        return metadata.version("robustscope")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def input_files(spec) -> dict[str, Path]:
    """The files a run of ``spec`` reads its model and data from, by their spec key (paths
    resolved; built-in models and data have none)."""
    files = {"model.path": spec.model.path, "data.path": spec.data.path,
             "data.reference": spec.data.reference,
             "features.file": spec.features.file if spec.features is not None else None}
    return {key: Path(str(path)) for key, path in files.items() if path is not None}


def input_identity(spec, n: int | None = None) -> dict:
    """What a run of ``spec`` on ``n`` inputs is bound to: ``robustscope`` (the version),
    ``spec`` (:func:`spec_document`), ``n`` (set it once the data is loaded when not known
    yet), and ``files``: spec key -> ``{"path", "sha256"}`` of every input file. A file that
    cannot be read (or is not a regular file or folder) is an :class:`InputError` naming its
    key."""
    files = {}
    for key, path in input_files(spec).items():
        try:
            if not path.is_dir() and not stat.S_ISREG(os.stat(path).st_mode):
                raise InputError(f"{key} {path}: not a regular file")
            files[key] = {"path": str(path), "sha256": file_digest(path)}
        except OSError as exc:
            raise InputError(f"{key} {path}: cannot read it ({exc.strerror or exc})") from exc
    return {"robustscope": installed_version(), "spec": spec_document(spec), "n": n, "files": files}


def what_changed(recorded: dict | None, now: dict) -> str | None:
    """One phrase naming the first difference between a run's recorded identity and the
    inputs ``now`` (:func:`input_identity`), or ``None`` when they agree. A plan without a
    record (written by an older robustscope) differs in its version."""
    if not recorded:
        return f"it was planned by an older robustscope (this is {now['robustscope']})"
    if recorded.get("robustscope") != now["robustscope"]:
        return (f"it was planned by robustscope {recorded.get('robustscope')} "
                f"(this is {now['robustscope']})")
    keys = changed_keys(recorded.get("spec", {}), now["spec"])
    if keys:
        shown = ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
        return f"the spec changed ({shown})"
    if recorded.get("n") != now["n"]:
        return f"the data has {now['n']} inputs, the run {recorded.get('n')}"
    before, after = recorded.get("files", {}), now["files"]
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        if old is None or new is None:
            return f"{key} was {'added' if old is None else 'removed'}"
        if old["sha256"] != new["sha256"]:
            moved = "" if old["path"] == new["path"] else f" (was {old['path']})"
            return f"{key} {new['path']}{moved} has other contents than when the run started"
    return None


def changed_keys(before: object, after: object, prefix: str = "") -> list[str]:
    """Dotted keys at which two JSON documents differ (a list's items by index)."""
    if isinstance(before, dict) and isinstance(after, dict):
        out: list[str] = []
        for key in sorted(set(before) | set(after), key=str):
            out += changed_keys(before.get(key), after.get(key), f"{prefix}{key}.")
        return out
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        out = []
        for i, (a, b) in enumerate(zip(before, after, strict=True)):
            out += changed_keys(a, b, f"{prefix.rstrip('.')}[{i}].")
        return out
    return [] if before == after else [prefix.rstrip(".")]
