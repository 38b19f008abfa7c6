"""Ready-queue entries (pure; no file I/O): a topic's ready queue is an array of
these 48-byte entries, one per delivered message, in delivery order, after a
``FileHeader`` (magic b"DQRI", format version 1, base = topic id, param = entry
size) in ``<data>/ready/<topic_id>.idx`` (``store.readyindex``).

A ``fixedrecord`` codec: entry magic 0x52445949, a weighted-sum check of bytes
[8, 48). One encoder, ``CODEC.encode_many`` (an array of ``ENTRY_DTYPE``; one
entry, ``ReadyEntry.encode``, is a batch of one); entries are read as
``ENTRY_DTYPE`` rows after ``CODEC.check_many``. Little-endian:

| offset | size | type | meaning                                      |
|-------:|-----:|------|----------------------------------------------|
| 0      | 4    | u32  | magic 0x52445949                             |
| 4      | 4    | u32  | check of bytes [8, 48) (see ``fixedrecord``) |
| 8      | 8    | u64  | seq                                          |
| 16     | 8    | i64  | body_pos: CommitLog position of the body     |
| 24     | 4    | u32  | body_size                                    |
| 28     | 4    | u32  | reserved                                     |
| 32     | 8    | i64  | deliver_at_ms                                |
| 40     | 8    | i64  | delivered_ms                                 |
"""

from __future__ import annotations

from typing import NamedTuple

from .fixedrecord import FixedCodec

__all__ = ["CODEC", "ENTRY_DTYPE", "ENTRY_SIZE", "ReadyEntry"]

CODEC = FixedCodec(
    0x52445949,
    [
        ("seq", "Q"),
        ("body_pos", "q"),
        ("body_size", "I"),
        ("r0", "x"),
        ("r1", "x"),
        ("r2", "x"),
        ("r3", "x"),
        ("deliver_at_ms", "q"),
        ("delivered_ms", "q"),
    ],
    "ready index",
)
ENTRY_DTYPE = CODEC.dtype
ENTRY_SIZE = CODEC.size


class ReadyEntry(NamedTuple):
    seq: int
    body_pos: int
    body_size: int
    deliver_at_ms: int
    delivered_ms: int

    def encode(self) -> bytes:
        return CODEC.encode(*self)
