"""What the engine shows of itself (``ObservingSide``): counters, per-topic
stats, lateness, gauges, ``inspect()``; and driving it by hand (``pump``,
``checkpoint``) for tests and tools.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable
from typing import TypeVar

from ..argchecks import check_topic
from ..delivery.types import GroupStats
from ..errors import NotFound, quote
from ..timers.memory.lateness import LatenessHistogram
from ..timers.stages.groupcommit import GroupCommit
from ..types import (
    TopicStats,
)
from .core import EngineCore
from .inspection import Inspection

__all__ = ["ObservingSide"]

log = logging.getLogger("delayq.engine")
T = TypeVar("T")


class ObservingSide(EngineCore):
    # ------------------------------------------------------------------ observing
    @property
    def counters(self) -> collections.Counter[str]:
        """Event counts since start (scheduled, delivered, ...), for metrics."""
        return self._counters

    def stats(self, topic: str | None = None) -> list[TopicStats]:
        """Per-topic counts and due-time histogram; ``topic`` None: every topic."""
        if topic is not None:
            check_topic(topic)
        with self._lock:
            self._check_running()
            book = self._state.topics
            now = self.clock.now_ms()
            names = [topic] if topic is not None else sorted(book.ids)
            out = []
            for name in names:
                tid = book.ids.get(name)
                if tid is None:
                    raise NotFound("topic", f"unknown topic {quote(name)}")
                out.append(
                    TopicStats(
                        name,
                        *book.counts(tid),
                        self.consumers.backlogs(tid),
                        book.due_counts(tid).histogram(now),
                        self.consumers.dead_letters(tid),
                    )
                )
            return out

    def due_by_topic(self) -> dict[str, list[tuple[int, int]]]:
        """Per topic, its due-time histogram as ``TopicStats.due`` (``_topic_by_topic``).
        Empty when the shard is not open."""
        return self._topic_by_topic(
            lambda tid, now: self._state.topics.due_counts(tid).histogram(now)
        )

    def group_stats(self) -> dict[tuple[str, str], GroupStats]:
        """(topic, group) -> where that consumer group stands (``GroupStats``), the
        topics with groups read as ``_topic_by_topic`` does. Empty when the shard is
        not open."""
        per_topic = self._topic_by_topic(
            lambda tid, now: self.consumers.group_stats(tid, now),
            lambda tid: tid in self.consumers.groups,
        )
        return {(t, g): s for t, stats in per_topic.items() for g, s in stats.items()}

    def _topic_by_topic(
        self, read: Callable[[int, int], T], only: Callable[[int], bool] = lambda _: True
    ) -> dict[str, T]:
        """``read(topic id, now ms)`` of every topic (``only`` those it accepts), by
        name, each under the lock on its own: a scrape of many topics never holds
        the shard's calls for all of them at once. Stops when the shard closes."""
        with self._lock:
            if not self.running:
                return {}
            ids = [(name, tid) for name, tid in self._state.topics.ids.items() if only(tid)]
        out: dict[str, T] = {}
        for name, tid in ids:
            with self._lock:
                if not self.running:
                    break
                out[name] = read(tid, self.clock.now_ms())
        return out

    def lateness(self) -> dict[str, int]:
        """Release lateness so far (p50/p99 as bucket upper bounds, ms) and how far
        the oldest due, unreleased message is behind now (``release_lag_ms``)."""
        hist = self.lateness_snapshot()
        p50, p99 = hist.percentile(0.5), hist.percentile(0.99)
        return {
            "p50": p50,
            "p99": p99,
            "release_lag_ms": self.release_lag_ms(),
            "count": hist.count,
        }

    def release_lag_ms(self) -> int:
        """How far the oldest due, unreleased message is behind now (0: none)."""
        with self._lock:
            head = self._state.release.next_due_ms()
            now = self.clock.now_ms()
        return max(0, now - head) if head is not None else 0

    def lateness_snapshot(self) -> LatenessHistogram:
        """A copy of the release lateness histogram, its counts and sum taken together
        (under the lock: the release stage adds to both)."""
        with self._lock:
            return self._state.lateness.copy()

    @property
    def group_commit(self) -> GroupCommit:
        """The CommitLog's group commit: its durable position and fsync counts."""
        return self._commit

    def pending_by_topic(self) -> dict[str, int]:
        """Pending messages per topic name (cheap: no due-time histograms)."""
        with self._lock:
            return self._state.topics.pending_by_name()

    def gauges(self) -> dict[str, int]:
        """Queue depths and positions, for metrics."""
        with self._lock:
            return self._stages.gauges()

    def inspect(self) -> Inspection:
        """A look inside the running shard, for tests and tools (see ``inspection``)."""
        self._check_running()
        return Inspection(self._state, self._stages)

    # ------------------------------------------------------------------ driving
    def pump(self) -> None:
        """Run every stage until nothing is left to do at the clock's current time.

        For engines made with ``background=False`` (tests, tools)."""
        with self._lock:
            self._check_running()
            self._stages.pump()
