"""Prometheus metrics of one shard, read from the engine at scrape time (nothing
is counted twice on the hot path). Served on ``--metrics-listen`` at /metrics,
beside ``/readyz`` (``readiness``: the plain HTTP probe)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)

from ..engine import Engine
from ..replication.node import ShardNode
from ..role import Role
from .decoding import RefusalLog
from .readiness import SERVING, Readiness, with_readiness
from .topology import Topology

__all__ = [
    "EngineCollector",
    "RefusalCollector",
    "ReplicationCollector",
    "TopologyCollector",
    "serve_metrics",
]

_COUNTERS = {
    "scheduled": "Messages accepted by Schedule.",
    "delivered": "Messages released into ready queues.",
    "cancelled": "Messages cancelled.",
    "rescheduled": "Messages rescheduled.",
    "rolled": "Far-future messages re-parked (one per hop).",
    "blocks_added": "Compaction blocks begun (a block file made).",
    "blocked": "Messages taken out of the roll cycle into compaction blocks.",
    "loaded": "Messages loaded into the wheel from compaction blocks.",
    "blocks_loaded": "Compaction blocks loaded whole.",
    "rolls_avoided": "Parked ROLL entries of blocked messages dropped, not re-appended.",
    "acked": "Receipts acked.",
    "dead_lettered": (
        "Messages sent to their group's dead-letter topic (dlq.<group>): past the group's "
        "last delivery attempt, or forwarded by a client."
    ),
    "expired": "Delivered messages retention removed before their group acked them.",
    "quarantined": "Unreadable records skipped and reported.",
    "early": "Messages released before their time (must stay 0).",
    "checkpoints": "Checkpoints written.",
    "state_chunks_retired": "State-map chunk files deleted, their messages all long done.",
    "stage_failures": "Failed steps of the enqueue, scan and release stages (each retried).",
    "checkpoint_failures": "Checkpoints that failed (the next one retries).",
}


class EngineCollector:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def collect(self) -> Iterator[Any]:
        e = self._engine
        yield GaugeMetricFamily(
            "delayq_open",
            "1 while the shard takes calls; 0 while it recovers or closes.",
            value=e.running,
        )
        if not e.running:  # its state is being rebuilt or torn down: nothing to read
            return
        counters = dict(e.counters)
        for name, doc in _COUNTERS.items():
            yield CounterMetricFamily(f"delayq_{name}", doc, value=counters.get(name, 0))
        rejected = CounterMetricFamily(
            "delayq_congestion_rejections",
            "Schedules refused as congested, by reason: queue, slot, disk (no space left).",
            labels=["reason"],
        )
        for reason in ("queue", "slot", "disk"):
            rejected.add_metric([reason], counters.get(f"congested_{reason}", 0))
        yield rejected
        commit = e.group_commit
        yield CounterMetricFamily("delayq_fsyncs", "CommitLog fsyncs.", value=commit.fsyncs)
        yield CounterMetricFamily(
            "delayq_fsync_seconds", "Time spent in CommitLog fsync.", value=commit.fsync_seconds
        )
        gauges = e.gauges()
        for name, doc in (
            ("enqueue_queue", "Messages accepted, not yet linked into the wheel."),
            ("release_buffer", "Messages read from fired slots, waiting for their ms."),
            ("near_rows", "Messages of slots about to fire, also kept in memory."),
            ("scan_lag_slots", "Wheel slots due but not yet scanned."),
        ):
            yield GaugeMetricFamily(f"delayq_{name}", doc, value=gauges[name])
        pending = GaugeMetricFamily("delayq_pending", "Pending messages.", labels=["topic"])
        for topic, count in e.pending_by_topic().items():
            pending.add_metric([topic], count)
        yield pending
        late = e.lateness_snapshot()
        yield HistogramMetricFamily(
            "delayq_lateness_ms",
            "Release time minus due time, ms.",
            buckets=late.cumulative(),
            sum_value=late.sum_ms,
        )


class TopologyCollector:
    """The shard map this node serves by, and the calls it refused as another
    shard's (a client with a stale map, or a misrouted one)."""

    def __init__(self, topology: Topology) -> None:
        self._topology = topology

    def collect(self) -> Iterator[Any]:
        t = self._topology
        yield GaugeMetricFamily("delayq_shard", "This node's shard index.", value=t.shard)
        yield GaugeMetricFamily(
            "delayq_topology_epoch", "Epoch of the shard map served.", value=t.map.topology_epoch
        )
        yield GaugeMetricFamily("delayq_shards", "Shards in the map served.", value=t.map.count)
        yield CounterMetricFamily(
            "delayq_wrong_shard_refusals",
            "Calls refused FAILED_PRECONDITION: a key, id or receipt of another shard.",
            value=t.refused,
        )


