"""Writing files: never half-written (:func:`atomic_write`), never over one of the command's
own inputs or over another output, and checked writable before any work starts
(:func:`check_outputs`)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from robustscope.core.errors import InputError


def atomic_write(path: str | Path, write: Callable[[Path], None], durable: bool = False) -> None:
    """Call ``write(tmp)`` on a temporary file beside ``path``, then rename it to ``path``.

    The rename is atomic, so readers see the old file or the whole new one. With ``durable``
    the data is also flushed to disk (fsync) before the rename, so that it survives a crash
    of the machine, not only of the process (checkpoints need this).
    """
    atomic_write_all([(path, write)], durable=durable)


def temporary_name(path: str | Path) -> Path:
    """The temporary file beside ``path`` that :func:`atomic_write` writes first: hidden,
    unique to this process, with ``path``'s extension (writers that choose a format by
    extension see the right one)."""
    path = Path(path)
    return path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")


def atomic_write_all(writes: Sequence[tuple[str | Path, Callable[[Path], None]]],
                     durable: bool = False) -> None:
    """Several files written together: every ``write(tmp)`` runs first, and only when all
    succeeded are the temporary files renamed to their paths. A failure in any writer leaves
    none of the files written (the old ones stay), so a command never leaves one output
    without the other."""
    pending = [(Path(path), temporary_name(path), write) for path, write in writes]
    try:
        for path, tmp, write in pending:
            try:
                write(tmp)
                if durable:
                    with open(tmp, "rb") as fh:
                        os.fsync(fh.fileno())
            except OSError as exc:  # name the file the user asked for, not the temporary
                # (a write to an open file, e.g. a full disk, raises without a file name)
                if exc.filename is not None and Path(exc.filename).name != tmp.name:
                    raise
                raise type(exc)(exc.errno, exc.strerror, str(path)) from exc
        for path, tmp, _ in pending:
            tmp.replace(path)
    finally:
        for _, tmp, _ in pending:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()


#: An output to check: (what the user called it, e.g. "--out"; its path or None; the
#: extensions it may have, or None for any).
OutputSpec = tuple[str, str | Path | None, Sequence[str] | None]


def same_path(a: str | Path, b: str | Path) -> bool:
    """Whether ``a`` and ``b`` name the same file: the same resolved path (links and ``..``
    followed), or, when both exist, the same inode (hard links)."""
    a, b = Path(a), Path(b)
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_writable_folder(what: str, folder: str | Path) -> None:
    """Raise :class:`InputError` unless files can be created in ``folder`` (which must exist
    and be a folder): it is tried, with a temporary file that is removed at once, since
    permission bits do not tell (root ignores them, read-only mounts do not show in them)."""
    folder = Path(folder)
    if not folder.exists():
        raise InputError(f"{what}: folder {folder} does not exist")
    if not folder.is_dir():
        raise InputError(f"{what}: {folder} is not a folder")
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".robustscope-probe-")
    except OSError as exc:
        raise InputError(f"{what}: cannot write in folder {folder} "
                         f"({exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(probe)


def check_outputs(outputs: Sequence[OutputSpec],
                  inputs: Mapping[str, str | Path | None] | None = None) -> None:
    """Check, before any work, every output file a command will write.

    ``outputs``: ``(name, path, extensions)`` per output (``path`` ``None``: not asked for);
    ``inputs``: name -> path of every file the command reads (``None`` entries ignored).
    Raises :class:`InputError` naming the option when an output has an extension outside
    ``extensions``, is a folder, lies in a folder that does not exist or cannot be written,
    is one of the inputs, or is the same file as another output."""
    given = [(what, Path(path), exts) for what, path, exts in outputs if path is not None]
    sources = [(what, Path(p)) for what, p in (inputs or {}).items() if p is not None]
    for i, (what, path, exts) in enumerate(given):
        for src_what, src in sources:
            if same_path(path, src):
                raise InputError(f"{what} {path}: is the {src_what} file, which this command "
                                 "reads; writing there would destroy it. Give another path")
        for other_what, other, _ in given[:i]:
            if same_path(path, other):
                raise InputError(f"{what} and {other_what} are the same file ({path}); give "
                                 "each output its own path")
        if exts is not None and path.suffix.lower() not in exts:
            raise InputError(f"{what} {path}: unknown extension '{path.suffix}'; use "
                             f"{' or '.join(exts)}")
        if path.is_dir():
            raise InputError(f"{what} {path}: is a folder; give a file name")
        check_writable_folder(what, path.parent)


def check_output_folder(what: str, folder: str | Path,
                        inputs: Mapping[str, str | Path | None] | None = None,
                        writes: Sequence[str] = ()) -> None:
    """Check, before any work, a folder a command writes its files into (created if
    missing): it is not a file, the folder or its nearest existing parent can be written,
    and none of ``inputs`` (name -> path) is one of the entries ``writes`` (names inside the
    folder: files, or subfolders that the command replaces) or lies below one of them.
    Raises :class:`InputError` naming the option."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise InputError(f"{what} {folder}: is a file, not a folder")
    existing = folder
    while not existing.exists():
        existing = existing.parent
    check_writable_folder(what, existing)
    for src_what, src in (inputs or {}).items():
        if src is None:
            continue
        for name in writes:
            target = folder / name
            if same_path(src, target) or Path(src).resolve().is_relative_to(target.resolve()):
                raise InputError(f"{what} {folder}: the command writes {target}, which is the "
                                 f"{src_what} file it reads; give another folder")
