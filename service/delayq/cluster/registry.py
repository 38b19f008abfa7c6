"""What the supervisor keeps of its shards and writes into DIR: the shard map it
serves (``shards.json``), ``cluster.json`` (each shard's record, each node's
process: ``clusterfile``) and ``prometheus-targets.json`` (every node's metrics
address with ``shard`` and ``node`` labels: Prometheus' ``file_sd`` format).
``ShardRegistry`` holds the first two in memory, and rewrites each file whole
(``write_atomic``) on every change, so a reader never sees half of one.

Invariants: a shard's record (``control.record.ShardRecord``: epoch, master,
in-sync set) changes in memory only once ``cluster.json`` holds it (``store``,
the keepers' record-first rule: a failed write changes nothing and raises);
``publish`` puts a shard's recorded master and epoch into the map with the
topology epoch raised by one, and does nothing when the map has them already;
the map is read and written under one lock, ``cluster.json`` under another, so
the keepers' threads, the watch loop and ``cluster scale`` may call in at once.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from ..atomicfile import write_atomic
from ..control.record import ShardRecord
from ..shardmap import ShardMap
from .clusterfile import RUNNING, ClusterState, NodeRecord
from .layout import Layout
from .nodeprocess import NodeRun

__all__ = ["RegistryHost", "ShardRegistry", "prometheus_targets"]

log = logging.getLogger("delayq.cluster")


class RegistryHost(Protocol):
    """What the registry reads of the supervisor when it writes (both change as
    ``cluster scale`` adds or removes shards)."""

    layout: Layout
    runs: list[NodeRun]


class ShardRegistry:
    def __init__(self, host: RegistryHost) -> None:
        self._host = host
        self.records: dict[int, ShardRecord] = {}
        """Each shard's record, by shard (the supervisor's, authoritative)."""
        self._state = RUNNING
        self._state_lock = threading.Lock()
        self._map_lock = threading.Lock()
        self._map: ShardMap | None = None
        self._targets = ""  # prometheus-targets.json as last written

    # -- the shard map (shards.json)
    def current_map(self) -> ShardMap:
        with self._map_lock:
            assert self._map is not None
            return self._map

    def write_map(self, new: ShardMap) -> None:
        """Write ``new`` as the map served (``OSError`` when it cannot be written)."""
        with self._map_lock:
            write_atomic(self._host.layout.map_path, new.dumps())
            self._map = new

    def change_map(self, change: Callable[[ShardMap], ShardMap | None]) -> ShardMap | None:
        """Serve ``change(map)`` unless it is None, read and written under the map's
        lock (compare-and-set: a failover ``publish``ed meanwhile is what
        ``change`` sees, never undone); the map served, or None. A change of the
        shard count: logged."""
        with self._map_lock:
            assert self._map is not None
            new = change(self._map)
            if new is None:
                return None
            write_atomic(self._host.layout.map_path, new.dumps())
            self._map = new
        log.warning(
            "shard map: %d shard(s), %d active (topology epoch %d)",
            new.count,
            new.owners,
            new.topology_epoch,
            extra={"shards": new.count, "active": new.owners, "topology_epoch": new.topology_epoch},
        )
        return new

    def publish(self, rec: ShardRecord) -> None:
        """Put shard ``rec.shard``'s recorded master and epoch into the shard map (the
        others its replicas), topology epoch + 1; nothing when it has them (a
        keeper's ``publish``)."""
        with self._map_lock:
            assert self._map is not None
            entry = dataclasses.replace(
                self._host.layout.entry(rec.shard, rec.master, rec.epoch),
                state=self._map.shards[rec.shard].state,
            )
            if self._map.shards[rec.shard] == entry:
                return
            shards = tuple(entry if e.index == rec.shard else e for e in self._map.shards)
            new = dataclasses.replace(
                self._map, shards=shards, topology_epoch=self._map.topology_epoch + 1
            )
            write_atomic(self._host.layout.map_path, new.dumps())
            self._map = new
        log.warning(
            "shard map: shard %d served by %s at epoch %d (topology epoch %d)",
            rec.shard,
            entry.master,
            rec.epoch,
            new.topology_epoch,
            extra={"shard": rec.shard, "master": entry.master, "epoch": rec.epoch},
        )

    # -- the records (cluster.json)
    def store(self, rec: ShardRecord) -> None:
        """Record a shard's new metadata durably (a keeper's ``store``); raises
        ``OSError`` when ``cluster.json`` cannot be written (nothing changed then)."""
        with self._state_lock:
            old = self.records[rec.shard]
            self.records[rec.shard] = rec
            try:
                self._write()
            except OSError:
                self.records[rec.shard] = old
                raise

    def save(self, state: str) -> None:
        """Write ``cluster.json`` as things are now, the supervisor ``state``
        (``clusterfile.RUNNING`` or ``STOPPED``)."""
        with self._state_lock:
            self._state = state
            self._write()

    def _write(self) -> None:
        layout = self._host.layout
        doc = ClusterState(
            supervisor_pid=os.getpid(),
            state=self._state,
            replication=layout.replication,
            min_insync=layout.min_insync,
            tls=layout.tls,
            shards=tuple(self.records[s] for s in sorted(self.records)),
            nodes=_node_records(self._host.runs),
        )
        write_atomic(layout.state_path, doc.dumps())
        targets = prometheus_targets(doc.nodes)
        if targets != self._targets:
            write_atomic(layout.targets_path, targets)
            self._targets = targets


def prometheus_targets(nodes: Sequence[NodeRecord]) -> str:
    """The nodes as Prometheus ``file_sd`` target groups: one per node, labelled with
    its ``shard`` and ``node`` (what dashboards and alert rules group by)."""
    groups = [
        {"targets": [n.metrics_address], "labels": {"shard": str(n.shard), "node": n.node}}
        for n in sorted(nodes, key=lambda n: (n.shard, n.node))
    ]
    return json.dumps(groups, indent=1) + "\n"


def _node_records(runs: Sequence[NodeRun]) -> tuple[NodeRecord, ...]:
    return tuple(
        NodeRecord(
            shard=r.node.shard,
            node=r.node.name,
            address=r.node.address,
            metrics_address=r.node.metrics_address,
            admin_address=r.node.admin_address,
            pid=r.pid,
            restarts=r.restarts,
            data_dir=str(r.node.data_dir),
            log=str(r.node.log_path),
        )
        for r in runs
    )
