"""The consumer's settling calls of the RocketMQ service (``Settling``):
AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue,
translated onto the node's calls (``server.calls``), and the renewal of
auto-renewed receives (``renew_forever``).

- ``AckMessage`` acks delayq receipts (a receipt handle is delayq's receipt).
- ``ChangeInvisibleDuration`` re-times one under a new receipt (``Calls.retime``:
  the old one is refused from then on).
- ``ForwardMessageToDeadLetterQueue`` sends one to its group's dead-letter topic
  now (``Calls.dead_letter``; ``%DLQ%<group>`` is delayq's ``dlq.<group>``,
  ``names``); the client calls it after its last attempt.

Each settles its receipts' renewals first (``renewals``). An error of the whole
call (a topic, a batch, another shard's receipt) is every entry's status.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..engine import AckOutcome
from ..errors import DelayqError
from ..server.calls import Calls
from .checks import invisible_change_problem, millis, topic_of
from .renewals import RENEW_EVERY_MS, RENEWED_INVISIBLE_MS, Renewals
from .sessions import Sessions
from .status import overall, settled, status_of
from .v2 import service_pb2 as svc

__all__ = ["Settling"]

log = logging.getLogger("delayq.rocketmq")

Settled = str | AckOutcome | DelayqError
"""What a settling call answers for one receipt (a new receipt where it hands one)."""
_Settle = Callable[[str, str, list[str]], Awaitable[Sequence[Settled]]]


class Settling:
    def __init__(self, calls: Calls, renewals: Renewals) -> None:
        self._calls = calls
        self._renewals = renewals

    async def ack(self, request: Any) -> svc.AckMessageResponse:
        receipts = [e.receipt_handle for e in request.entries]
        self._renewals.settle(receipts)
        results = [
            settled(o) for o in await self._settle(request, receipts, self._calls.consuming.ack)
        ]
        entries = [
            svc.AckMessageResultEntry(
                message_id=e.message_id, receipt_handle=e.receipt_handle, status=s
            )
            for e, s in zip(request.entries, results, strict=True)
        ]
        return svc.AckMessageResponse(status=overall(results), entries=entries)

    async def change_invisible_duration(self, request: Any) -> svc.ChangeInvisibleDurationResponse:
        receipt = request.receipt_handle
        self._renewals.settle([receipt])
        try:
            ms = millis(request.invisible_duration, "invisible_duration")
        except DelayqError as exc:
            return svc.ChangeInvisibleDurationResponse(
                status=status_of(exc), receipt_handle=receipt
            )
        problem = invisible_change_problem(ms)
        if problem is not None:
            return svc.ChangeInvisibleDurationResponse(status=problem, receipt_handle=receipt)

        async def retime(topic: str, group: str, receipts: list[str]) -> Sequence[Settled]:
            return await self._calls.consuming.retime(topic, group, receipts, ms)

        (out,) = await self._settle(request, [receipt], retime)
        return svc.ChangeInvisibleDurationResponse(
            status=settled(out), receipt_handle=out if isinstance(out, str) else receipt
        )

    async def dead_letter(self, request: Any) -> svc.ForwardMessageToDeadLetterQueueResponse:
        receipt = request.receipt_handle
        self._renewals.settle([receipt])
        (out,) = await self._settle(request, [receipt], self._calls.consuming.dead_letter)
        return svc.ForwardMessageToDeadLetterQueueResponse(status=settled(out))

    async def _settle(self, request: Any, receipts: list[str], fn: _Settle) -> list[Settled]:
        """One outcome per receipt of ``fn(topic, group, receipts)``; an error of the
        whole call for each."""
        try:
            topic = topic_of(request.topic, "topic.name")
            return list(await fn(topic, request.group.name, receipts))
        except DelayqError as exc:
            return [exc] * len(receipts)

    async def renew_forever(self, sessions: Sessions) -> None:
        """Every ``RENEW_EVERY_MS``, keep the messages of live sessions' auto-renewed
        receives invisible (``renewals``); what cannot be renewed is let go."""
        while True:
            await asyncio.sleep(RENEW_EVERY_MS / 1000)
            now = self._calls.now_ms()
            for r in self._renewals.due(now, set(sessions.clients())):
                try:
                    out = await self._calls.consuming.renew(
                        r.topic, r.group, r.receipts, RENEWED_INVISIBLE_MS
                    )
                except DelayqError as exc:  # a replica now, say: the client will see
                    log.info("cannot renew %d receipts: %s", len(r.receipts), exc)
                    self._renewals.settle(r.receipts)
                    continue
                gone = [
                    x for x, o in zip(r.receipts, out, strict=True) if o is not AckOutcome.ACKED
                ]
                self._renewals.settle(gone)
