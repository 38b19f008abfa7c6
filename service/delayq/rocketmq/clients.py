"""The client's own calls of the RocketMQ service (``Clients``): QueryRoute and
QueryAssignment (``routes``, from the node's shard map), Heartbeat,
NotifyClientTermination and the Telemetry stream on which a client writes its
Settings and is answered (``sessions``).

A route asked without endpoints names the ones this port was reached at
(``endpoints``). Every Settings the client writes is answered with its own,
merged with delayq's (a consumer's with its group's policy, when one was set:
``group_policy``); the session lasts while the stream does or until the client
says it ends.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import grpc

from ..delivery.policy import GroupPolicy
from ..errors import DelayqError
from ..server.calls import Calls
from .checks import topic_of
from .convert import client_id
from .names import delayq_topic
from .routes import assignments, queues
from .sessions import Sessions, answer
from .status import ok, status_of
from .v2 import definition_pb2 as rmq
from .v2 import service_pb2 as svc

__all__ = ["Clients"]


class Clients:
    def __init__(self, calls: Calls, sessions: Sessions, endpoints: rmq.Endpoints) -> None:
        """``endpoints``: where this port is reached, for a route asked without any."""
        self._calls = calls
        self._sessions = sessions
        self._endpoints = endpoints

    def _routes(self, request: Any) -> list[rmq.MessageQueue]:
        """The queues of a route (``routes.queues``) for a request naming a topic
        and the endpoints it asked at; raises InvalidArgument."""
        topic_of(request.topic, "topic.name")
        asked = request.endpoints if request.endpoints.addresses else self._endpoints
        return queues(request.topic, self._calls.map, asked)

    def query_route(self, request: Any) -> svc.QueryRouteResponse:
        try:
            routes = self._routes(request)
        except DelayqError as exc:
            return svc.QueryRouteResponse(status=status_of(exc))
        return svc.QueryRouteResponse(status=ok(), message_queues=routes)

    def query_assignment(self, request: Any) -> svc.QueryAssignmentResponse:
        try:
            routes = self._routes(request)
        except DelayqError as exc:
            return svc.QueryAssignmentResponse(status=status_of(exc))
        return svc.QueryAssignmentResponse(status=ok(), assignments=assignments(routes))

    def terminated(self, context: grpc.aio.ServicerContext) -> svc.NotifyClientTerminationResponse:
        self._sessions.close(client_id(context))
        return svc.NotifyClientTerminationResponse(status=ok())

    async def group_policy(self, settings: rmq.Settings) -> GroupPolicy | None:
        """A consumer's group policy on the first topic it subscribes to, when one was
        set there (None: none, a producer, or names delayq does not take)."""
        if settings.WhichOneof("pub_sub") != "subscription":
            return None
        sub = settings.subscription
        if not sub.subscriptions:
            return None
        topic = delayq_topic(sub.subscriptions[0].topic.name)
        try:
            got = await self._calls.groups.policy(topic, sub.group.name)
        except DelayqError:
            return None
        return got.policy if got.explicit else None

    async def telemetry(
        self, request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> AsyncGenerator[svc.TelemetryCommand, None]:
        """Answer every Settings the client writes (``sessions.answer``); the stream
        stays open until the client ends it."""
        client = client_id(context)
        settings = self._calls.settings
        max_body, attempts = settings.max_body_bytes, settings.delivery_attempts
        try:
            async for command in request_iterator:
                if command.WhichOneof("command") != "settings":
                    continue  # a thread dump or a verification result: nothing to do
                policy = await self.group_policy(command.settings)
                answered, st = answer(command.settings, max_body, attempts, policy)
                if st.code == rmq.OK:
                    self._sessions.open(client, answered)
                yield svc.TelemetryCommand(status=st, settings=answered)
        finally:
            self._sessions.close(client)