class RefusalCollector:
    """Requests refused because they did not decode (``decoding.RefusalLog``, whose
    log lines are at most one a minute)."""

    def __init__(self, refusals: RefusalLog) -> None:
        self._refusals = refusals

    def collect(self) -> Iterator[Any]:
        yield CounterMetricFamily(
            "delayq_undecodable_requests",
            "Requests refused INVALID_ARGUMENT: not valid protobuf, or a string not UTF-8.",
            value=self._refusals.total,  # an int the event loop bumps: read whole
        )


class ReplicationCollector:
    """This node's role and epoch, and as a master its replicas' lag and its
    in-sync set."""

    def __init__(self, node: ShardNode[Engine]) -> None:
        self._node = node

    def collect(self) -> Iterator[Any]:
        n, e = self._node, self._node.engine
        role = GaugeMetricFamily(
            "delayq_role", "1 for this node's role in its shard.", labels=["role"]
        )
        for name in Role:
            role.add_metric([name], e.role == name)
        yield role
        yield GaugeMetricFamily("delayq_epoch", "The shard epoch this node is in.", value=n.epoch)
        yield GaugeMetricFamily(
            "delayq_fenced", "1 once told to stop acking and delivering (Fence).", value=e.fenced
        )
        yield GaugeMetricFamily(
            "delayq_delivering",
            "1 while this node may ack and deliver (a master, not fenced, lease running).",
            value=e.delivering(),
        )
        yield CounterMetricFamily(
            "delayq_failovers", "Promotions this process took.", value=n.failovers
        )
        yield GaugeMetricFamily(
            "delayq_replica_streaming",
            "A replica: 1 while its stream from the master is up.",
            value=n.streaming,
        )
        if e.role is not Role.MASTER or not e.running:
            return
        insync = n.followers.insync()
        yield GaugeMetricFamily(
            "delayq_insync_members", "The master's in-sync set, itself included.", value=len(insync)
        )
        yield GaugeMetricFamily(
            "delayq_high_water",
            "CommitLog position every in-sync member has fsynced.",
            value=n.followers.high_water,
        )
        end = e.commitlog_end
        lag_bytes = GaugeMetricFamily(
            "delayq_replication_lag_bytes", "Master log end minus a replica's.", labels=["replica"]
        )
        lag_ms = GaugeMetricFamily(
            "delayq_replication_lag_ms",
            "Age of the oldest record sent that a replica has not written.",
            labels=["replica"],
        )
        connected = GaugeMetricFamily(
            "delayq_replica_connected", "1 while a replica streams.", labels=["replica"]
        )
        now = n.followers.clock.monotonic_s()  # the clock its followers' times are on
        for f in n.followers.snapshot():
            lag_bytes.add_metric([f.name], max(0, end - f.written))
            lag_ms.add_metric([f.name], f.lag_ms(now))
            connected.add_metric([f.name], f.connected)
        yield from (lag_bytes, lag_ms, connected)


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No line a scrape or probe."""


def serve_metrics(
    engine: Engine,
    address: str,
    topology: Topology,
    node: ShardNode[Engine] | None = None,
    refusals: RefusalLog | None = None,
    readiness: Readiness | None = None,
) -> WSGIServer:
    """Start the /metrics (and /readyz) HTTP server in a thread; returns it
    (``server_port``: its port; ``shutdown()`` then ``server_close()`` stop it)."""
    host, _, port = address.rpartition(":")
    registry = CollectorRegistry()
    registry.register(EngineCollector(engine))
    registry.register(TopologyCollector(topology))
    if node is not None:
        registry.register(ReplicationCollector(node))
    if refusals is not None:
        registry.register(RefusalCollector(refusals))
    host = host.strip("[]") or "0.0.0.0"
    family, _, _, _, sockaddr = socket.getaddrinfo(
        host, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]

    class Server(ThreadingMixIn, WSGIServer):
        address_family = family
        daemon_threads = True  # a scrape in flight never holds the shutdown

    app = with_readiness(make_wsgi_app(registry), readiness or Readiness(SERVING))
    server = make_server(str(sockaddr[0]), int(port), app, Server, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
