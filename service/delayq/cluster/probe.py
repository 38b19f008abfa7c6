"""Asking one node how it is, over gRPC: its health, then its ``Stats.node``
(``probe``; ``probe_stats``: the whole ``Stats``, for ``delayq top``), or the
shard map it serves by (``shard_map``: ``GetRoute``).

The state is the standard health check's answer for the whole server (service
``""``): SERVING is ``serving``; NOT_SERVING (the engine recovering, or the node
shutting down) is ``recovering``; no answer within the timeout is ``down``.
``Stats`` is asked only of a serving node (a recovering one refuses it).

Each probe dials a fresh channel with its own subchannel pool: a channel that
once found the node down would wait out gRPC's reconnect back-off (up to minutes)
and report a restarted node down long after it serves again.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ..client import core
from ..client.results import ShardStats
from ..client.routing import route_of
from ..shardmap import ShardMap
from ..tls import TlsConfig, dial
from ..v1 import delayq_pb2_grpc

__all__ = [
    "DOWN",
    "RECOVERING",
    "SERVING",
    "STATES",
    "Probe",
    "health",
    "probe",
    "probe_stats",
    "shard_map",
    "stats",
]

T = TypeVar("T")

SERVING, RECOVERING, DOWN = "serving", "recovering", "down"
STATES = (SERVING, RECOVERING, DOWN)
_CHANNEL_OPTIONS = [
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


@dataclass(frozen=True, kw_only=True)
class Probe:
    state: str
    node: dict[str, Any] | None = None
    """``Stats.node`` of a serving node (shard, epoch, role, commitlog_end,
    topology_epoch, address); None when it was not asked or did not answer."""


def _health(channel: grpc.Channel, timeout_s: float) -> str:
    try:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=timeout_s
        )
    except grpc.RpcError:
        return DOWN
    return SERVING if reply.status == health_pb2.HealthCheckResponse.SERVING else RECOVERING


def health(address: str, timeout_s: float = 1.0, tls: TlsConfig | None = None) -> str:
    """The node's state: ``serving``, ``recovering`` or ``down``."""
    with dial(address, tls, _CHANNEL_OPTIONS) as channel:
        return _health(channel, timeout_s)


def _send(channel: grpc.Channel, call: core.Call[T]) -> T:
    """``call`` on the node's public service, its answer parsed."""
    stub = delayq_pb2_grpc.DelayQueueStub(channel)
    return call.parse(getattr(stub, call.method)(call.request, timeout=call.timeout_s))


def _shard_stats(channel: grpc.Channel, timeout_s: float) -> ShardStats | None:
    try:
        return _send(channel, core.stats("", timeout_s))
    except grpc.RpcError:
        return None


def probe(address: str, timeout_s: float = 1.0, tls: TlsConfig | None = None) -> Probe:
    """The node's state and, when it serves, its ``Stats.node``."""
    state, got = probe_stats(address, timeout_s, tls)
    return Probe(state=state, node=None if got is None else asdict(got.node))


def probe_stats(
    address: str, timeout_s: float = 1.0, tls: TlsConfig | None = None
) -> tuple[str, ShardStats | None]:
    """The node's state and, when it serves, its whole ``Stats`` (every topic's
    figures, lateness, ``node``); None when it was not asked or did not answer."""
    with dial(address, tls, _CHANNEL_OPTIONS) as channel:
        state = _health(channel, timeout_s)
        return state, _shard_stats(channel, timeout_s) if state == SERVING else None


def stats(
    address: str, timeout_s: float = 1.0, tls: TlsConfig | None = None
) -> dict[str, Any] | None:
    """The node's own ``Stats`` as plain data (``dataclasses.asdict`` of its
    ``ShardStats``); None: no answer."""
    with dial(address, tls, _CHANNEL_OPTIONS) as channel:
        got = _shard_stats(channel, timeout_s)
    return None if got is None else asdict(got)


def shard_map(address: str, timeout_s: float = 1.0, tls: TlsConfig | None = None) -> ShardMap:
    """The shard map the node serves by (its ``GetRoute``); raises ``grpc.RpcError``
    when it does not answer, ``ShardMapError`` when its map is unusable."""
    with dial(address, tls, _CHANNEL_OPTIONS) as channel:
        return route_of(_send(channel, core.route("", timeout_s)))
