"""The Engine: one shard, in process. The facade the server (and embedders) talk
to; the only place that joins the timer pipeline (``timers``), the delivery side
(``delivery``) and replication (``replication``).

``Engine`` is the client-facing calls (schedule, by id, receive and ack) over
its sides: ``core.EngineCore`` (lifecycle and the admit/ack rules),
``replica.ReplicaSide`` (roles and the replication stream), ``moves.MovesSide``
(rebalance, compaction, export) and ``observing.ObservingSide`` (stats, pump).
Client input is validated here, at the boundary (``validation``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from ..argchecks import RECEIVE_INVISIBLE_MS, RECEIVE_MAX_MESSAGES
from ..deadletters import dead_letter_headers, dead_letter_topic
from ..delivery.consumers import Taken
from ..delivery.groups import attempt_of
from ..delivery.types import AckOutcome, ReceivedBatch, ReceivedMessage
from ..errors import DelayqError
from ..ids import MessageId
from ..timers.tuning import HELP_LINK
from ..types import (
    BatchOutcome,
    CancelOutcome,
    LookupResult,
    ScheduleBatch,
    ScheduleOutcome,
    ScheduleRequest,
)
from .core import Lifecycle
from .moves import MovesSide
from .observing import ObservingSide
from .replica import ReplicaSide
from .validation import batch_of, prepare_columns, resolve_due

__all__ = ["Engine", "Lifecycle"]

log = logging.getLogger("delayq.engine")

DEAD_LETTER_HOLD_MS = 30_000
"""How long ``dead_letter`` holds a message while it copies it: handed out again
after this if the copy fails."""


class Engine(ReplicaSide, MovesSide, ObservingSide):
    # ------------------------------------------------------------------ schedule
    def schedule(self, requests: Sequence[ScheduleRequest]) -> list[ScheduleOutcome]:
        """Schedule a batch; one outcome per request (an id, or a per-item error).

        Raises ``Congested`` (nothing written) when the enqueue queue is full."""
        reqs = list(requests)
        batch, suspects = batch_of(reqs)
        return self._schedule(batch, reqs.__getitem__, suspects).outcomes()

    def schedule_batch(self, batch: ScheduleBatch) -> BatchOutcome:
        """Schedule many messages given as columns (the bulk fast path): same rules,
        ids and errors as ``schedule``, without an object per message (0 in a time
        column means "not given").

        Raises ``InvalidArgument`` for a malformed batch (columns of different
        lengths, an invalid single topic) and ``Congested`` when the queue is full."""
        return self._schedule(batch, None, ())

    def _schedule(
        self,
        batch: ScheduleBatch,
        row: Callable[[int], ScheduleRequest] | None,
        suspects: Sequence[int],
    ) -> BatchOutcome:
        now = self.clock.now_ms()
        cols, invalid = prepare_columns(batch, now, self.settings, row, suspects)
        errors: dict[int, DelayqError] = dict(invalid)
        with self._lock:
            epoch = self._admit("messages")
            ids, dues, refused, end = self._accept.accept(cols, now)
            if len(self._state.enqueue_q) >= HELP_LINK:
                self._stages.link.help()
        self._acked(end, epoch, "messages")
        if cols.origin is None and not refused:
            return BatchOutcome(ids, dues, errors)
        rows = None if cols.origin is None else cols.origin.tolist()
        return BatchOutcome.spread(len(batch.bodies), rows, ids, dues, errors, refused)

    # ------------------------------------------------------------------ by id
    def cancel(self, ids: Sequence[str]) -> list[CancelOutcome | DelayqError]:
        """Cancel messages by id; durable once this returns. One outcome per id (a
        ``Forwarded`` error for one a rebalance moved away: the server passes it on)."""
        now = self.clock.now_ms()
        with self._lock:
            epoch = self._admit("ids")
            local = self._local_ids(ids)
            cols, errors = MessageId.parse_columns(local)
            out, end = self._byid.cancel(local, cols, errors, now)
        self._acked(end, epoch, "ids")
        return out

    def reschedule(
        self, message_id: str, *, deliver_at_ms: int | None = None, delay_ms: int | None = None
    ) -> ScheduleOutcome:
        """Atomically cancel a pending message and schedule its copy at a new time:
        a crash leaves either the old or the new message pending, never both or
        neither. Returns the new id. Raises NotFound / FailedPrecondition /
        InvalidArgument."""
        MessageId.parse(message_id, "id")
        now = self.clock.now_ms()
        resolve_due(deliver_at_ms, delay_ms, now, self.settings)  # argument errors come first
        with self._lock:
            epoch = self._admit("id")
            mid = MessageId.parse(self._local_ids([message_id])[0], "id")
            result, end = self._byid.reschedule(mid, deliver_at_ms, delay_ms, now)
        self._acked(end, epoch, "id")
        return result

    def lookup(self, message_id: str) -> LookupResult:
        """What the message is and holds; an id a rebalance moved here from another
        shard answers with the copy here (its id: the result's ``id``)."""
        MessageId.parse(message_id, "id")
        with self._lock:
            self._check_running()
            local = self._local_ids([message_id])[0]
            return self._byid.lookup(MessageId.parse(local, "id"), local)

    # ------------------------------------------------------------------ consumers
    def receive(
        self,
        topic: str,
        group: str,
        *,
        max_messages: int = RECEIVE_MAX_MESSAGES,
        invisible_ms: int = RECEIVE_INVISIBLE_MS,
        wait_ms: int = 0,
        auto_ack: bool = False,
    ) -> list[ReceivedMessage]:
        """Hand out up to ``max_messages`` deliverable messages to ``group``; wait up to
        ``wait_ms`` for the first one. Unacked messages come back after ``invisible_ms``.
        ``auto_ack``: acked as handed out (at-most-once; no receipts, no redelivery),
        durable once this returns like an ``ack``."""
        return self.receive_batch(
            topic,
            group,
            max_messages=max_messages,
            invisible_ms=invisible_ms,
            wait_ms=wait_ms,
            auto_ack=auto_ack,
        ).messages()

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
        """``receive`` with the messages as columns (no object per message)."""
        self._refuse_unless_master("topic")
        deadline = self.clock.now_ms() + wait_ms
        while True:
            got, dead = self._receiving.receive(
                topic, group, max_messages, invisible_ms, wait_ms, auto_ack
            )
            if dead is None:
                return got
            try:  # past their last attempt: each went one attempt further to be held
                self._forward_dead(topic, dead, [attempt_of(t) - 1 for t in dead.attempts])
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
            wait_ms = deadline - self.clock.now_ms()
            if got.ids or wait_ms <= 0:
                return got

    def on_receivable(self, hook: Callable[[], None]) -> Callable[[], None]:
        """Call ``hook`` whenever messages may have become receivable (after each
        release step and each nack); return a function that removes it. For waiters
        outside the engine's threads, such as an event loop: the hook runs on an
        engine thread with the engine lock held, so it must be quick and must not
        call the engine. Messages coming back after their invisibility are not
        signalled: waiters look again every ``RECEIVE_LOOK_AGAIN_S``, as ``receive`` does."""
        with self._lock:
            self._receivable_hooks.append(hook)

        def remove() -> None:
            with self._lock:
                self._receivable_hooks.remove(hook)

        return remove

    def retime(
        self, topic: str, group: str, receipts: Sequence[str], invisible_ms: int
    ) -> list[str | AckOutcome | DelayqError]:
        """``change_invisibility`` that hands back a new receipt for each message it
        re-times (the old receipt is STALE from then on), as RocketMQ's
        ChangeInvisibleDuration does; an outcome for the others."""
        self._refuse_unless_master("receipts")
        return self._receiving.hold(topic, group, receipts, invisible_ms)[0]

    def dead_letter(
        self, topic: str, group: str, receipts: Sequence[str]
    ) -> list[AckOutcome | DelayqError]:
        """Send received messages to the group's dead-letter topic (``dlq.<group>``)
        now, whatever their attempt: each is ACKED once its copy there is durable and
        the group has acked it, or answered the error that refused its copy. Raises
        what the copies' schedule raises; the messages are then held for
        ``DEAD_LETTER_HOLD_MS`` and handed out again after."""
        self._refuse_unless_master("receipts")
        out, held = self._receiving.hold(topic, group, receipts, DEAD_LETTER_HOLD_MS)
        if held is None:
            return [r for r in out if not isinstance(r, str)]
        done = self._forward_dead(topic, held, [attempt_of(t) for t in held.attempts])
        offsets = iter(held.offsets)
        return [
            (done.get(next(offsets), AckOutcome.NOT_FOUND) or AckOutcome.ACKED)
            if isinstance(r, str)
            else r
            for r in out
        ]

    def _forward_dead(
        self, topic: str, held: Taken, attempts: list[int]
    ) -> dict[int, DelayqError | None]:
        """Schedule the dead-letter copies of held entries, then ack those copied.
        Returns, per offset read, None when copied or the error that refused its copy
        (the entry stays held). Raises (nothing acked) if no copy can be made."""
        batch, offsets = self._receiving.read(topic, held)
        spent = dict(zip(held.offsets, attempts, strict=True))
        dlq = dead_letter_topic(held.group)
        copies = [
            ScheduleRequest(
                topic=dlq,
                body=body,
                key=key,
                headers=dead_letter_headers(headers, topic, mid, held.group, spent[off]),
            )
            for off, mid, key, headers, body in zip(
                offsets, batch.ids, batch.keys, batch.headers, batch.bodies, strict=True
            )
        ]
        done = {off: d.error for off, d in zip(offsets, self.schedule(copies), strict=True)}
        for off, error in done.items():
            if error is not None:
                log.warning(
                    "a dead letter's copy refused",
                    extra={"topic": topic, "group": held.group, "offset": off, "error": str(error)},
                )
        self._receiving.ack_held(held, [off for off, error in done.items() if error is None])
        return done

    def ack(
        self, topic: str, group: str, receipts: Sequence[str]
    ) -> list[AckOutcome | DelayqError]:
        """Acknowledge received messages; durable once this returns."""
        self._refuse_unless_master("receipts")
        return self._receiving.settle(topic, group, receipts, None)

    def change_invisibility(
        self, topic: str, group: str, receipts: Sequence[str], invisible_ms: int
    ) -> list[AckOutcome | DelayqError]:
        """Move the redelivery time of received messages (0: redeliver now, a nack)."""
        self._refuse_unless_master("receipts")
        return self._receiving.settle(topic, group, receipts, invisible_ms)
