"""What a shard's data directory takes on disk, by kind of file, and what its
volume has left: read at scrape time (a directory walk and one ``statvfs``),
never on a write path.

Bytes are those allocated (``st_blocks``), not file sizes: preallocated and
punched-out files take what the disk says they take. Kinds are the directory's
entries (``datadir``): ``commitlog``, ``timerlog``, ``timerwheel``, ``state``,
``blocks``, ``ready``; every other file counts as ``other``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from .datadir import BLOCKS, COMMITLOG, READY, STATE, TIMERLOG, TIMERWHEEL

__all__ = ["KINDS", "Volume", "usage", "volume"]

KINDS = (COMMITLOG, TIMERLOG, TIMERWHEEL, STATE, BLOCKS, READY, "other")


class Volume(NamedTuple):
    free_bytes: int
    """Free to an unprivileged writer (``f_bavail``)."""
    size_bytes: int


def _allocated(entry: os.DirEntry[str]) -> int:
    """Bytes allocated under ``entry`` (a file, or a directory walked whole); what
    vanishes or cannot be read while walking (a segment retention deletes) counts 0."""
    try:
        if not entry.is_dir(follow_symlinks=False):
            return entry.stat(follow_symlinks=False).st_blocks * 512
        with os.scandir(entry.path) as entries:
            return sum(_allocated(e) for e in entries)
    except OSError:
        return 0


def usage(data_dir: Path) -> dict[str, int]:
    """Bytes allocated per kind (every kind present, 0 when it has no files)."""
    out = dict.fromkeys(KINDS, 0)
    try:
        with os.scandir(data_dir) as entries:
            for entry in entries:
                kind = entry.name if entry.name in out else "other"
                out[kind] += _allocated(entry)
    except OSError:  # no directory (yet), or not readable: nothing counted
        pass
    return out


def volume(data_dir: Path) -> Volume:
    """Free and total bytes of the file system ``data_dir`` is on."""
    st = os.statvfs(data_dir)
    return Volume(st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize)
