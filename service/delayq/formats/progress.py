"""PROGRESS (8) records: how far a master's timers have fired, in the replicated
log itself, so that a promoted replica resumes firing exactly there (pure; no
file I/O). One encoder, ``encode_progress``, one decoder, ``decode_progress``.
Format version 1 (the frame's, see ``frame``); no magic of its own.

A master writes one when its scan's resume point moves (at a checkpoint): every
message of a slot before ``scan_from_slot`` that was linked by then is delivered,
cancelled or rolled, and its DELIVER/CANCELS/ROLL record comes earlier in the log.
Little-endian, after the 12-byte frame:

| offset | size | type | meaning                                          |
|-------:|-----:|------|--------------------------------------------------|
| 12     | 8    | i64  | scan_from_slot: the first slot not all released  |
| 20     | 8    | i64  | written_ms: the master's clock when written      |
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from ..errors import CorruptData
from .frame import FRAME, Buffer, RecordType, frame, open_record

__all__ = ["Progress", "decode_progress", "encode_progress"]

_PROGRESS = struct.Struct("<qq")


class Progress(NamedTuple):
    scan_from_slot: int
    written_ms: int


def encode_progress(scan_from_slot: int, written_ms: int) -> bytes:
    return frame(RecordType.PROGRESS, _PROGRESS.pack(scan_from_slot, written_ms))


def decode_progress(data: Buffer, offset: int = 0) -> tuple[Progress, int]:
    """The PROGRESS record at ``offset`` and its length; ``CorruptData`` if it is not one."""
    length = open_record(data, offset, RecordType.PROGRESS)
    if length != FRAME + _PROGRESS.size:
        raise CorruptData(f"PROGRESS record of {length} bytes, not {FRAME + _PROGRESS.size}")
    return Progress(*_PROGRESS.unpack_from(data, offset + FRAME)), length
