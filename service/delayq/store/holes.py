"""Giving a file's blocks back to the filesystem without moving its data: Linux
``fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)`` through ctypes (the os
module has no way to pass those flags).

The punched range reads back as zeros and the file keeps its size, so offsets
into it stay valid. Only whole filesystem blocks are freed: callers punch
page-aligned ranges. A filesystem that cannot punch holes just keeps its
blocks (``punch_hole`` returns False); nothing else changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os

__all__ = ["punch_hole"]

_PUNCH = 0x02 | 0x01  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE (linux/falloc.h)
_UNSUPPORTED = {errno.EOPNOTSUPP, errno.ENOSYS}

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_fallocate = _libc.fallocate
_fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
_fallocate.restype = ctypes.c_int


def punch_hole(fd: int, offset: int, length: int) -> bool:
    """Free the blocks of bytes [offset, offset + length) of ``fd``; False when the
    filesystem cannot. Raises OSError for any other failure."""
    if length <= 0:
        return True
    if _fallocate(fd, _PUNCH, offset, length) == 0:
        return True
    err = ctypes.get_errno()
    if err in _UNSUPPORTED:
        return False
    raise OSError(err, os.strerror(err))
