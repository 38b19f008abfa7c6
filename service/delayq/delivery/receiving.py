"""The consumer calls of one shard: receive (long-polling), ack, change
invisibility, and waking the receivers that wait (the engine facade's consumer
half).

What it needs of the shard (its lock, topic ids, counters, group commit, whether
it runs) the facade hands in. Calls take the shard's lock; bodies are decoded
without it.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Sequence

from ..argchecks import MAX_INVISIBLE_MS, check_group, check_receive, check_topic
from ..clock import Clock
from ..errors import DelayqError, InvalidArgument
from ..settings import EngineSettings
from .consumers import Consumers
from .types import AckOutcome, ReceivedBatch

__all__ = ["RECEIVE_LOOK_AGAIN_S", "Receiving"]

RECEIVE_LOOK_AGAIN_S = 0.05
"""A waiting receiver looks again this often: redeliveries (invisibility expiring)
are not signalled."""


class Receiving:
    def __init__(
        self,
        consumers: Consumers,
        *,
        lock: threading.RLock,
        clock: Clock,
        settings: EngineSettings,
        counters: collections.Counter[str],
        topic_id: Callable[[str], int | None],
        made_durable: Callable[[int], None],
        check_running: Callable[[], None],
        wait: bool,
        hooks: list[Callable[[], None]],
    ) -> None:
        self._consumers = consumers
        self._lock = lock
        self._clock = clock
        self._settings = settings
        self._counters = counters
        self._topic_id = topic_id
        self._made_durable = made_durable
        self._check_running = check_running
        self._wait = wait  # False: an engine driven by pump() never blocks a receive
        self._received = threading.Condition(lock)  # long-polling receivers
        self._hooks = hooks  # the facade's (see Engine.on_receivable), called by wake

    def receive(
        self,
        topic: str,
        group: str,
        max_messages: int,
        invisible_ms: int,
        wait_ms: int,
        auto_ack: bool,
    ) -> ReceivedBatch:
        """See ``Engine.receive``."""
        check_topic(topic)
        check_group(group)
        check_receive(max_messages, invisible_ms, wait_ms)
        clock, consumers = self._clock, self._consumers
        deadline = clock.now_ms() + wait_ms
        with self._lock:
            while True:
                self._check_running()
                topic_id = self._topic_id(topic)
                now = clock.now_ms()
                taken = None
                if topic_id is not None:
                    taken = consumers.take(
                        topic_id,
                        group,
                        now,
                        max_messages,
                        invisible_ms,
                        self._settings.max_inflight_per_group,
                        auto_ack,
                    )
                if taken is not None:
                    break
                if not self._wait or now >= deadline:
                    return ReceivedBatch(topic, [], [], [], [], [], [], [], [])
                self._received.wait(min(clock.timeout_s(deadline), RECEIVE_LOOK_AGAIN_S))
            end = 0
            if auto_ack:
                end = consumers.write_acks(
                    taken.topic_id, group, taken.offsets, now, attempts=taken.attempts
                )
                self._counters["acked"] += len(taken.offsets)
        self._made_durable(end)
        got, unreadable = consumers.materialise(topic, taken)
        if unreadable and not taken.acked:  # acked away so that they do not come back forever
            with self._lock:
                consumers.ack_unreadable(taken.topic_id, group, unreadable, clock.now_ms())
        return got

    def settle(
        self, topic: str, group: str, receipts: Sequence[str], invisible_ms: int | None
    ) -> list[AckOutcome | DelayqError]:
        """Ack (``invisible_ms`` None) or re-time received messages."""
        if invisible_ms is not None and not 0 <= invisible_ms <= MAX_INVISIBLE_MS:
            why = f"must be 0..{MAX_INVISIBLE_MS}, got {invisible_ms}"
            raise InvalidArgument("invisible_ms", why)
        check_topic(topic)
        check_group(group)
        end = 0
        with self._lock:
            self._check_running()
            now = self._clock.now_ms()
            topic_id = self._topic_id(topic)
            out, acked = self._consumers.settle(topic_id, group, receipts, now, invisible_ms)
            if acked.offsets and topic_id is not None:
                end = self._consumers.write_acks(
                    topic_id, group, acked.offsets, now, attempts=acked.attempts
                )
                self._counters["acked"] += len(acked.offsets)
            if invisible_ms is not None:
                self.wake()
        self._made_durable(end)
        return out

    def wake(self) -> None:
        """Wake the waiting receivers and call the hooks (lock held)."""
        self._received.notify_all()
        for hook in self._hooks:
            hook()

    def wake_waiters(self) -> None:
        """Wake the receivers waiting in ``receive`` only (lock held): on close,
        they see the engine stopped."""
        self._received.notify_all()
