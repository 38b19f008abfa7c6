"""The gRPC servers' ports (no I/O but the bind): the public DelayQueue port, the
admin port and the front-ends' ports, each plaintext or TLS, each serving health
and reflection beside its service (``probed``).

The admin service (``delayq.admin.v1.ShardAdmin``: Promote, Fence, Follow, the
replication stream, exports) has a port of its own so that it can be kept from
ordinary clients: on loopback by default, or, with TLS, behind client
certificates of the control plane's CA (``tls.py``). ``exposed`` says when an
admin address is reachable from other hosts without TLS, which ``serve`` warns
about.

Every port is opened without SO_REUSEPORT (``app`` sets ``grpc.so_reuseport`` 0;
gRPC core's default is 1): a second server on a port in use fails at start,
naming the port (``bind`` looks first, so the refusal is one line of its own),
instead of sharing the first one's connections.
"""

from __future__ import annotations

import errno
import ipaddress
import socket

import grpc
from grpc_health.v1 import health, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc

from .handlers import Handlers

__all__ = ["bind", "exposed", "in_use", "is_loopback", "probed"]


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
    chosen when 0). Raises ``RuntimeError`` when it cannot be bound, naming the port
    when another socket listens on it (``in_use``)."""
    in_use(address)
    if credentials is None:
        port = server.add_insecure_port(address)
    else:
        port = server.add_secure_port(address, credentials)
    return f"{address.rpartition(':')[0]}:{port}"


def in_use(address: str) -> None:
    """Raise ``RuntimeError`` naming ``address`` when another socket listens on it
    (a plain bind of each address it resolves to, in turn, with SO_REUSEADDR as gRPC binds,
    so connections in TIME_WAIT do not count); nothing for port 0. Any other
    failure is left to gRPC's bind."""
    host, _, port = address.rpartition(":")
    if port in ("", "0"):
        return
    try:
        found = socket.getaddrinfo(
            host.strip("[]") or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except (OSError, UnicodeError):
        return  # gRPC says what is wrong with the address
    for family, kind, proto, _, sockaddr in found:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(sockaddr)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise RuntimeError(
                        f"port {port} is in use: another server listens on it"
                    ) from None
