"""The gRPC servers' ports (no I/O but the bind): the public DelayQueue port, the
admin port and the front-ends' ports, each plaintext or TLS, each serving health
and reflection beside its service (``probed``).

The admin service (``delayq.admin.v1.ShardAdmin``: Promote, Fence, Follow, the
replication stream, exports) has a port of its own so that it can be kept from
ordinary clients: on loopback by default, or, with TLS, behind client
certificates of the control plane's CA (``tls.py``). ``exposed`` says when an
admin address is reachable from other hosts without TLS, which ``serve`` warns
about.
"""

from __future__ import annotations

import ipaddress

import grpc
from grpc_health.v1 import health, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc

from .handlers import Handlers

__all__ = ["bind", "exposed", "is_loopback", "probed"]


def probed(handlers: Handlers, service: str) -> health.aio.HealthServicer:
    """Serve health and reflection (naming ``service``) beside ``service``, among a
    port's ``handlers``; the health servicer, for the caller to say what is SERVING."""
    checks = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checks, handlers)
    names = (service, health.SERVICE_NAME, reflection.SERVICE_NAME)
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(
        reflection.aio.ReflectionServicer(names), handlers
    )
    return checks


def is_loopback(address: str) -> bool:
    """Whether host:port listens on loopback only (127.0.0.0/8, [::1], localhost);
    an empty host or 0.0.0.0 listens everywhere."""
    host = address.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: whatever it resolves to


def exposed(admin_listen: str, tls: bool) -> bool:
    """An admin port anyone on the network may call: not loopback and no TLS."""
    return not tls and not is_loopback(admin_listen)


def bind(
    server: grpc.aio.Server,
    address: str,
    credentials: grpc.ServerCredentials | None = None,
) -> str:
    """Listen on ``address`` (TLS with ``credentials``); the address bound (its port
    chosen when 0). Raises ``RuntimeError`` when it cannot be bound."""
    if credentials is None:
        port = server.add_insecure_port(address)
    else:
        port = server.add_secure_port(address, credentials)
    return f"{address.rpartition(':')[0]}:{port}"
