"""Network addresses (pure): what the server may listen on and what a client may dial.

A listen address is host:port with a port of 0-65535 (0: any free port). A client's
target is either a gRPC target URI with a scheme gRPC resolves (``dns:``, ``unix:``,
``ipv4:``, ...), passed on untouched, or host:port with a port of 1-65535. gRPC
itself would take ``127.0.0.1:99999`` and dial port 34463 (the port wrapped to 16
bits), so a plain host:port is checked here first. The host may be empty, a name,
IPv4 or an IPv6 address in brackets.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

__all__ = [
    "ADMIN_ADDRESSES_ENV",
    "ADMIN_PORT",
    "ADMIN_PORT_ENV",
    "DEFAULT_ADDRESS",
    "DEFAULT_HOST",
    "GRPC_SCHEMES",
    "METRICS_PORT",
    "PUBLIC_PORT",
    "ROCKETMQ_PORT",
    "admin_address",
    "check_address",
    "check_target",
]

PUBLIC_PORT = 7420
"""The public gRPC API's port (``delayq serve --listen``, a pod's ``spec.port``)."""
METRICS_PORT = 7421
"""The Prometheus metrics port."""
ADMIN_PORT = 7422
"""The admin service's port (ShardAdmin: control planes and replicas, not clients)."""
ROCKETMQ_PORT = 7423
"""The RocketMQ 5 protocol's port where a layout gives one (``--rocketmq-listen``;
off unless asked for)."""
DEFAULT_HOST = "127.0.0.1"
DEFAULT_ADDRESS = f"{DEFAULT_HOST}:{PUBLIC_PORT}"
"""Where ``delayq serve`` listens and a client, the CLI or the Spark job dials by
default."""

GRPC_SCHEMES = ("dns", "unix", "unix-abstract", "ipv4", "ipv6", "vsock", "xds", "google-c2p")
"""Target URI schemes gRPC's resolvers know: such a target is left to gRPC."""


def check_address(name: str, value: str, *, lowest_port: int = 0) -> None:
    """Raise ValueError naming ``name`` unless ``value`` is host:port with a port of
    ``lowest_port``-65535; the host may be empty, a name, IPv4 or [IPv6]."""
    host, colon, port = value.rpartition(":")
    if not colon or not port.isdigit() or not lowest_port <= int(port) <= 65535:
        raise ValueError(f"{name}: {value!r} is not host:port with a port of {lowest_port}-65535")
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        raise ValueError(f"{name}: {value!r}: write an IPv6 host in brackets, [::1]:7420")


def check_target(value: str, name: str = "address") -> None:
    """Raise ValueError naming ``name`` unless a client can dial ``value``: a gRPC
    target URI (``GRPC_SCHEMES``) or host:port with a port of 1-65535."""
    scheme, colon, _ = value.partition(":")
    if colon and scheme.lower() in GRPC_SCHEMES:
        return
    check_address(name, value, lowest_port=1)


ADMIN_ADDRESSES_ENV = "DELAYQ_ADMIN_ADDRESSES"
"""A JSON object, public address -> admin address, of every node (local clusters)."""
ADMIN_PORT_ENV = "DELAYQ_ADMIN_PORT"
"""The admin port every node uses on its public host (a Kubernetes topic's pods)."""


def admin_address(public: str, env: Mapping[str, str]) -> str:
    """The admin address of the node whose public address is ``public``, for tools
    that learn nodes from the shard map (a rebalance job): from
    ``DELAYQ_ADMIN_ADDRESSES`` when it names it, else its host with
    ``DELAYQ_ADMIN_PORT``, else ``public`` itself (a node of before the admin port
    had its own). Raises ValueError when ``DELAYQ_ADMIN_ADDRESSES`` is not a JSON
    object."""
    if text := env.get(ADMIN_ADDRESSES_ENV):
        try:
            table = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"{ADMIN_ADDRESSES_ENV}: not JSON: {exc}") from None
        if not isinstance(table, dict):
            raise ValueError(f"{ADMIN_ADDRESSES_ENV}: must be an object")
        if public in table:
            return str(table[public])
    if port := env.get(ADMIN_PORT_ENV):
        return f"{public.rpartition(':')[0]}:{port}"
    return public
