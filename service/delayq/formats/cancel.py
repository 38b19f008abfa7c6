"""CANCELS (7) records, and the CANCEL (2) records delayq wrote before them (pure;
no file I/O). Format version 1 (the frame's, see ``frame``); no magic of its own.

CANCELS: the cancels of one call in one record (one CRC for all). One encoder,
``encode_cancels`` (any number of entries), one decoder, ``decode_cancels``.
Little-endian, after the 12-byte frame:

| offset   | size | type | meaning                                        |
|---------:|-----:|------|------------------------------------------------|
| 12       | 8    | i64  | cancelled_ms                                   |
| 20       | 4    | u32  | count N                                        |
| 24       | 4    | u32  | forward_to: 0 a cancel; 1 + T a rebalance's    |
|          |      |      | release of the messages to shard T (FORWARDED) |
| 28+32*i  | 8    | u64  | entry i: seq of the cancelled message          |
| 36+32*i  | 8    | i64  | entry i: target_pos (its SCHEDULE's position)  |
| 44+32*i  | 4    | u32  | entry i: topic_id                              |
| 48+32*i  | 4    | u32  | entry i: reserved, 0                           |
| 52+32*i  | 8    | i64  | entry i: deliver_at_ms of the cancelled message |

CANCEL: one cancel per record; read (``decode_cancel``), no longer written:

| offset | size | type | meaning        |
|-------:|-----:|------|----------------|
| 12     | 8    | u64  | seq            |
| 20     | 8    | i64  | target_pos     |
| 28     | 4    | u32  | topic_id       |
| 32     | 8    | i64  | cancelled_ms   |
| 40     | 8    | i64  | deliver_at_ms  |
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

from ..batchops import FEW
from ..errors import CorruptData
from .frame import FRAME, Buffer, RecordType, frame, open_record

__all__ = ["Cancel", "Cancels", "decode_cancel", "decode_cancels", "encode_cancels"]

_CANCEL = struct.Struct("<QqIqq")
_CANCELS_HEAD = struct.Struct("<qII")  # cancelled_ms, count, forward_to
_CANCELS_ENTRY = struct.Struct("<QqIIq")
_CANCELS_DTYPE = np.dtype(
    [
        ("seq", "<u8"),
        ("target_pos", "<i8"),
        ("topic_id", "<u4"),
        ("reserved", "<u4"),
        ("deliver_at_ms", "<i8"),
    ]
)
assert _CANCELS_DTYPE.itemsize == _CANCELS_ENTRY.size


class Cancel(NamedTuple):
    seq: int
    target_pos: int
    topic_id: int
    cancelled_ms: int
    deliver_at_ms: int


class Cancels(NamedTuple):
    """A CANCELS record: entry i cancels message ``seq[i]`` at ``target_pos[i]``."""

    cancelled_ms: int
    seq: tuple[int, ...]
    target_pos: tuple[int, ...]
    topic_id: tuple[int, ...]
    deliver_at_ms: tuple[int, ...]
    forward_to: int = 0  # 1 + the shard a release forwarded them to; 0: cancelled

    @property
    def target(self) -> int | None:
        """The shard the messages were forwarded to; None for a cancel."""
        return self.forward_to - 1 if self.forward_to else None


def encode_cancels(
    seq: np.ndarray,
    target_pos: np.ndarray,
    topic_id: np.ndarray,
    cancelled_ms: int,
    deliver_at_ms: np.ndarray,
    forward_to: int = 0,
) -> bytes:
    """One CANCELS record for many cancels (or, ``forward_to`` = 1 + T, for the
    release of many messages to shard T): a few entries packed one by one, more as
    one array; the same bytes either way."""
    n = len(seq)
    if n < FEW:
        cols = (seq, target_pos, topic_id, deliver_at_ms)
        rows = zip(*(c.tolist() for c in cols), strict=True)
        entries = b"".join(_CANCELS_ENTRY.pack(s, pos, t, 0, due) for s, pos, t, due in rows)
    else:
        table = np.zeros(n, dtype=_CANCELS_DTYPE)
        table["seq"], table["target_pos"] = seq, target_pos
        table["topic_id"], table["deliver_at_ms"] = topic_id, deliver_at_ms
        entries = table.tobytes()
    return frame(RecordType.CANCELS, _CANCELS_HEAD.pack(cancelled_ms, n, forward_to) + entries)


def decode_cancels(data: Buffer, offset: int = 0) -> tuple[Cancels, int]:
    """The CANCELS record at ``offset`` and its length; ``CorruptData`` if it is not one."""
    length = open_record(data, offset, RecordType.CANCELS)
    try:
        cancelled_ms, n, forward_to = _CANCELS_HEAD.unpack_from(data, offset + FRAME)
    except struct.error as exc:
        raise CorruptData(f"malformed CANCELS record: {exc}") from exc
    first = offset + FRAME + _CANCELS_HEAD.size
    if offset + length - first != n * _CANCELS_ENTRY.size:
        raise CorruptData(
            f"CANCELS record of {n} entries has {offset + length - first} bytes for them"
        )
    table = np.frombuffer(data, dtype=_CANCELS_DTYPE, count=n, offset=first)
    names = ("seq", "target_pos", "topic_id", "deliver_at_ms")
    seq, target_pos, topic_id, due = (tuple(table[c].tolist()) for c in names)
    return Cancels(cancelled_ms, seq, target_pos, topic_id, due, forward_to), length


def decode_cancel(data: Buffer, offset: int = 0) -> tuple[Cancel, int]:
    """The (old) CANCEL record at ``offset`` and its length."""
    length = open_record(data, offset, RecordType.CANCEL)
    try:
        return Cancel(*_CANCEL.unpack_from(data, offset + FRAME)), length
    except struct.error as exc:
        raise CorruptData(f"malformed CANCEL record: {exc}") from exc
