"""Opening an existing data file: its header (and, if given, its size) checked
before anything reads it. A refused file is closed again at once, so a failed
open leaves no descriptor behind (see ``newfile`` for creating one). And the one
positioned write every file goes through (``write_at``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ..errors import CorruptData
from ..formats.fileheader import HEADER_SIZE, FileHeader

__all__ = ["open_data_file", "write_at"]


def write_at(fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
    """Write all of ``data`` at ``offset``. A regular file's write comes back short
    only when the disk fills part-way; the next write then raises (ENOSPC)."""
    view = memoryview(data)
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)


def open_data_file(
    path: Path,
    magic: bytes,
    what: str,
    *,
    size: int | None = None,
    check: Callable[[FileHeader], None] | None = None,
) -> tuple[int, FileHeader]:
    """A read-write descriptor of ``path`` and its header. Raises ``CorruptData``
    (``what`` names the file) for a bad header or a size other than ``size``;
    ``check(header)`` may refuse the file too."""
    fd = os.open(path, os.O_RDWR)
    try:
        header = FileHeader.decode(os.pread(fd, HEADER_SIZE, 0), magic, what)
        if check is not None:
            check(header)
        if size is not None and (got := os.fstat(fd).st_size) != size:
            raise CorruptData(f"{what}: {got} bytes, expected {size}")
    except BaseException:
        os.close(fd)
        raise
    return fd, header
