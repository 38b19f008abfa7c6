"""The producer's calls of the RocketMQ service (``Sending``): SendMessage and
RecallMessage, translated onto the node's calls (``server.calls``).

- ``SendMessage`` schedules keyless messages (any active shard takes them) at
  ``delivery_timestamp`` (none: now), properties as headers (``convert``), in
  one batch; FIFO (a message group) and transaction messages are
  NOT_IMPLEMENTED (``checks``). Each entry answers the client's message id and
  a recall handle (``handles``).
- ``RecallMessage`` cancels by the handle's delayq id, here or at the shard
  that holds it (``Calls.recall``), durably, at any time before delivery, and
  answers the client's message id.
"""

from __future__ import annotations

from typing import Any

import grpc

from ..errors import DelayqError
from ..server.calls import Calls
from ..server.statuscodes import PassedOn
from .convert import sendable
from .handles import recalled
from .names import delayq_topic
from .status import overall, passed_on, status_of
from .status import recalled as recall_status
from .v2 import service_pb2 as svc

__all__ = ["Sending"]


class Sending:
    def __init__(self, calls: Calls) -> None:
        self._calls = calls

    async def send(self, request: Any) -> svc.SendMessageResponse:
        s = sendable(request.messages)
        if s.rows:
            out: Any
            try:
                out = await self._calls.schedule(s.batch(), "messages")
            except DelayqError as exc:
                out = exc
            s.sent(out)
        return svc.SendMessageResponse(
            status=overall([e.status for e in s.entries]), entries=s.entries
        )

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
