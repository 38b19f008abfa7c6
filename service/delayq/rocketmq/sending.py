"""The producer's calls of the RocketMQ service (``Sending``): SendMessage and
RecallMessage, translated onto the node's calls (``server.calls``).

- ``SendMessage`` schedules its messages at ``delivery_timestamp`` (none: now),
  properties as headers, the first ``keys`` value as the delayq key
  (``convert``): keyless ones and those of this shard's keys here, in one
  batch, those of other shards' keys at their owners (``passing``), all at
  once; FIFO (a message group) and transaction messages are NOT_IMPLEMENTED
  (``checks``). Each entry answers the client's message id and a recall handle
  (``handles``). With a dedup window (``--rocketmq-dedup-window``, > 0) a
  message is deduplicated by the client's message id (the engine's dedup ids):
  a resend while the first message is pending, or within the window after it
  was sent (a client's retry after a lost answer), stores nothing and answers
  the first message's recall handle. Per shard: a retry of a keyless message
  that lands on another shard is stored again.
- ``RecallMessage`` cancels by the handle's delayq id, here or at the shard
  that holds it (``Calls.recall``), durably, at any time before delivery, and
  answers the client's message id.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import grpc

from ..errors import DelayqError
from ..server.calls import Calls
from ..server.forwarding import mode_of
from ..server.ownership import Mode
from ..server.statuscodes import PassedOn
from .convert import Sendable, sendable
from .handles import recalled
from .names import delayq_topic
from .passing import Passing, elsewhere
from .status import overall, passed_on, status_of
from .status import recalled as recall_status
from .v2 import service_pb2 as svc

__all__ = ["Sending"]


class Sending:
    def __init__(self, calls: Calls, dedup_window_ms: int = 0) -> None:
        """``dedup_window_ms``: how long a client's message id holds (0: sends are
        not deduplicated)."""
        self._calls = calls
        self._dedup_window_ms = dedup_window_ms
        self._passing = Passing(calls)

    async def send(
        self, request: Any, context: grpc.aio.ServicerContext
    ) -> svc.SendMessageResponse:
        s = sendable(request.messages, self._dedup_window_ms)
        calls = self._calls
        if s.rows and calls.topology.moving() is not None:
            await calls.until_unheld(s.keys, context.time_remaining())
        away = elsewhere(s.keys, calls.map, calls.shard)
        if away and mode_of(context.invocation_metadata()) is Mode.CLIENT:
            await self._spread(request, s, away, context.time_remaining())
        else:  # all here (a send passed on to this node is never passed on again)
            await self._schedule(s)
        return svc.SendMessageResponse(
            status=overall([e.status for e in s.entries]), entries=s.entries
        )

    async def _spread(
        self, request: Any, s: Sendable, away: dict[int, list[int]], timeout_s: float | None
    ) -> None:
        """Schedule ``s``'s rows here but those ``away`` (by owner), passed on to
        their owners, all at once."""
        gone = {k for rows in away.values() for k in rows}
        jobs: list[Awaitable[None]] = [
            self._passing.send(request, s.only(rows), target, timeout_s)
            for target, rows in away.items()
        ]
        jobs.append(self._schedule(s.only([k for k in range(len(s.rows)) if k not in gone])))
        await asyncio.gather(*jobs)

    async def _schedule(self, s: Sendable) -> None:
        """Schedule ``s``'s rows here; their outcomes into its entries."""
        if not s.rows:
            return
        out: Any
        try:
            out = await self._calls.schedule(s.batch(), "messages")
        except DelayqError as exc:
            out = exc
        s.sent(out)

    async def recall(
        self, request: Any, context: grpc.aio.ServicerContext
    ) -> svc.RecallMessageResponse:
        topic = delayq_topic(request.topic.name)
        try:
            mid, client_id = recalled(request.recall_handle, topic)
            outcome = await self._calls.recall(mid, "recall_handle", context.time_remaining())
        except DelayqError as exc:
            return svc.RecallMessageResponse(status=status_of(exc))
        except PassedOn as exc:
            return svc.RecallMessageResponse(status=passed_on(exc))
        return svc.RecallMessageResponse(status=recall_status(outcome), message_id=client_id or mid)
