"""The TimerLog: fixed 64-byte records, one per (message, wheel slot), each
pointing at the previous record of the same slot, so that every slot is a
linked list threaded through one append-only file. Files: ``<data>/timerlog/``
(segment magic b"DQTL").

| offset | size | type | meaning                                                  |
|-------:|-----:|------|----------------------------------------------------------|
| 0      | 4    | u32  | magic 0x544C5251                                         |
| 4      | 4    | u32  | check of bytes [8, 64) (see `fixedrecord`)               |
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

Records are written before the wheel slot that points at them, so a crash can
leave an unreferenced record (trimmed or re-linked on recovery), never a slot
pointing at nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from ..errors import CorruptData
from .fixedrecord import FixedCodec
from .segments import LogView

__all__ = ["TIMER_RECORD_SIZE", "TimerLog", "TimerRecord"]

MAGIC = b"DQTL"
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
_SCAN_RECORDS = 16384


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


class TimerLog(LogView):
    magic, what = MAGIC, "timerlog"

    def read(self, pos: int) -> TimerRecord:
        data = self.log.read(pos, TIMER_RECORD_SIZE)
        if len(data) != TIMER_RECORD_SIZE:
            raise CorruptData(f"timerlog: no record at {pos}")
        return decode_timer(data)

    def scan(self, start: int) -> Iterator[tuple[int, TimerRecord]]:
        """Yield (position, record) from ``start``; stop at the first invalid record
        and leave its position in ``valid_end``."""
        for seg, first in self.spans(start):
            pos = first
            while pos < seg.end:
                chunk = self.log.read(pos, _SCAN_RECORDS * TIMER_RECORD_SIZE)
                count = len(chunk) // TIMER_RECORD_SIZE
                good = CODEC.check_many(chunk, count)  # checked a block at a time
                rows = np.frombuffer(chunk, dtype=RECORD_DTYPE, count=good)
                fields = rows[list(TimerRecord._fields)].tolist()
                for i, values in enumerate(fields):
                    yield pos + i * TIMER_RECORD_SIZE, TimerRecord(*values)
                    self.valid_end = pos + (i + 1) * TIMER_RECORD_SIZE
                if good < count or count == 0:
                    return
                pos += count * TIMER_RECORD_SIZE
