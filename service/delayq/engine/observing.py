"""What the engine shows of itself (``Observing``), for the Stats call, metrics
and tools: event counters, per-topic stats and due-time histograms, consumer
groups, lateness, queue gauges, the group commit's counts, recurring
schedules (how many, their firings' lateness; their firings and missed ones
are the counters ``schedule_firings`` and ``schedule_missed``).

Reads only. Those a scrape makes of every topic read topic by topic, each under
the lock on its own (``_topic_by_topic``), so a scrape of many topics never
holds the shard's calls for all of them. The metrics' reads answer from the
shard last opened, also while it closes (``ShardLife.latest``).
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import TypeVar

from ..argchecks import check_topic
from ..delivery.types import GroupStats
from ..errors import NotFound, quote
from ..timers.memory.lateness import LatenessHistogram
from ..timers.stages.groupcommit import GroupCommit
from ..types import TopicStats
from .lifecycle import ShardLife
from .planrows import PLANS_TOPIC

__all__ = ["Observing"]

T = TypeVar("T")


class Observing:
    """Thread-safe: each read takes the shard's lock."""

    def __init__(self, life: ShardLife) -> None:
        self._life = life
        self._clock = life.setup.clock

    @property
    def counters(self) -> collections.Counter[str]:
        """Event counts since start (scheduled, delivered, ...), for metrics."""
        return self._life.setup.counters

    def stats(self, topic: str | None = None) -> list[TopicStats]:
        """See ``Engine.stats``."""
        if topic is not None:
            check_topic(topic)
        with self._life.held() as sh:
            book, consumers = sh.state.topics, sh.consumers
            now = self._clock.now_ms()
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
                        consumers.backlogs(tid),
                        book.due_counts(tid).histogram(now),
                        consumers.dead_letters(tid),
                    )
                )
            return out

    def due_by_topic(self) -> dict[str, list[tuple[int, int]]]:
        """Per topic, its due-time histogram as ``TopicStats.due`` (``_topic_by_topic``).
        Empty when the shard is not open."""
        return self._topic_by_topic(
            lambda tid, now: self._life.opened().state.topics.due_counts(tid).histogram(now)
        )

    def group_stats(self) -> dict[tuple[str, str], GroupStats]:
        """(topic, group) -> where that consumer group stands (``GroupStats``), the
        topics with groups read as ``_topic_by_topic`` does. Empty when the shard is
        not open."""
        per_topic = self._topic_by_topic(
            lambda tid, now: self._life.opened().consumers.group_stats(tid, now),
            lambda tid: tid in self._life.opened().consumers.groups,
        )
        return {(t, g): s for t, stats in per_topic.items() for g, s in stats.items()}

    def _topic_by_topic(
        self, read: Callable[[int, int], T], only: Callable[[int], bool] = lambda _: True
    ) -> dict[str, T]:
        """``read(topic id, now ms)`` of every topic (``only`` those it accepts), by
        name, each under the lock on its own (``read`` and ``only`` run with it
        held and the shard running). Stops when the shard closes."""
        life = self._life
        with life.lock:
            if not life.running:
                return {}
            names = life.opened().state.topics.ids.items()
            ids = [(name, tid) for name, tid in names if only(tid)]
        out: dict[str, T] = {}
        for name, tid in ids:
            with life.lock:
                if not life.running:
                    break
                out[name] = read(tid, self._clock.now_ms())
        return out

    def lateness(self) -> dict[str, int]:
        """See ``Engine.lateness``."""
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
        with self._life.lock:
            sh = self._life.latest()
            head = sh.state.release.next_due_ms()
            now = self._clock.now_ms()
        return max(0, now - head) if head is not None else 0

    def lateness_snapshot(self) -> LatenessHistogram:
        """A copy of the release lateness histogram, its counts and sum taken together
        (under the lock: the release stage adds to both)."""
        with self._life.lock:
            return self._life.latest().state.lateness.copy()

    def schedules(self) -> int:
        """How many recurring schedules this shard holds (its pending plans)."""
        with self._life.lock:
            book = self._life.latest().state.topics
            tid = book.ids.get(PLANS_TOPIC)
            return book.counts(tid)[0] if tid is not None else 0

    def schedule_lateness_snapshot(self) -> LatenessHistogram:
        """A copy of the histogram of how late recurring schedules' firings were
        written after their nominal times (ms; written ahead: 0), counts and sum
        taken together (``firing.Firer``)."""
        with self._life.lock:
            return self._life.setup.schedule_lateness.copy()

    @property
    def group_commit(self) -> GroupCommit:
        """The CommitLog's group commit: its durable position and fsync counts."""
        return self._life.latest().commit

    def pending_by_topic(self) -> dict[str, int]:
        """Pending messages per topic name (cheap: no due-time histograms)."""
        with self._life.lock:
            return self._life.latest().state.topics.pending_by_name()

    def gauges(self) -> dict[str, int]:
        """Queue depths and positions, for metrics."""
        with self._life.lock:
            return self._life.latest().stages.gauges()
