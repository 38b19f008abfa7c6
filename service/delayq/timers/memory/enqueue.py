"""The enqueue queue: CommitLog message records accepted but not yet linked into
the wheel, held as numpy record batches in CommitLog order (pure; not
thread-safe, the engine's lock guards it).

Entries leave only through ``drop`` after the link stage wrote them, so a
failed link retries exactly what failed. ``head_pos`` is where recovery must
start re-queueing from.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

import numpy as np

from ...batchops import join_rows

__all__ = ["PENDING_DTYPE", "EnqueueQueue", "pending_batch"]

PENDING_DTYPE = np.dtype(
    [
        ("cl_pos", "<i8"),
        ("cl_size", "<u4"),
        ("seq", "<u8"),
        ("topic_id", "<u4"),
        ("deliver_at_ms", "<i8"),
        ("roll_count", "<u2"),
    ]
)


Column = Sequence[int] | np.ndarray


def pending_batch(
    cl_pos: Column,
    cl_size: Column,
    seq: Column,
    topic_id: Column | int,
    deliver_at_ms: Column,
    roll_count: Column | int = 0,
) -> np.ndarray:
    batch = np.empty(len(cl_pos), dtype=PENDING_DTYPE)
    batch["cl_pos"] = cl_pos
    batch["cl_size"] = cl_size
    batch["seq"] = seq
    batch["topic_id"] = topic_id
    batch["deliver_at_ms"] = deliver_at_ms
    batch["roll_count"] = roll_count
    return batch


class EnqueueQueue:
    def __init__(self) -> None:
        self._batches: collections.deque[np.ndarray] = collections.deque()
        self._count = 0

    def __len__(self) -> int:
        """Messages waiting (not batches)."""
        return self._count

    def put(self, batch: np.ndarray) -> None:
        if len(batch):
            self._batches.append(batch)
            self._count += len(batch)

    def peek(self, limit: int) -> np.ndarray | None:
        """Up to ``limit`` entries from the head (across batches), without removing them."""
        if not self._batches:
            return None
        parts: list[np.ndarray] = []
        room = limit
        for batch in self._batches:
            parts.append(batch[:room])
            room -= len(parts[-1])
            if room <= 0:
                break
        return parts[0] if len(parts) == 1 else join_rows(parts, PENDING_DTYPE)

    def drop(self, n: int) -> None:
        """Remove the first ``n`` entries (the ones just linked)."""
        self._count -= n
        while n:
            head = self._batches[0]
            if n >= len(head):
                self._batches.popleft()
                n -= len(head)
            else:
                self._batches[0] = head[n:]
                n = 0

    def head_pos(self) -> int | None:
        return int(self._batches[0]["cl_pos"][0]) if self._batches else None
