"""The release buffer: messages read from fired wheel slots, waiting for their
exact millisecond (pure; not thread-safe, the engine's lock guards it).

A heap ordered by (deliver_at_ms, seq), so a slot's messages come out in the
order of their own delivery time, none before it. It also counts its items
per wheel slot, so the checkpoint can say from which slot a restart must scan
again to find everything that was buffered but not yet delivered.
"""

from __future__ import annotations

import heapq
from typing import NamedTuple

__all__ = ["Due", "ReleaseBuffer"]


class Due(NamedTuple):
    deliver_at_ms: int
    seq: int
    cl_pos: int
    cl_size: int
    topic_id: int
    slot: int


class ReleaseBuffer:
    def __init__(self) -> None:
        self._heap: list[Due] = []
        self._per_slot: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, item: Due) -> None:
        heapq.heappush(self._heap, item)
        self._per_slot[item.slot] = self._per_slot.get(item.slot, 0) + 1

    def next_due_ms(self) -> int | None:
        return self._heap[0].deliver_at_ms if self._heap else None

    def pop_due(self, now_ms: int, limit: int) -> list[Due]:
        """Remove and return up to ``limit`` items due at or before ``now_ms``, in order."""
        out: list[Due] = []
        heap = self._heap
        while heap and heap[0].deliver_at_ms <= now_ms and len(out) < limit:
            item = heapq.heappop(heap)
            left = self._per_slot[item.slot] - 1
            if left:
                self._per_slot[item.slot] = left
            else:
                del self._per_slot[item.slot]
            out.append(item)
        return out

    def lowest_slot(self) -> int | None:
        return min(self._per_slot) if self._per_slot else None
