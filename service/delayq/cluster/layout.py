"""The shape of a local cluster (pure): node names, data directories, log files,
ports and the shard map, all derived from the directory and the options::

    DIR/shards.json          the shard map every node serves by (ShardMap.dumps)
    DIR/cluster.json         the supervisor's record of its processes (see ``clusterfile``)
    DIR/cluster.lock         held (flock) by the running supervisor
    DIR/tls/                 with --tls: the throwaway CA and certificates (certs.py)
    DIR/shard-S/node-K/      node K of shard S: its data directory
    DIR/shard-S/node-K.log   that node's stdout and stderr, appended across restarts

Invariants: with R nodes a shard, node j = S*R + K listens for gRPC on
``127.0.0.1:P+4j``, serves metrics on ``127.0.0.1:P+4j+1``, its admin service on
``127.0.0.1:P+4j+2`` and the RocketMQ 5 protocol on ``127.0.0.1:P+4j+3`` (P the
base port), so no two ports clash and the same options give the same ports on
every run. A *placement* (``--placement FILE``,
JSON ``{"shard-0/node-0": {"host": "10.231.0.11", "launcher": ["ip", "netns",
"exec", "dq-n0"]}, ...}``) moves a node to another host address (the same ports)
and starts it through a command prefix, e.g. in its own network namespace; the
shard map, admin addresses and failover loops then use that host.
Node 0 of a fresh shard is its master, the others its replicas; after a
failover the supervisor's record (``control.record.ShardRecord``) names the master, and
the map follows it. A node's name (``node-K``) is unique in its shard: it is the
name the node serves under (``--node-name``) and the one in-sync sets list. A
shard map already in DIR is kept as long as it describes the same shard count:
its topology epoch and its shards' epochs stay, and the topology epoch is raised
only when an address or a master changes (another base port, another
``--replicas``, a recorded failover); a shard's state (joining, leaving: a
``cluster scale`` under way) stays. A different shard count is refused: moving
messages between shards is ``cluster scale``'s, not a restart's.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..shardmap import ACTIVE, MAX_SHARDS, ShardEntry, ShardMap
from .errors import ClusterError

__all__ = [
    "DEFAULT_BASE_PORT",
    "DEFAULT_MIN_INSYNC",
    "DEFAULT_REPLICAS",
    "DEFAULT_SHARDS",
    "HOST",
    "REPLICATION_MODES",
    "Layout",
    "Node",
    "Placement",
    "parse_placement",
    "plan",
]

HOST = "127.0.0.1"
DEFAULT_SHARDS = 3
"""Several shards, so that routing by key and the fan-in of receive are exercised."""
DEFAULT_REPLICAS = 1
DEFAULT_BASE_PORT = 7500
"""Clear of ``delayq serve``'s own defaults (``addresses.PUBLIC_PORT`` and the two
after it)."""
REPLICATION_MODES = ("async", "sync")
DEFAULT_MIN_INSYNC = 2
"""Sync mode: nodes (the master included) that fsync a write before it is acked."""
MAX_REPLICAS = 9
PORTS_PER_NODE = 4  # gRPC, metrics, admin, RocketMQ 5


@dataclass(frozen=True)
class Placement:
    """Where one node runs: the host address it listens on, and the command prefix
    that starts it there (empty: started directly)."""

    host: str = HOST
    launcher: tuple[str, ...] = ()


def parse_placement(text: str, where: str = "--placement") -> dict[str, Placement]:
    """The placement file's nodes by label; raises ``ClusterError`` naming what is
    wrong in it."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ClusterError(f"{where}: not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ClusterError(f"{where}: give an object of node labels (shard-S/node-K)")
    out: dict[str, Placement] = {}
    for label, spec in doc.items():
        host = spec.get("host", HOST) if isinstance(spec, dict) else None
        launcher = spec.get("launcher", []) if isinstance(spec, dict) else None
        if not isinstance(host, str) or not host or ":" in host:
            raise ClusterError(f"{where}: {label}: host must be an IPv4 address or name")
        if not isinstance(launcher, list) or not all(isinstance(a, str) for a in launcher):
            raise ClusterError(f"{where}: {label}: launcher must be a list of strings")
        out[str(label)] = Placement(host, tuple(launcher))
    return out


