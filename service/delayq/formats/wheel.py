"""TimerWheel slot entries (pure; no file I/O): the wheel file
(``store.wheel``, ``<data>/timerwheel``) is a ``FileHeader`` (magic b"DQTW",
format version 1, base = number of slots, param = precision_ms) padded to
``DATA_OFFSET`` (64) bytes, then one 32-byte entry per slot index. Slot ``s``
is stored at index ``s % slots``; an entry whose stored slot number is not the
one asked for belongs to another lap and reads as empty.

Entries are read and written in place through the file's map: ``SLOT`` packs
and unpacks one, ``SLOT_DTYPE`` views them all; ``EMPTY`` is a never-used entry.
Little-endian:

| offset | size | type | meaning                                   |
|-------:|-----:|------|-------------------------------------------|
| 0      | 8    | i64  | slot number (time // precision), -1 empty |
| 8      | 8    | i64  | first TimerLog position of the slot       |
| 16     | 8    | i64  | last TimerLog position (chain head)       |
| 24     | 4    | u32  | num: records in the slot                  |
| 28     | 4    | u32  | magic 0x534C4F54 (0 in an empty entry)    |
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

__all__ = ["DATA_OFFSET", "EMPTY", "SLOT", "SLOT_DTYPE", "SLOT_MAGIC", "SLOT_NUM", "SlotEntry"]

SLOT = struct.Struct("<qqqII")
SLOT_NUM = struct.Struct("<q16xI")  # slot number and num only
SLOT_DTYPE = np.dtype(
    [("slot", "<i8"), ("first", "<i8"), ("last", "<i8"), ("num", "<u4"), ("magic", "<u4")]
)
assert SLOT_DTYPE.itemsize == SLOT.size
SLOT_MAGIC = 0x534C4F54
DATA_OFFSET = 64
EMPTY = SLOT.pack(-1, -1, -1, 0, 0)


class SlotEntry(NamedTuple):
    first: int
    last: int
    num: int
