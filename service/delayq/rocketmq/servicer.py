"""The ``apache.rocketmq.v2.MessagingService`` servicer (grpc.aio): RocketMQ 5's
protocol over the node's calls layer (``server.calls.Calls``, the one delayq's
own servicer uses), one activity a concern, each handler a call of one:

- ``clients``: QueryRoute, QueryAssignment, Heartbeat, NotifyClientTermination,
  Telemetry (routes and client sessions);
- ``sending``: SendMessage, RecallMessage;
- ``receiving``: ReceiveMessage;
- ``settling``: AckMessage, ChangeInvisibleDuration,
  ForwardMessageToDeadLetterQueue, and the renewal of auto-renewed receives
  (a task of the servicer, ended by ``shutdown``).

Requests are checked (``checks``) and converted (``convert``) to the engine's
values; answers carry a RocketMQ ``Status`` (``status``) inside a gRPC-OK
response, one per entry of a batch. Pull, offsets, transactions and lite
subscriptions answer NOT_IMPLEMENTED.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, TypeAlias

import grpc

from ..server.calls import Calls
from .clients import Clients
from .receiving import Receiving
from .renewals import Renewals
from .sending import Sending
from .sessions import Sessions
from .settling import Settling
from .status import not_implemented, ok
from .v2 import definition_pb2 as rmq
from .v2 import service_pb2 as svc
from .v2 import service_pb2_grpc as svc_grpc

__all__ = ["MessagingServicer"]

Context: TypeAlias = grpc.aio.ServicerContext


class MessagingServicer(svc_grpc.MessagingServiceServicer):  # type: ignore[misc]
    def __init__(self, calls: Calls, endpoints: rmq.Endpoints, dedup_window_ms: int = 0) -> None:
        """``endpoints``: where this port is reached, for a route asked without any;
        ``dedup_window_ms``: how long sends are deduplicated by the client's message
        id (0: not; ``sending``)."""
        self.sessions = Sessions()
        self.renewals = Renewals()
        self._clients = Clients(calls, self.sessions, endpoints)
        self._sending = Sending(calls, dedup_window_ms)
        self._receiving = Receiving(calls, self.sessions, self.renewals)
        self._settling = Settling(calls, self.renewals)
        renewing = self._settling.renew_forever(self.sessions)
        self._renewer = asyncio.get_running_loop().create_task(renewing)

    def shutdown(self) -> None:
        self._renewer.cancel()

    # -- clients
    async def QueryRoute(self, request: Any, context: Context) -> Any:
        return self._clients.query_route(request)

    async def QueryAssignment(self, request: Any, context: Context) -> Any:
        return self._clients.query_assignment(request)

    async def Heartbeat(self, request: Any, context: Context) -> Any:
        return svc.HeartbeatResponse(status=ok())

    async def NotifyClientTermination(self, request: Any, context: Context) -> Any:
        return self._clients.terminated(context)

    async def Telemetry(
        self, request_iterator: AsyncIterator[Any], context: Context
    ) -> AsyncIterator[Any]:
        async with contextlib.aclosing(self._clients.telemetry(request_iterator, context)) as out:
            async for command in out:
                yield command

    # -- sending
    async def SendMessage(self, request: Any, context: Context) -> Any:
        return await self._sending.send(request, context)

    async def RecallMessage(self, request: Any, context: Context) -> Any:
        return await self._sending.recall(request, context)

    # -- receiving and settling
    async def ReceiveMessage(self, request: Any, context: Context) -> AsyncIterator[Any]:
        async with contextlib.aclosing(self._receiving.receive(request, context)) as out:
            async for response in out:
                yield response

    async def AckMessage(self, request: Any, context: Context) -> Any:
        return await self._settling.ack(request)

    async def ChangeInvisibleDuration(self, request: Any, context: Context) -> Any:
        return await self._settling.change_invisible_duration(request)

    async def ForwardMessageToDeadLetterQueue(self, request: Any, context: Context) -> Any:
        return await self._settling.dead_letter(request)

    # -- not supported
    async def PullMessage(self, request: Any, context: Context) -> AsyncIterator[Any]:
        yield svc.PullMessageResponse(
            status=not_implemented("PullMessage (use a SimpleConsumer or PushConsumer)")
        )

    async def UpdateOffset(self, request: Any, context: Context) -> Any:
        return svc.UpdateOffsetResponse(status=not_implemented("UpdateOffset"))

    async def GetOffset(self, request: Any, context: Context) -> Any:
        return svc.GetOffsetResponse(status=not_implemented("GetOffset"))

    async def QueryOffset(self, request: Any, context: Context) -> Any:
        return svc.QueryOffsetResponse(status=not_implemented("QueryOffset"))

    async def EndTransaction(self, request: Any, context: Context) -> Any:
        return svc.EndTransactionResponse(status=not_implemented("a transaction message"))

    async def SyncLiteSubscription(self, request: Any, context: Context) -> Any:
        return svc.SyncLiteSubscriptionResponse(status=not_implemented("a lite subscription"))
