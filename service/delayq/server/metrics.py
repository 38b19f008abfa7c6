"""Prometheus metrics of one shard node, read from the engine, the node and the
data directory at scrape time (nothing is counted twice on the hot path; the one
thing observed per call is the RPC histogram of ``rpcmetrics``). Served on
``--metrics-listen`` at /metrics, beside ``/readyz`` (``readiness``: the plain
HTTP probe). Names, types and labels are pinned by ``tests/server/test_metric_names.py``
and listed in ``docs/operations.md``; a change there is a change for every
dashboard and alert (``charts/delayq/dashboards``, ``charts/delayq/rules``)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import (
    CollectorRegistry,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
)

from ..engine import Engine, Replicating
from ..replication.node import ShardNode
from ..role import Role
from ..store import diskusage
from .calls import Calls
from .decoding import RefusalLog
from .exposition import Family, labels, lateness_family, wsgi_app
from .groupmetrics import group_families
from .pushmetrics import PushCollector
from .readiness import SERVING, Readiness, with_readiness
from .rpcmetrics import RpcDurations
from .schedulemetrics import schedule_families
from .topology import Topology

__all__ = [
    "DUE_WITHIN",
    "EngineCollector",
    "MetricSources",
    "RefusalCollector",
    "ReplicationCollector",
    "TopologyCollector",
    "registry",
    "serve_metrics",
    "topic_families",
]

_COUNTERS = {
    "scheduled": (
        "New messages clients scheduled (not a reschedule's copy, a rebalance's import, a "
        "dead letter, nor a schedule's plans and firings: their own counters)."
    ),
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
    "released": "Messages a rebalance moved out of this shard (released to their new one).",
    "imported": "Messages a rebalance moved into this shard (imported from their old one).",
}
DUE_WITHIN = {"1m": 60_000, "1h": 3_600_000, "1d": 86_400_000}
"""``delayq_due_messages``' ``within`` label: its bound, ms (bounds of the engine's
due-time histogram, ``timers.memory.duecounts.BUCKETS_MS``)."""


@dataclass(frozen=True)
class MetricSources:
    """What one node's /metrics reads."""

    engine: Engine
    topology: Topology
    node: ShardNode[Replicating] | None = None
    refusals: RefusalLog | None = None
    durations: RpcDurations | None = None
    calls: Calls | None = None


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
        yield from _disk(e)  # read from the directory: also while it recovers
        if not e.running:  # its state is being rebuilt or torn down: nothing to read
            return
        seen = e.observing
        counters = dict(seen.counters)
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
        keyed = CounterMetricFamily(
            "delayq_key_outcomes",
            "Keyed schedules whose key was taken, by outcome: exists (if_exists reject), "
            "kept (keep, or a dedup id), replaced (pending messages replace cancelled).",
            labels=["outcome"],
        )
        for outcome in ("exists", "kept", "replaced"):
            keyed.add_metric([outcome], counters.get(f"key_{outcome}", 0))
        yield keyed
        commit = seen.group_commit
        yield CounterMetricFamily("delayq_fsyncs", "CommitLog fsyncs.", value=commit.fsyncs)
        yield CounterMetricFamily(
            "delayq_fsync_seconds", "Time spent in CommitLog fsync.", value=commit.fsync_seconds
        )
        gauges = seen.gauges()
        for name, doc in (
            ("enqueue_queue", "Messages accepted, not yet linked into the wheel."),
            ("release_buffer", "Messages read from fired slots, waiting for their ms."),
            ("near_rows", "Messages of slots about to fire, also kept in memory."),
            ("scan_lag_slots", "Wheel slots due but not yet scanned."),
            ("key_index_entries", "Keys filed in the shard's key index (some may have ended)."),
            ("dedup_index_entries", "Dedup ids filed in the shard's dedup index."),
        ):
            yield GaugeMetricFamily(f"delayq_{name}", doc, value=gauges[name])
        yield lateness_family(
            "delayq_lateness_seconds",
            "Release time minus due time (0: on time or early; early ones also count in "
            "delayq_early_total).",
            seen.lateness_snapshot(),
        )
        yield GaugeMetricFamily(
            "delayq_release_lag_seconds",
            "How far the oldest due, unreleased message is behind now.",
            value=seen.release_lag_ms() / 1000,
        )
        yield GaugeMetricFamily(
            "delayq_recovery_seconds",
            "How long recovery took at this process' start.",
            value=float(e.recovery.get("seconds", 0.0)),
        )
        yield from schedule_families(e)


def _disk(e: Engine) -> Iterator[Any]:
    """The data directory's bytes per kind of file, and its volume's room."""
    data_dir = e.settings.data_dir
    used = GaugeMetricFamily(
        "delayq_data_bytes",
        "Bytes the data directory's files take on disk, by kind.",
        labels=["kind"],
    )
    for kind, size in diskusage.usage(data_dir).items():
        used.add_metric([kind], size)
    yield used
    room = diskusage.volume(data_dir)
    yield GaugeMetricFamily(
        "delayq_data_volume_free_bytes",
        "Bytes free on the data directory's file system.",
        value=room.free_bytes,
    )
    yield GaugeMetricFamily(
        "delayq_data_volume_size_bytes",
        "Size of the data directory's file system, bytes.",
        value=room.size_bytes,
    )


