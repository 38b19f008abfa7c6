"""TimerLog records (pure; no file I/O): fixed 64 bytes, one per (message, wheel
slot), each pointing at the previous record of the same slot, so that every
slot is a linked list threaded through one append-only file (``store.timerlog``,
segment files with magic b"DQTL", format version 1 in their ``FileHeader``).

A ``fixedrecord`` codec: record magic 0x544C5251, a weighted-sum check of
bytes [8, 64). One encoder, ``encode_many`` (an array of ``RECORD_DTYPE``; one
record, ``TimerRecord.encode``, is a batch of one), one decoder,
``decode_timer`` (batches are checked with ``CODEC.valid``/``check_many`` and
viewed as ``RECORD_DTYPE``). Little-endian:

| offset | size | type | meaning                                                  |
|-------:|-----:|------|----------------------------------------------------------|
| 0      | 4    | u32  | magic 0x544C5251                                         |
| 4      | 4    | u32  | check of bytes [8, 64) (see ``fixedrecord``)             |
| 8      | 8    | i64  | prev: TimerLog position of the slot's previous record, -1 |
| 16     | 8    | i64  | slot number this record is chained in                    |
| 24     | 8    | i64  | cl_pos: CommitLog position of the record with the body   |
| 32     | 4    | u32  | cl_size: its length                                      |
| 36     | 4    | u32  | topic_id                                                 |
| 40     | 8    | i64  | deliver_at_ms (exact)                                    |
| 48     | 8    | u64  | seq (state map index)                                    |
| 56     | 4    | u32  | chain_index: records before this one in the slot         |
| 60     | 2    | u16  | roll_count                                               |
| 62     | 1    | u8   | kind: 0 normal, 1 roll (re-park when the slot fires)     |
| 63     | 1    | u8   | reserved                                                 |
"""

from __future__ import annotations

from typing import NamedTuple

from .fixedrecord import FixedCodec

__all__ = [
    "CODEC",
    "RECORD_DTYPE",
    "TIMER_RECORD_SIZE",
    "TimerRecord",
    "decode_timer",
    "encode_many",
]

CODEC = FixedCodec(
    0x544C5251,
    [
        ("prev", "q"),
        ("slot", "q"),
        ("cl_pos", "q"),
        ("cl_size", "I"),
        ("topic_id", "I"),
        ("deliver_at_ms", "q"),
        ("seq", "Q"),
        ("chain_index", "I"),
        ("roll_count", "H"),
        ("kind", "B"),
        ("reserved", "x"),
    ],
    "timerlog",
)
TIMER_RECORD_SIZE = CODEC.size
RECORD_DTYPE = CODEC.dtype
encode_many = CODEC.encode_many


class TimerRecord(NamedTuple):
    prev: int
    slot: int
    cl_pos: int
    cl_size: int
    topic_id: int
    deliver_at_ms: int
    seq: int
    chain_index: int
    roll_count: int
    kind: int

    def encode(self) -> bytes:
        return CODEC.encode(*self)


def decode_timer(data: bytes | memoryview, offset: int = 0) -> TimerRecord:
    return TimerRecord(*CODEC.decode(data, offset))
