"""The consumer's receive of the RocketMQ service (``Receiving``):
ReceiveMessage, translated onto the node's long poll (``Consuming.looks``), each
message converted once, from the engine's batch to RocketMQ's (``convert``).

A receive long-polls (the client's ``long_polling_timeout``, at most its
deadline less ``convert.DEADLINE_MARGIN_S``; none given, as by the Go client:
its deadline less the ``request_timeout`` of its Settings, which is the
client's await duration) and answers a status frame, the messages, then a
delivery timestamp frame; an empty poll ends with OK. Only this node's shard's
queue is served (``checks.queue_problem``). Messages the group's tag filter
does not match are acknowledged at once (``filters``). One without an invisible
duration (a PushConsumer's) is held for renewal while its client's session
lives (``renewals``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from typing import Any

import grpc

from ..engine import ReceivedBatch
from ..errors import DelayqError
from ..server.calls import Calls
from . import properties as props
from .checks import queue_problem
from .convert import ReceiveArgs, client_id, message_of, receive_args
from .filters import TagFilter
from .renewals import Renewals
from .sessions import Sessions
from .status import ok, status_of
from .v2 import definition_pb2 as rmq
from .v2 import service_pb2 as svc

__all__ = ["Receiving"]


class Receiving:
    def __init__(self, calls: Calls, sessions: Sessions, renewals: Renewals) -> None:
        self._calls = calls
        self._sessions = sessions
        self._renewals = renewals

    async def receive(
        self, request: Any, context: grpc.aio.ServicerContext
    ) -> AsyncGenerator[svc.ReceiveMessageResponse, None]:
        calls = self._calls
        problem = queue_problem(request.message_queue, calls.map, calls.shard)
        if problem is not None:
            yield svc.ReceiveMessageResponse(status=problem)
            return
        client = client_id(context)
        try:
            expression = request.filter_expression
            wanted = TagFilter.parse(rmq.FilterType.Name(expression.type), expression.expression)
            reserve_ms = self._sessions.request_timeout_ms(client)
            args = receive_args(request, context.time_remaining(), reserve_ms)
        except DelayqError as exc:
            yield svc.ReceiveMessageResponse(status=status_of(exc))
            return
        got: ReceivedBatch | None = None
        try:
            looks = calls.consuming.looks(
                args.topic,
                args.group,
                max_messages=args.max_messages,
                invisible_ms=args.invisible_ms,
                wait_ms=args.wait_ms,
            )
            async with contextlib.aclosing(looks):
                async for batch in looks:
                    got = await self._filtered(args, batch, wanted)
                    if got.ids:
                        break
        except DelayqError as exc:
            yield svc.ReceiveMessageResponse(status=status_of(exc))
            return
        topic = request.message_queue.topic.name
        count = 0 if got is None else len(got.ids)
        if got is not None and count and client and not request.HasField("invisible_duration"):
            self._renewals.hold(client, args.topic, args.group, got.receipts, calls.now_ms())
        yield svc.ReceiveMessageResponse(status=ok())
        # each message converted while the one before it is written out
        for i in range(count):
            assert got is not None
            yield svc.ReceiveMessageResponse(message=message_of(got, i, topic, args.invisible_ms))
        last = svc.ReceiveMessageResponse()
        last.delivery_timestamp.FromMilliseconds(calls.now_ms())
        yield last

    async def _filtered(
        self, args: ReceiveArgs, got: ReceivedBatch, wanted: TagFilter
    ) -> ReceivedBatch:
        """The messages the group's filter matches; the others are acknowledged."""
        if wanted.tags is None:
            return got
        keep = [wanted.matches(h.get(props.TAG, "")) for h in got.headers]
        if all(keep):
            return got
        skipped = [r for r, k in zip(got.receipts, keep, strict=True) if not k]
        await self._calls.consuming.ack_own(args.topic, args.group, skipped)
        return got.select(keep)
