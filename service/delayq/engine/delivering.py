"""The engine's consumer calls (``Delivering``): receive (long-polling), ack,
change invisibility, retime (new receipts), dead-letter, and the hooks that wake
waiters outside the engine (``on_receivable``).

Each call is refused unless this node is a master in office, then runs the
delivery side's consumer calls (``delivery.receiving``) on the opened shard. A
message past its group's last attempt, or one dead-lettered by hand, is copied to
the group's dead-letter topic through ``schedule_copies`` (the accepting part's:
its key and body kept as stored, unchecked: a firing's body may be empty) and
acked once the copy is durable; the receivable hooks are this part's own and
outlive a rewind.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from ..argchecks import RECEIVE_INVISIBLE_MS, RECEIVE_MAX_MESSAGES
from ..deadletters import dead_letter_headers, dead_letter_topic
from ..delivery.consumers import Taken
from ..delivery.groups import attempt_of
from ..delivery.receiving import Receiving
from ..delivery.types import AckOutcome, ReceivedBatch
from ..errors import DelayqError
from ..types import ScheduleOutcome, ScheduleRequest
from .lifecycle import ShardLife
from .validation import copyable

__all__ = ["DEAD_LETTER_HOLD_MS", "Delivering"]

log = logging.getLogger("delayq.engine")

DEAD_LETTER_HOLD_MS = 30_000
"""How long ``dead_letter`` holds a message while it copies it: handed out again
after this if the copy fails."""

Schedule = Callable[[Sequence[ScheduleRequest]], list[ScheduleOutcome]]


class Delivering:
    """Thread-safe: the consumer calls take the shard's lock."""

    def __init__(self, life: ShardLife, schedule: Schedule) -> None:
        self._life = life
        self._clock = life.setup.clock
        self._hooks = life.setup.receivable_hooks
        self._schedule = schedule  # the dead-letter copies' (Accepting.schedule_copies)

    def _receiving(self, what: str) -> Receiving:
        """The consumer calls of the running shard, once this node may ack ``what``."""
        with self._life.held() as sh:
            sh.admit(what)
            return sh.receiving

    def receive_batch(
        self,
        topic: str,
        group: str,
        *,
        max_messages: int = RECEIVE_MAX_MESSAGES,
        invisible_ms: int = RECEIVE_INVISIBLE_MS,
        wait_ms: int = 0,
        auto_ack: bool = False,
    ) -> ReceivedBatch:
        """See ``Engine.receive_batch``."""
        receiving = self._receiving("topic")
        deadline = self._clock.now_ms() + wait_ms
        while True:
            got, dead = receiving.receive(
                topic, group, max_messages, invisible_ms, wait_ms, auto_ack
            )
            if dead is None:
                return got
            try:  # past their last attempt: each went one attempt further to be held
                self._forward_dead(
                    receiving, topic, dead, [attempt_of(t) - 1 for t in dead.attempts]
                )
            except DelayqError as exc:  # held: they come back after invisible_ms, tried again
                log.warning(
                    "dead letters not forwarded yet",
                    extra={
                        "topic": topic,
                        "group": group,
                        "messages": len(dead.offsets),
                        "error": str(exc),
                    },
                )
            wait_ms = deadline - self._clock.now_ms()
            if got.ids or wait_ms <= 0:
                return got

    def on_receivable(self, hook: Callable[[], None]) -> Callable[[], None]:
        """See ``Engine.on_receivable``."""
        with self._life.lock:
            self._hooks.append(hook)

        def remove() -> None:
            with self._life.lock:
                self._hooks.remove(hook)

        return remove

    def retime(
        self, topic: str, group: str, receipts: Sequence[str], invisible_ms: int
    ) -> list[str | AckOutcome | DelayqError]:
        """See ``Engine.retime``."""
        return self._receiving("receipts").hold(topic, group, receipts, invisible_ms)[0]

    def dead_letter(
        self, topic: str, group: str, receipts: Sequence[str]
    ) -> list[AckOutcome | DelayqError]:
        """See ``Engine.dead_letter``."""
        receiving = self._receiving("receipts")
        out, held = receiving.hold(topic, group, receipts, DEAD_LETTER_HOLD_MS)
        if held is None:
            return [r for r in out if not isinstance(r, str)]
        done = self._forward_dead(receiving, topic, held, [attempt_of(t) for t in held.attempts])
        offsets = iter(held.offsets)
        return [
            (done.get(next(offsets), AckOutcome.NOT_FOUND) or AckOutcome.ACKED)
            if isinstance(r, str)
            else r
            for r in out
        ]

    def _forward_dead(
        self, receiving: Receiving, topic: str, held: Taken, attempts: list[int]
    ) -> dict[int, DelayqError | None]:
        """Schedule the dead-letter copies of held entries, then ack those copied.
        Returns, per offset read, None when copied or the error that refused its copy
        (the entry stays held). Raises (nothing acked) if no copy can be made."""
        batch, offsets = receiving.read(topic, held)
        spent = dict(zip(held.offsets, attempts, strict=True))
        dlq = dead_letter_topic(held.group)
        copies = [
            ScheduleRequest(
                topic=dlq,
                body=body,
                key=key,
                # a new message of the dead-letter topic: not holding the original's
                # dedup id and window, no firing (delayq's own headers, refused in a
                # schedule)
                headers=dead_letter_headers(copyable(headers), topic, mid, held.group, spent[off]),
            )
            for off, mid, key, headers, body in zip(
                offsets, batch.ids, batch.keys, batch.headers, batch.bodies, strict=True
            )
        ]
        done = {off: d.error for off, d in zip(offsets, self._schedule(copies), strict=True)}
        for off, error in done.items():
            if error is not None:
                log.warning(
                    "a dead letter's copy refused",
                    extra={"topic": topic, "group": held.group, "offset": off, "error": str(error)},
                )
        receiving.ack_held(held, [off for off, error in done.items() if error is None])
        return done

    def ack(
        self, topic: str, group: str, receipts: Sequence[str]
    ) -> list[AckOutcome | DelayqError]:
        """See ``Engine.ack``."""
        return self._receiving("receipts").settle(topic, group, receipts, None)

    def change_invisibility(
        self, topic: str, group: str, receipts: Sequence[str], invisible_ms: int
    ) -> list[AckOutcome | DelayqError]:
        """See ``Engine.change_invisibility``."""
        return self._receiving("receipts").settle(topic, group, receipts, invisible_ms)
