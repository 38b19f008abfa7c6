"""What ``delayq serve --rocketmq-listen`` is handed (``frontend_spec``): the
RocketMQ 5 service as a front-end of the node (``server.frontends``)."""

from __future__ import annotations

from ..server.frontends import FrontendSpec, NodeParts
from ..server.handlers import Handlers
from .routes import endpoints
from .servicer import MessagingServicer
from .v2 import service_pb2 as svc
from .v2 import service_pb2_grpc as svc_grpc

__all__ = ["SERVICE_NAME", "RocketMQFrontend", "frontend_spec"]

SERVICE_NAME = svc.DESCRIPTOR.services_by_name["MessagingService"].full_name


class RocketMQFrontend:
    def __init__(self, parts: NodeParts, bound: str, dedup_window_ms: int = 0) -> None:
        """``bound``: the address this port got (a route asked without endpoints
        names it); ``dedup_window_ms``: how long sends are deduplicated by the
        client's message id (0: not)."""
        self.servicer = MessagingServicer(parts.calls, endpoints(bound), dedup_window_ms)

    def add_to(self, server: Handlers) -> None:
        svc_grpc.add_MessagingServiceServicer_to_server(self.servicer, server)

    def shutdown(self) -> None:
        self.servicer.shutdown()

    async def close(self) -> None:
        """Nothing of its own to close: the calls layer is the node's."""


def frontend_spec(listen: str, dedup_window_ms: int = 0) -> FrontendSpec:
    """The port at ``listen``; ``dedup_window_ms``: ``--rocketmq-dedup-window``."""
    return FrontendSpec(
        name="rocketmq",
        service=SERVICE_NAME,
        listen=listen,
        make=lambda parts, bound: RocketMQFrontend(parts, bound, dedup_window_ms),
    )
