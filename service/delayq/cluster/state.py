"""``DIR/cluster.json`` (pure encode and decode): what ``cluster up`` runs, for
``cluster status`` and tests to find the processes by::

    {"supervisor_pid": 4242,
     "state": "running",                  # "stopped" once the supervisor exited
     "replication": "async",
     "nodes": [{"shard": 0, "node": "node-0",
                "address": "127.0.0.1:7500", "metrics_address": "127.0.0.1:7501",
                "pid": 4243, "restarts": 0,
                "data_dir": "DIR/shard-0/node-0", "log": "DIR/shard-0/node-0.log"},
               ...]}

Invariants: ``pid`` is the process serving the node now, 0 while none does
(between a death and its restart, and once the supervisor stopped); ``restarts``
counts the starts after the first. The supervisor rewrites the whole file
atomically on every start and exit of a node, so a reader never sees half of it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from .errors import ClusterError

__all__ = ["RUNNING", "STOPPED", "ClusterState", "NodeRecord", "parse"]

RUNNING, STOPPED = "running", "stopped"


@dataclass(frozen=True, kw_only=True)
class NodeRecord:
    shard: int
    node: str
    address: str
    metrics_address: str
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

    def dumps(self) -> str:
        doc = asdict(self)
        doc["nodes"] = [asdict(n) for n in self.nodes]
        return json.dumps(doc, indent=2) + "\n"

    def by_address(self) -> dict[str, NodeRecord]:
        return {n.address: n for n in self.nodes}


def _fields(doc: Any, cls: type[Any], where: str) -> dict[str, Any]:
    names = set(cls.__dataclass_fields__)
    if not isinstance(doc, dict) or not names <= set(doc):
        raise ClusterError(f"{where}: not a record with the keys {sorted(names)}")
    return {k: doc[k] for k in names}


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
    return ClusterState(**top)
