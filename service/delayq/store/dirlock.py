"""The data directory's lock, ``<data>/LOCK``: ``flock``ed (exclusive, never
waited for) by whoever opens the directory, a server's engine or ``delayq
verify``, for as long as it is open. The file holds nothing; closing the
descriptor (or the process ending, however it ends) lets go.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from .datadir import LOCK

__all__ = ["LOCK_FILE", "hold"]

LOCK_FILE = LOCK


def hold(directory: Path, *, read_only_ok: bool = False) -> int:
    """Lock ``directory`` and return the lock's descriptor. Raises BlockingIOError
    when another process holds it, and OSError when the file cannot be opened
    (``read_only_ok``: a directory where it cannot be made is opened read-only,
    for a check that writes nothing)."""
    path = directory / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        if not read_only_ok:
            raise
        fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:
        os.close(fd)
        raise
    return fd
