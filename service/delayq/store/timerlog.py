"""The TimerLog: an append-only log of fixed 64-byte records (``formats.timer``),
one per (message, wheel slot), each pointing at the previous record of the same
slot, so that every slot is a linked list threaded through one file. Files:
``<data>/timerlog/`` (segment magic b"DQTL").

Records are written before the wheel slot that points at them, so a crash can
leave an unreferenced record (trimmed or re-linked on recovery), never a slot
pointing at nothing.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..errors import CorruptData
from ..formats.timer import CODEC, RECORD_DTYPE, TIMER_RECORD_SIZE, TimerRecord, decode_timer
from .logview import LogView

__all__ = ["TimerLog"]

MAGIC = b"DQTL"
_SCAN_RECORDS = 16384


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
