"""Creating a data file atomically: a kill or power loss at any moment leaves
either no file under its name or the whole initial file (header and fill).
(Files replaced whole, like the checkpoint, use ``delayq.atomicfile``.)

The file is built under ``<name>.new`` in the same directory, fsynced, renamed
into place, and the directory fsynced. A ``.new`` left by a kill is never read
(every reader globs its own suffix) and is overwritten by the next creation of
the same name.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from ..atomicfile import publish
from .datafile import write_at

__all__ = ["create_file"]


def create_file(
    path: Path, header: bytes, *, size: int = 0, fill: bytes = b"", mode: int = 0o644
) -> int:
    """Create ``path`` holding ``header`` then ``fill``, zero-extended to ``size``
    bytes if that is longer, with permissions ``mode``; return a read-write
    descriptor of it."""
    building = path.with_name(path.name + ".new")
    fd = os.open(building, os.O_RDWR | os.O_CREAT | os.O_TRUNC, mode)
    try:
        if mode != 0o644:  # a kill's leftover .new keeps the mode it was made with
            os.fchmod(fd, mode)
        data = header + fill
        if size > len(data):
            os.ftruncate(fd, size)
        write_at(fd, data, 0)
        os.fsync(fd)
        publish(building, path)
    except BaseException:
        os.close(fd)
        # a part-built file (a full disk, say) gives its space back
        with contextlib.suppress(OSError):
            os.unlink(building)
        raise
    return fd
