"""State-map bytes (pure; no file I/O): one byte per message sequence number,
its ``MessageState``. The state map (``store.statemap``) keeps them in chunk
files ``<data>/state/<chunk:012d>.map``: a ``FileHeader`` (magic b"DQSM",
format version 1, base = chunk number, param = entries per chunk) padded to
``DATA_OFFSET`` (64) bytes, then the entries of seqs ``chunk * param`` on:

| offset      | size | type | meaning                                   |
|------------:|-----:|------|-------------------------------------------|
| 64 + i      | 1    | u8   | ``MessageState`` of seq ``chunk*param+i`` |

A never-written entry reads 0 (PENDING, or unknown if the seq was never used).
"""

from __future__ import annotations

import enum

__all__ = ["DATA_OFFSET", "MessageState"]

DATA_OFFSET = 64


class MessageState(enum.IntEnum):
    PENDING = 0
    CANCELLED = 1
    DELIVERED = 2
    RESCHEDULED = 3  # cancelled by a reschedule; a new message replaces it
