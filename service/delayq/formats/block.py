"""BLOCK (9) and LOADED (10) records: compaction blocks of far-future messages
(pure: bytes in, bytes out; no file I/O). Format version 1 (the frame's, see
``frame``); no magic of their own. One encoder and one decoder each:
``encode_block`` / ``decode_block``, ``encode_loaded`` / ``decode_loaded``.

A BLOCK record takes pending messages due in ``[start_ms, end_ms)`` out of the
roll cycle (``timers.compaction.loading``). It carries, end to end, the ROLL record
(``message``) each message gets when its block loads: written once here, and
appended to the CommitLog as it is (frame and CRC) at the load, so a load
encodes nothing. Each copy's ``origin_pos`` is the message's SCHEDULE position
(its id) and its ``roll_count`` one more than the rolls it had. Little-endian,
after the 12-byte frame:

| offset | size | type | meaning                                           |
|-------:|-----:|------|---------------------------------------------------|
| 12     | 8    | i64  | start_ms: the block's first ms                    |
| 20     | 8    | i64  | end_ms: the ms after its last                     |
| 28     | 8    | i64  | written_ms                                        |
| 36     | 4    | u32  | count N of the ROLL records that follow           |
| 40     | 2    | u16  | job length J                                      |
| 42     | 2    | u16  | reserved, 0                                       |
| 44     | J    |      | job: the compaction job that sent it (utf-8)      |
| 44+J   | rest |      | N ROLL records, end to end (``copies``)           |

A LOADED record says a block's every message still blocked was loaded (its ROLL
copies come before it in the log): the block's file may go.

| offset | size | type | meaning                                   |
|-------:|-----:|------|-------------------------------------------|
| 12     | 8    | i64  | start_ms: the block loaded                |
| 20     | 8    | i64  | written_ms                                |
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

from ..batchops import rows_at
from ..errors import CorruptData
from .frame import FRAME, Buffer, RecordType, frame, frame_length, open_record, record_starts
from .message import MESSAGE_DTYPE

__all__ = ["Block", "Loaded", "decode_block", "decode_loaded", "encode_block", "encode_loaded"]

_BLOCK = struct.Struct("<qqqIHH")
_LOADED = struct.Struct("<qq")
_ROLL = int(RecordType.ROLL)


class Block(NamedTuple):
    """A BLOCK record: ``copies`` holds its ``count`` ROLL records end to end, at
    ``offsets`` (``heads``: their fixed parts, CRCs not checked here)."""

    start_ms: int
    end_ms: int
    written_ms: int
    job: str
    copies: bytes
    offsets: np.ndarray
    heads: np.ndarray


class Loaded(NamedTuple):
    start_ms: int
    written_ms: int


def encode_block(
    start_ms: int, end_ms: int, written_ms: int, job: str, copies: Buffer, count: int
) -> bytes:
    """One BLOCK record of ``count`` ROLL records (``copies``, end to end)."""
    name = job.encode()
    head = _BLOCK.pack(start_ms, end_ms, written_ms, count, len(name), 0)
    return frame(RecordType.BLOCK, b"".join((head, name, bytes(copies))))


def decode_block(data: Buffer, offset: int = 0) -> tuple[Block, int]:
    """The BLOCK record at ``offset`` and its length; ``CorruptData`` if it is not
    one, or its copies are not ``count`` ROLL records filling it exactly."""
    length = open_record(data, offset, RecordType.BLOCK)
    try:
        start, end, written, count, jlen, _ = _BLOCK.unpack_from(data, offset + FRAME)
    except struct.error as exc:
        raise CorruptData(f"malformed BLOCK record: {exc}") from exc
    first = offset + FRAME + _BLOCK.size + jlen
    if first > offset + length:
        raise CorruptData("BLOCK record: job name exceeds the record")
    try:
        job = bytes(data[first - jlen : first]).decode()
    except UnicodeDecodeError as exc:
        raise CorruptData(f"BLOCK record: malformed job name: {exc}") from exc
    copies = bytes(data[first : offset + length])
    offsets = record_starts(copies, 0)
    ends = int(offsets[-1]) + frame_length(copies, int(offsets[-1])) if len(offsets) else 0
    if len(offsets) != count or ends != len(copies):
        raise CorruptData(f"BLOCK record: {count} copies announced; they do not fill it")
    fits = offsets + MESSAGE_DTYPE.itemsize <= len(copies)
    if not fits.all():
        raise CorruptData("BLOCK record: a copy is cut short")
    heads = rows_at(copies, offsets, MESSAGE_DTYPE)
    if not (heads["type"] == _ROLL).all():
        raise CorruptData("BLOCK record: a copy is not a ROLL record")
    return Block(start, end, written, job, copies, offsets, heads), length


def encode_loaded(start_ms: int, written_ms: int) -> bytes:
    return frame(RecordType.LOADED, _LOADED.pack(start_ms, written_ms))


def decode_loaded(data: Buffer, offset: int = 0) -> tuple[Loaded, int]:
    """The LOADED record at ``offset`` and its length; ``CorruptData`` if it is not one."""
    length = open_record(data, offset, RecordType.LOADED)
    if length != FRAME + _LOADED.size:
        raise CorruptData(f"LOADED record of {length} bytes, not {FRAME + _LOADED.size}")
    return Loaded(*_LOADED.unpack_from(data, offset + FRAME)), length
