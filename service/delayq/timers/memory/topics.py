"""Per-topic bookkeeping of one shard (in memory, no I/O): topic names and ids,
and per topic how many messages are pending, were delivered and were cancelled,
with the pending ones counted by due time (``DueCounts``).

Invariants: ids run 1, 2, ... in the order topics were first used and are never
reused; a topic's pending count is its messages accepted and not yet delivered,
cancelled or rescheduled, and its ``DueCounts`` hold exactly those. The engine
changes the book with its lock held; a checkpoint saves it (``save_to``) and
recovery restores it (``load_from``), then replays the CommitLog through the
same calls as the live path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from ...batchops import TopicIds, by_topic
from ...store.checkpoint import Checkpoint
from .duecounts import DueCounts

__all__ = ["TopicBook", "TopicCounts"]


class TopicCounts(NamedTuple):
    pending: int
    delivered: int
    cancelled: int


class TopicBook:
    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.names: dict[int, str] = {}
        self._pending: dict[int, int] = {}
        self._delivered: dict[int, int] = {}
        self._cancelled: dict[int, int] = {}
        self._due: dict[int, DueCounts] = {}

    def next_id(self) -> int:
        """The id the next new topic gets."""
        return len(self.ids) + 1

    def define(self, topic_id: int, name: str) -> None:
        self.ids[name] = topic_id
        self.names[topic_id] = name
        self._pending.setdefault(topic_id, 0)
        self._delivered.setdefault(topic_id, 0)

    def due_counts(self, topic_id: int) -> DueCounts:
        got = self._due.get(topic_id)
        if got is None:
            got = self._due[topic_id] = DueCounts()
        return got

    def accepted(self, tids: TopicIds, dues: np.ndarray, now_ms: int) -> None:
        """Messages accepted (``dues``: their due times, one per row)."""
        for tid, rows in by_topic(tids):
            mine = dues[rows]
            self._pending[tid] = self._pending.get(tid, 0) + len(mine)
            self.due_counts(tid).add_many(mine, now_ms)

    def left(self, tids: TopicIds, dues: np.ndarray, *, cancelled: bool) -> None:
        """Pending messages that left by cancel (``cancelled``) or reschedule."""
        for tid, rows in by_topic(tids):
            mine = dues[rows]
            self._leave(tid, mine)
            if cancelled:
                self._cancelled[tid] = self._cancelled.get(tid, 0) + len(mine)

    def delivered(self, tid: int, dues: np.ndarray | Sequence[int]) -> None:
        """Messages of one topic released into its ready queue."""
        self._delivered[tid] = self._delivered.get(tid, 0) + len(dues)
        self._leave(tid, dues)

    def _leave(self, tid: int, dues: np.ndarray | Sequence[int]) -> None:
        """Pending messages of one topic no longer pending (any way out)."""
        self._pending[tid] = self._pending.get(tid, 0) - len(dues)
        self.due_counts(tid).remove_many(dues)

    def counts(self, tid: int) -> TopicCounts:
        return TopicCounts(
            self._pending.get(tid, 0), self._delivered.get(tid, 0), self._cancelled.get(tid, 0)
        )

    def total_pending(self) -> int:
        return sum(self._pending.values())

    def pending_by_name(self) -> dict[str, int]:
        return {name: self._pending.get(tid, 0) for name, tid in self.ids.items()}

    def save_to(self, ckpt: Checkpoint) -> None:
        """Write the book into a checkpoint's topic fields."""
        ckpt.topics = dict(self.ids)
        ckpt.pending = {str(k): v for k, v in self._pending.items()}
        ckpt.counters = {
            **{"delivered_" + str(k): v for k, v in self._delivered.items()},
            **{"cancelled_" + str(k): v for k, v in self._cancelled.items()},
        }
        ckpt.due = {str(k): d.to_json() for k, d in self._due.items()}

    def load_from(self, ckpt: Checkpoint) -> None:
        """Restore the book as a checkpoint saved it."""
        for name, tid in ckpt.topics.items():
            self.define(tid, name)
        self._pending.update({int(k): v for k, v in ckpt.pending.items()})
        for key, value in ckpt.counters.items():
            if key.startswith("delivered_"):
                self._delivered[int(key.removeprefix("delivered_"))] = value
            elif key.startswith("cancelled_"):
                self._cancelled[int(key.removeprefix("cancelled_"))] = value
        for tid_text, doc in ckpt.due.items():
            self._due[int(tid_text)] = DueCounts.from_json(doc)
