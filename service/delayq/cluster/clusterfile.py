"""``DIR/cluster.json`` (pure encode and decode): what ``cluster up`` runs, for
``cluster status`` and tests to find the processes by::

    {"supervisor_pid": 4242,
     "state": "running",                  # "stopped" once the supervisor exited
     "replication": "async",
     "min_insync": 1,
     "tls": false,                        # true: the nodes serve TLS (DIR/tls/)
     "nodes": [{"shard": 0, "node": "node-0",
                "address": "127.0.0.1:7500", "metrics_address": "127.0.0.1:7501",
                "admin_address": "127.0.0.1:7502",
                "pid": 4243, "restarts": 0,
                "data_dir": "DIR/shard-0/node-0", "log": "DIR/shard-0/node-0.log"},
               ...],
     "shards": [{"shard": 0, "epoch": 1, "master": "node-0", "insync": ["node-0"],
                 "failovers": 0, "stuck": "", "in_office": true}, ...]}

Invariants: ``pid`` is the process serving the node now, 0 while none does
(between a death and its restart, and once the supervisor stopped); ``restarts``
counts the starts after the first. The supervisor rewrites the whole file
atomically on every start and exit of a node, so a reader never sees half of it.

``shards`` is the supervisor's authoritative record of each shard's replication
metadata (``ShardRecord``): the epoch, the master's name and the in-sync set the
failover decision works from. It is written (and fsynced) *before* a promotion
is sent and before a grown in-sync set is told to the master, so an epoch is
handed out once whatever happens to the command, and a ``cluster up`` on the same
DIR starts from it. ``failovers`` counts the promotions recorded; ``stuck`` is the
last reason the decision gave for not failing over ("" when none); ``in_office``
says whether the recorded master has been seen holding the office since. A file
written before replication existed has no ``shards`` (nor ``min_insync``): read
as empty (1); one written before the admin port had its own address has no
``admin_address`` (read as "").
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from ..control.record import ShardRecord
from .errors import ClusterError

__all__ = ["RUNNING", "STOPPED", "ClusterState", "NodeRecord", "ShardRecord", "parse"]

RUNNING, STOPPED = "running", "stopped"


@dataclass(frozen=True, kw_only=True)
class NodeRecord:
    shard: int
    node: str
    address: str
    metrics_address: str
    admin_address: str = ""
    """Its admin service's (``cluster status`` asks it)."""
    pid: int
    restarts: int
    data_dir: str
    log: str


@dataclass(frozen=True, kw_only=True)
class ClusterState:
    supervisor_pid: int
    state: str
    replication: str
    nodes: tuple[NodeRecord, ...]
    shards: tuple[ShardRecord, ...] = ()
    min_insync: int = 1
    tls: bool = False
    """The nodes serve TLS with the CA in ``DIR/tls/`` (``certs.local_tls``)."""

    def dumps(self) -> str:
        doc = asdict(self)
        doc["nodes"] = [asdict(n) for n in self.nodes]
        doc["shards"] = [s.to_json() for s in self.shards]
        return json.dumps(doc, indent=2) + "\n"

    def by_address(self) -> dict[str, NodeRecord]:
        return {n.address: n for n in self.nodes}

    def by_shard(self) -> dict[int, ShardRecord]:
        return {s.shard: s for s in self.shards}


_OPTIONAL = {"shards", "min_insync", "admin_address", "tls"}


def _fields(doc: Any, cls: type[Any], where: str) -> dict[str, Any]:
    names = set(cls.__dataclass_fields__)
    if not isinstance(doc, dict) or not names - _OPTIONAL <= set(doc):
        raise ClusterError(f"{where}: not a record with the keys {sorted(names)}")
    return {k: doc[k] for k in names if k in doc}


def _shard(doc: Any, where: str) -> ShardRecord:
    try:
        return ShardRecord.from_json(doc)
    except ValueError as exc:
        raise ClusterError(f"{where}: {exc}") from None


def parse(text: str, where: str = "cluster.json") -> ClusterState:
    """The state from its file text; raises ``ClusterError`` naming ``where``."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ClusterError(f"{where}: not JSON: {exc}") from None
    top = _fields(doc, ClusterState, where)
    if not isinstance(top["nodes"], list):
        raise ClusterError(f"{where}: nodes must be a list")
    top["nodes"] = tuple(
        NodeRecord(**_fields(n, NodeRecord, f"{where}: nodes[{i}]"))
        for i, n in enumerate(top["nodes"])
    )
    shards = top.get("shards", [])
    if not isinstance(shards, list):
        raise ClusterError(f"{where}: shards must be a list")
    top["shards"] = tuple(_shard(s, f"{where}: shards[{i}]") for i, s in enumerate(shards))
    return ClusterState(**top)