@dataclass(frozen=True, kw_only=True)
class Node:
    """One ``delayq serve`` process of the cluster: where it lives and listens."""

    shard: int
    index: int
    """K: its place in the shard (0 is the master)."""
    port: int
    metrics_port: int
    admin_port: int
    rocketmq_port: int
    data_dir: Path
    log_path: Path
    host: str = HOST
    launcher: tuple[str, ...] = ()
    """The command prefix that starts it (``Placement``; empty: started directly)."""

    @property
    def name(self) -> str:
        return f"node-{self.index}"

    @property
    def local(self) -> bool:
        """Started directly, on 127.0.0.1 (no placement moves it): its ports can be
        checked from here."""
        return self.host == HOST and not self.launcher

    @property
    def label(self) -> str:
        """Unique in the cluster: ``shard-S/node-K`` (its path under DIR)."""
        return f"shard-{self.shard}/{self.name}"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def metrics_address(self) -> str:
        return f"{self.host}:{self.metrics_port}"

    @property
    def admin_address(self) -> str:
        """Its admin service's: what the failover loop calls and replicas follow."""
        return f"{self.host}:{self.admin_port}"

    @property
    def rocketmq_address(self) -> str:
        """Its RocketMQ 5 protocol port's (``delayq.rocketmq``)."""
        return f"{self.host}:{self.rocketmq_port}"

    def ports(self) -> tuple[tuple[int, str], ...]:
        """Each port with what it is for: ``(7500, "gRPC of shard-0/node-0")``."""
        return (
            (self.port, f"gRPC of {self.label}"),
            (self.metrics_port, f"metrics of {self.label}"),
            (self.admin_port, f"admin of {self.label}"),
            (self.rocketmq_port, f"RocketMQ of {self.label}"),
        )


@dataclass(frozen=True, kw_only=True)
class Layout:
    dir: Path
    shards: int
    replicas: int
    """Nodes a shard (the master included)."""
    base_port: int
    replication: str
    min_insync: int = DEFAULT_MIN_INSYNC
    """``--min-insync`` as given to the nodes: at most ``replicas``."""
    nodes: tuple[Node, ...]
    """By shard, then by place in the shard."""
    tls: bool = False
    """Serve TLS with a throwaway CA in ``DIR/tls/`` (``certs.local_tls``)."""
    placement: Mapping[str, Placement] = dataclasses.field(default_factory=dict)
    """Nodes placed elsewhere, by label (module notes)."""

    def local_ports(self) -> list[tuple[int, str]]:
        """The ports of the nodes started here on 127.0.0.1 (those a placement does
        not move), each with what it is for: the ones to check are free."""
        return [p for n in self.nodes if n.local for p in n.ports()]

    @property
    def view_min_insync(self) -> int:
        """``ShardView.min_insync``: the nodes a write must be fsynced on before it
        is acked; 1 in async mode (the master's own append acks)."""
        return self.min_insync if self.replication == "sync" else 1

    @property
    def map_path(self) -> Path:
        return self.dir / "shards.json"

    @property
    def state_path(self) -> Path:
        return self.dir / "cluster.json"

    @property
    def targets_path(self) -> Path:
        """Prometheus' ``file_sd`` targets: every node's metrics address."""
        return self.dir / "prometheus-targets.json"

    @property
    def lock_path(self) -> Path:
        return self.dir / "cluster.lock"

    @property
    def tls_dir(self) -> Path:
        return self.dir / "tls"

    def node(self, shard: int, index: int) -> Node:
        return self.nodes[shard * self.replicas + index]

    def shard_nodes(self, shard: int) -> tuple[Node, ...]:
        return self.nodes[shard * self.replicas : (shard + 1) * self.replicas]

    def node_named(self, shard: int, name: str) -> Node | None:
        for n in self.shard_nodes(shard):
            if n.name == name:
                return n
        return None

    def entry(self, shard: int, master: str, epoch: int) -> ShardEntry:
        """The map entry of ``shard`` with node ``master`` (a name) as its master at
        ``epoch``; the others are its replicas, in node order."""
        nodes = self.shard_nodes(shard)
        lead = self.node_named(shard, master)
        if lead is None:
            raise ClusterError(
                f"shard {shard}: the recorded master {master} is not one of its "
                f"{self.replicas} node(s); use the --replicas it ran with"
            )
        return ShardEntry(
            index=shard,
            master=lead.address,
            replicas=tuple(n.address for n in nodes if n is not lead),
            epoch=epoch,
            admin=lead.admin_address,
            rocketmq=lead.rocketmq_address,
        )

    def shard_map(
        self,
        existing: ShardMap | None = None,
        masters: Mapping[int, tuple[str, int]] | None = None,
    ) -> ShardMap:
        """The map to serve by: a new one (topology epoch 1), or ``existing`` kept as
        far as the invariants above allow; raises ``ClusterError`` for another count.
        ``masters`` gives a shard's recorded master (name) and epoch; by default a
        shard's master is node 0 and its epoch the existing map's (1 when new)."""
        if existing is not None and existing.count != self.shards:
            raise ClusterError(
                f"{self.map_path} describes {existing.count} shard(s), not {self.shards}: "
                f"change it with `delayq cluster scale`; use --shards {existing.count} "
                "or another --dir"
            )
        masters = masters or {}

        def epoch(s: int) -> int:
            return 1 if existing is None else existing.shards[s].epoch

        entries = tuple(
            dataclasses.replace(
                self.entry(s, *masters.get(s, (self.node(s, 0).name, epoch(s)))),
                state=ACTIVE if existing is None else existing.shards[s].state,
            )
            for s in range(self.shards)
        )
        if existing is None:
            return ShardMap(topology_epoch=1, shards=entries)
        if entries == existing.shards:
            return existing
        return dataclasses.replace(
            existing, shards=entries, topology_epoch=existing.topology_epoch + 1
        )


