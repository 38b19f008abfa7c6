"""The consumer calls of one shard: receive (long-polling), ack, change
invisibility, hold (new receipts), nack, and waking the receivers that wait (under
the engine's delivering part, ``engine.delivering``). A receive also hands back
the messages past their group's last attempt, held, for that part to
dead-letter (``deadletters``) and then ``ack_held``.

What it needs of the shard (its lock, topic ids, counters, group commit, whether
it runs) the opened shard (``engine.shard``) hands in. Calls take the shard's
lock; bodies are decoded without it.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Sequence

from ..argchecks import MAX_INVISIBLE_MS, check_group, check_receive, check_topic
from ..clock import Clock
from ..errors import DelayqError, InvalidArgument
from .consumers import Consumers, Settled, Taken
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
        self._counters = counters
        self._topic_id = topic_id
        self._made_durable = made_durable
        self._check_running = check_running
        self._wait = wait  # False: an engine driven by pump() never blocks a receive
        self._received = threading.Condition(lock)  # long-polling receivers
        self._hooks = hooks  # the delivering part's (see Engine.on_receivable), called by wake

    def receive(
        self,
        topic: str,
        group: str,
        max_messages: int,
        invisible_ms: int,
        wait_ms: int,
        auto_ack: bool,
    ) -> tuple[ReceivedBatch, Taken | None]:
        """See ``Engine.receive``; with the messages found past their last attempt
        (held, not handed out: the caller dead-letters them), which end the wait."""
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
                taken = dead = None
                if topic_id is not None:
                    taken = consumers.take(
                        topic_id, group, now, max_messages, invisible_ms, auto_ack
                    )
                    dead = consumers.take_dead(topic_id, group)
                if taken is not None:
                    break
                if dead is not None or not self._wait or now >= deadline:
                    return ReceivedBatch(topic, [], [], [], [], [], [], [], []), dead
                self._received.wait(min(clock.timeout_s(deadline), RECEIVE_LOOK_AGAIN_S))
            if auto_ack:
                end = consumers.write_acks(
                    taken.topic_id, group, taken.offsets, now, attempts=taken.attempts, handed=True
                )
                self._counters["acked"] += len(taken.offsets)
            else:  # the attempts are durable (sync) before they are handed out
                held = Settled(list(taken.offsets), taken.attempts)
                dues = [now + invisible_ms] * len(held.offsets)
                end = consumers.write_handout(taken.topic_id, group, held, dues, now, handed=True)
        self._made_durable(end)
        return self.read(topic, taken)[0], dead

    def read(self, topic: str, taken: Taken) -> tuple[ReceivedBatch, list[int]]:
        """The messages of ``taken`` (no lock held), and the offsets they are at:
        those whose body cannot be read are left out and acked away, so that they do
        not come back forever."""
        consumers = self._consumers
        got, unreadable = consumers.materialise(topic, taken)
        if not unreadable:
            return got, list(taken.offsets)
        if not taken.acked:
            with self._lock:
                consumers.ack_unreadable(taken.topic_id, taken.group, unreadable, self._now())
        bad = set(unreadable)
        return got, [off for off in taken.offsets if off not in bad]

    def hold(
        self, topic: str, group: str, receipts: Sequence[str], invisible_ms: int
    ) -> tuple[list[str | AckOutcome | DelayqError], Taken | None]:
        """Re-time received messages under new receipts (returned where held; the old
        ones are STALE from then on), and the held entries."""
        _check_invisible(invisible_ms)
        check_topic(topic)
        check_group(group)
        with self._lock:
            self._check_running()
            topic_id = self._topic_id(topic)
            now = self._now()
            until = now + invisible_ms
            out, held = self._consumers.hold(topic_id, group, receipts, until)
            end = 0
            if topic_id is not None:
                dues = [until] * len(held.offsets)
                end = self._consumers.write_handout(topic_id, group, held, dues, now)
            if invisible_ms == 0:
                self.wake()
        self._made_durable(end)
        if topic_id is None or not held.offsets:
            return out, None
        return out, self._consumers.taken(topic_id, group, held.offsets, held.attempts)

    def ack_held(self, taken: Taken, offsets: Sequence[int]) -> int:
        """Ack the ``offsets`` of held entries (their dead-letter copies are durable),
        counted per topic and group; returns how many were still held to ack."""
        pick = set(offsets)
        done = Settled([], [])
        for off, ticket in zip(taken.offsets, taken.attempts, strict=True):
            if off in pick:
                done.offsets.append(off)
                done.attempts.append(ticket)
        end = 0
        with self._lock:
            self._check_running()
            idx = self._consumers.ready_index(taken.topic_id)
            state = self._consumers.group(taken.topic_id, taken.group)
            res = state.ack_many(done.offsets, done.attempts, idx.length)
            ok = [k for k, r in enumerate(res) if r is AckOutcome.ACKED]
            if ok:
                acked = [done.offsets[k] for k in ok]
                end = self._consumers.write_acks(
                    taken.topic_id, taken.group, acked, self._now(),
                    attempts=[done.attempts[k] for k in ok],
                )  # fmt: skip
                self._consumers.dead_lettered[taken.topic_id, taken.group] += len(ok)
                self._counters["dead_lettered"] += len(ok)
        self._made_durable(end)
        return len(ok)

    def _now(self) -> int:
        return self._clock.now_ms()

    def settle(
        self, topic: str, group: str, receipts: Sequence[str], invisible_ms: int | None
    ) -> list[AckOutcome | DelayqError]:
        """Ack (``invisible_ms`` None) or re-time received messages."""
        if invisible_ms is not None:
            _check_invisible(invisible_ms)
        check_topic(topic)
        check_group(group)
        end = 0
        with self._lock:
            self._check_running()
            now = self._clock.now_ms()
            topic_id = self._topic_id(topic)
            out, done = self._consumers.settle(topic_id, group, receipts, now, invisible_ms)
            if invisible_ms is not None:  # re-timed: logged as held until then
                if topic_id is not None:
                    dues = [now + invisible_ms] * len(done.offsets)
                    end = self._consumers.write_handout(topic_id, group, done, dues, now)
                self.wake()
            elif done.offsets and topic_id is not None:
                end = self._consumers.write_acks(
                    topic_id, group, done.offsets, now, attempts=done.attempts
                )
                self._counters["acked"] += len(done.offsets)
        self._made_durable(end)
        return out

    def nack(
        self, topic: str, group: str, receipts: Sequence[str], at_least_ms: int = 0
    ) -> list[AckOutcome | DelayqError]:
        """Negative acknowledgements (``Consumers.nack``; each waits at least
        ``at_least_ms``), logged: durable once this returns, like an ack."""
        check_topic(topic)
        check_group(group)
        _check_at_least(at_least_ms)
        with self._lock:
            self._check_running()
            now = self._clock.now_ms()
            topic_id = self._topic_id(topic)
            out, nacked, dues = self._consumers.nack(topic_id, group, receipts, now, at_least_ms)
            end = 0
            if topic_id is not None and nacked.offsets:
                end = self._consumers.write_handout(
                    topic_id, group, nacked, dues, now, waiting=True
                )
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


def _check_at_least(at_least_ms: int) -> None:
    if not 0 <= at_least_ms <= MAX_INVISIBLE_MS:
        why = f"must be 0..{MAX_INVISIBLE_MS}, got {at_least_ms}"
        raise InvalidArgument("at_least_ms", why)


def _check_invisible(invisible_ms: int) -> None:
    if not 0 <= invisible_ms <= MAX_INVISIBLE_MS:
        why = f"must be 0..{MAX_INVISIBLE_MS}, got {invisible_ms}"
        raise InvalidArgument("invisible_ms", why)
