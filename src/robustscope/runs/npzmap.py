"""Memory-mapped arrays of an *uncompressed* ``.npz`` (``np.savez``, not ``savez_compressed``).

``np.load(path, mmap_mode="r")`` memory-maps ``.npy`` files but reads every member of an
``.npz`` into memory. An uncompressed ``.npz`` is a zip whose members are plain ``.npy``
files stored as they are, so each member can be mapped at its offset in the zip: rows are
then read from disk only when a shard touches them, and a million inputs cost no memory
until used.
"""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import numpy as np

_LOCAL_HEADER = struct.Struct("<4s5H3L2H")  # the zip local file header (30 bytes)


def mmap_npz(path: str | Path) -> dict[str, np.ndarray] | None:
    """Every array of the ``.npz`` at ``path`` as a read-only ``np.memmap``, or ``None`` when
    the archive cannot be mapped (a compressed member, an object array)."""
    path = Path(path)
    out: dict[str, np.ndarray] = {}
    with zipfile.ZipFile(path) as zf, open(path, "rb") as fh:
        for info in zf.infolist():
            if info.compress_type != zipfile.ZIP_STORED or not info.filename.endswith(".npy"):
                return None
            fh.seek(info.header_offset)
            head = _LOCAL_HEADER.unpack(fh.read(_LOCAL_HEADER.size))
            name_len, extra_len = head[-2], head[-1]
            start = info.header_offset + _LOCAL_HEADER.size + name_len + extra_len
            fh.seek(start)
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
            if dtype.hasobject:
                return None
            offset = fh.tell()
            name = info.filename[:-4]
            if int(np.prod(shape)) == 0:
                out[name] = np.zeros(shape, dtype=dtype)
                continue
            out[name] = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape,
                                  order="F" if fortran else "C")
    return out