def plan(
    dir: Path,
    *,
    shards: int = DEFAULT_SHARDS,
    replicas: int = DEFAULT_REPLICAS,
    base_port: int = DEFAULT_BASE_PORT,
    replication: str = "async",
    min_insync: int = DEFAULT_MIN_INSYNC,
    tls: bool = False,
    placement: Mapping[str, Placement] | None = None,
) -> Layout:
    """The layout of a cluster in ``dir``; raises ``ClusterError`` naming the option
    that cannot be used."""
    placement = dict(placement or {})
    if placement and tls:
        raise ClusterError("--placement and --tls: the throwaway CA names 127.0.0.1 only")
    if not 1 <= shards <= MAX_SHARDS:
        raise ClusterError(f"--shards must be 1..{MAX_SHARDS}, got {shards}")
    if replicas < 1:
        raise ClusterError(f"--replicas must be at least 1, got {replicas}")
    if replicas > MAX_REPLICAS:
        raise ClusterError(f"--replicas must be 1..{MAX_REPLICAS}, got {replicas}")
    if min_insync < 1:
        raise ClusterError(f"--min-insync must be at least 1, got {min_insync}")
    if replication not in REPLICATION_MODES:
        raise ClusterError(
            f"--replication must be one of {', '.join(REPLICATION_MODES)}, got {replication!r}"
        )
    count = shards * replicas
    last = base_port + PORTS_PER_NODE * count - 1
    if base_port < 1 or last > 65535:
        raise ClusterError(
            f"--base-port {base_port}: {count} node(s) need ports {base_port}-{last}, "
            "which must lie within 1-65535"
        )
    nodes = tuple(
        Node(
            host=at.host,
            launcher=at.launcher,
            shard=s,
            index=k,
            port=base_port + PORTS_PER_NODE * (s * replicas + k),
            metrics_port=base_port + PORTS_PER_NODE * (s * replicas + k) + 1,
            admin_port=base_port + PORTS_PER_NODE * (s * replicas + k) + 2,
            rocketmq_port=base_port + PORTS_PER_NODE * (s * replicas + k) + 3,
            data_dir=dir / f"shard-{s}" / f"node-{k}",
            log_path=dir / f"shard-{s}" / f"node-{k}.log",
        )
        for s in range(shards)
        for k in range(replicas)
        for at in [placement.get(f"shard-{s}/node-{k}", Placement())]
    )
    unknown = sorted(set(placement) - {n.label for n in nodes})
    if unknown:
        raise ClusterError(f"--placement names no node of this layout: {', '.join(unknown)}")
    return Layout(
        dir=dir,
        shards=shards,
        replicas=replicas,
        base_port=base_port,
        replication=replication,
        min_insync=min(min_insync, replicas),
        nodes=nodes,
        tls=tls,
        placement=placement,
    )