def topic_families(engine: Engine) -> list[Family]:
    """The families with a series per topic or per (topic, group), for
    ``exposition`` to write (none while the shard is not open)."""
    if not engine.running:
        return []
    pending = Family("delayq_pending", "gauge", "Pending messages.", [])
    for topic, count in engine.observing.pending_by_topic().items():
        pending.rows.append((labels(topic=topic), count))
    due = Family(
        "delayq_due_messages",
        "gauge",
        "Pending messages due within the next minute, hour, day (overdue included).",
        [],
    )
    for topic, buckets in engine.observing.due_by_topic().items():
        for within, bound in DUE_WITHIN.items():
            count = sum(c for w, c in buckets if 0 <= w <= bound)
            due.rows.append((labels(topic=topic, within=within), count))
    return [pending, due, *group_families(engine.observing.group_stats())]


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
        yield GaugeMetricFamily(
            "delayq_rebalance_holding",
            "1 while a finishing rebalance holds some keys' schedules back on this node.",
            value=t.moving() is not None,
        )


class GatheringCollector:
    """How many callers the node's gathered engine calls answered (``calls``,
    ``gathering``): callers per engine call is the batch the load formed."""

    def __init__(self, calls: Calls) -> None:
        self._calls = calls

    def collect(self) -> Iterator[Any]:
        callers = CounterMetricFamily(
            "delayq_gathered_callers",
            "Calls answered by gathered engine calls, by kind (schedule, cancel, settle).",
            labels=["call"],
        )
        batches = CounterMetricFamily(
            "delayq_gathered_batches",
            "Batches gathered calls formed, by kind (each answers one or more callers).",
            labels=["call"],
        )
        for name, g in self._calls.gatherings().items():
            callers.add_metric([name], g.items)
            batches.add_metric([name], g.batches)
        yield callers
        yield batches


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

    def __init__(self, node: ShardNode[Replicating]) -> None:
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
        if n.last_failover_ms:
            yield GaugeMetricFamily(
                "delayq_last_failover_timestamp_seconds",
                "Unix time of the last promotion this process took.",
                value=n.last_failover_ms / 1000,
            )
        mode = GaugeMetricFamily(
            "delayq_replication_mode", "1 for the node's replication mode.", labels=["mode"]
        )
        for kind in ("sync", "async"):
            mode.add_metric([kind], n.replication == kind)
        yield mode
        yield GaugeMetricFamily(
            "delayq_insync_required",
            "In-sync members (the master included) a sync-mode ack needs; 1 in async mode.",
            value=n.min_insync,
        )
        lease = e.lease_left_s()
        if lease is not None:
            yield GaugeMetricFamily(
                "delayq_lease_remaining_seconds",
                "A master's lease left: it stops acking and delivering at 0 unless renewed.",
                value=lease,
            )
        if e.role is not Role.MASTER or not e.running:
            return
        insync = n.followers.insync()
        yield GaugeMetricFamily(
            "delayq_insync_members", "The master's in-sync set, itself included.", value=len(insync)
        )
        yield GaugeMetricFamily(
            "delayq_insync_live_members",
            "Members of the in-sync set heard from within the last 2 s, the master included "
            "(below delayq_insync_required, sync-mode acks wait and fail).",
            value=len(n.followers.live_insync()),
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
        lag_s = GaugeMetricFamily(
            "delayq_replication_lag_seconds",
            "Age of the oldest record sent that a replica has not written.",
            labels=["replica"],
        )
        connected = GaugeMetricFamily(
            "delayq_replica_connected", "1 while a replica streams.", labels=["replica"]
        )
        now = n.followers.clock.monotonic_s()  # the clock its followers' times are on
        for f in n.followers.snapshot():
            lag_bytes.add_metric([f.name], max(0, end - f.written))
            lag_s.add_metric([f.name], f.lag_ms(now) / 1000)
            connected.add_metric([f.name], f.connected)
        yield from (lag_bytes, lag_s, connected)


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No line a scrape or probe."""


def serve_metrics(
    sources: MetricSources, address: str, readiness: Readiness | None = None
) -> WSGIServer:
    """Start the /metrics (and /readyz) HTTP server in a thread; returns it
    (``server_port``: its port; ``shutdown()`` then ``server_close()`` stop it)."""
    host, _, port = address.rpartition(":")
    app = with_readiness(
        wsgi_app(registry(sources), lambda: topic_families(sources.engine)),
        readiness or Readiness(SERVING),
    )
    host = host.strip("[]") or "0.0.0.0"
    family, _, _, _, sockaddr = socket.getaddrinfo(
        host, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]

    class Server(ThreadingMixIn, WSGIServer):
        address_family = family
        daemon_threads = True  # a scrape in flight never holds the shutdown

    server = make_server(str(sockaddr[0]), int(port), app, Server, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server


def registry(sources: MetricSources) -> CollectorRegistry:
    """Every collector of one node, with the process' own (CPU, memory, start time).
    No ``_created`` series (prometheus_client's default for its own histograms: a
    series more per label set, which nothing here reads)."""
    disable_created_metrics()  # type: ignore[no-untyped-call]
    r = CollectorRegistry()
    r.register(EngineCollector(sources.engine))
    r.register(TopologyCollector(sources.topology))
    if sources.node is not None:
        r.register(ReplicationCollector(sources.node))
    if sources.refusals is not None:
        r.register(RefusalCollector(sources.refusals))
    if sources.calls is not None:
        calls = sources.calls
        r.register(GatheringCollector(calls))
        # read through the attribute at each scrape: the server sets it once its pushers run
        r.register(PushCollector(lambda: calls.push_snapshots()))
    if sources.durations is not None:
        r.register(sources.durations)
    ProcessCollector(registry=r)
    return r
