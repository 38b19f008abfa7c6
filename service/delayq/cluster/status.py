"""``delayq cluster status``: one row per node of a local cluster, from its files
and from asking every node (``probe``) at once.

The nodes are those of the shard map (``DIR/shards.json``): each shard's master,
then its replicas. Names and pids come from ``DIR/cluster.json`` (pid 0 when
the cluster is stopped or the node is between a death and its restart). A
serving node's role, epoch and CommitLog end are its own (``Stats.node``); a
node that does not serve is shown with the role and epoch the map gives it and a
``log_end`` of 0 (nothing is known of it). ``lag_bytes`` is how far a replica's
CommitLog is behind its serving master's, 0 for a master or when either end is
unknown.

The JSON form, exactly::

    {"topology_epoch": 1,
     "nodes": [{"shard": 0, "node": "node-0", "role": "master", "epoch": 1,
                "address": "127.0.0.1:7500", "pid": 4243, "state": "serving",
                "log_end": 1024, "lag_bytes": 0}, ...]}

Exit code: 0 when every node serves, 1 otherwise (2, from the command, when
DIR holds no cluster).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from ..shardmap import ShardMap, ShardMapError, parse
from . import state
from .errors import ClusterError
from .files import read_text
from .probe import SERVING, Probe, probe

__all__ = ["Report", "Row", "collect", "report"]

MASTER, REPLICA = "master", "replica"


@dataclass(frozen=True, kw_only=True)
class Row:
    shard: int
    node: str
    role: str
    epoch: int
    address: str
    pid: int
    state: str
    log_end: int
    lag_bytes: int


@dataclass(frozen=True, kw_only=True)
class Report:
    topology_epoch: int
    nodes: tuple[Row, ...]

    @property
    def exit_code(self) -> int:
        return 0 if all(r.state == SERVING for r in self.nodes) else 1

    def to_json(self) -> str:
        return json.dumps(
            {"topology_epoch": self.topology_epoch, "nodes": [asdict(r) for r in self.nodes]}
        )

    def to_text(self) -> str:
        head = ("SHARD", "NODE", "ROLE", "EPOCH", "ADDRESS", "PID", "STATE", "LOG_END", "LAG")
        cells = [head] + [
            tuple(
                str(v)
                for v in (
                    r.shard,
                    r.node,
                    r.role,
                    r.epoch,
                    r.address,
                    r.pid or "-",
                    r.state,
                    r.log_end,
                    r.lag_bytes,
                )
            )
            for r in self.nodes
        ]
        widths = [max(len(row[i]) for row in cells) for i in range(len(head))]
        serving = sum(r.state == SERVING for r in self.nodes)
        lines = [
            f"topology epoch {self.topology_epoch}: {serving} of {len(self.nodes)} node(s) serving",
            *(
                "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                for row in cells
            ),
        ]
        return "\n".join(lines)


def report(
    shard_map: ShardMap,
    records: Mapping[str, state.NodeRecord],
    probes: Mapping[str, Probe],
) -> Report:
    """The rows (pure): every node of ``shard_map``, named by ``records`` and
    described by ``probes`` (both by address; a node missing from either is shown
    unnamed or down)."""
    rows: list[Row] = []
    for shard in shard_map.shards:
        master_end = _log_end(probes.get(shard.master))
        for role, address in [(MASTER, shard.master)] + [(REPLICA, a) for a in shard.replicas]:
            p = probes.get(address)
            node = p.node if p is not None and p.node is not None else None
            record = records.get(address)
            log_end = _log_end(p)
            rows.append(
                Row(
                    shard=shard.index,
                    node=record.node if record is not None else "-",
                    role=str(node["role"]) if node else role,
                    epoch=int(node["epoch"]) if node else shard.epoch,
                    address=address,
                    pid=record.pid if record is not None else 0,
                    state=p.state if p is not None else "down",
                    log_end=log_end or 0,
                    lag_bytes=_lag(role, master_end, log_end),
                )
            )
    return Report(topology_epoch=shard_map.topology_epoch, nodes=tuple(rows))


def _log_end(p: Probe | None) -> int | None:
    return None if p is None or p.node is None else int(p.node["commitlog_end"])


def _lag(role: str, master_end: int | None, own_end: int | None) -> int:
    if role == MASTER or master_end is None or own_end is None:
        return 0
    return max(0, master_end - own_end)


def collect(dir: Path, timeout_s: float = 1.0) -> Report:
    """Read DIR's map and state and probe every node; raises ``ClusterError`` when
    DIR holds no cluster (no usable ``shards.json``)."""
    map_path = dir / "shards.json"
    text = read_text(map_path)
    if text is None:
        raise ClusterError(f"no cluster in {dir}: {map_path} does not exist")
    try:
        shard_map = parse(text)
    except ShardMapError as exc:
        raise ClusterError(f"{map_path}: {exc}") from None
    state_path = dir / "cluster.json"
    state_text = read_text(state_path)
    records = {} if state_text is None else state.parse(state_text, str(state_path)).by_address()
    addresses = [a for s in shard_map.shards for a in (s.master, *s.replicas)]
    with ThreadPoolExecutor(max_workers=min(32, len(addresses))) as pool:
        probes = dict(
            zip(addresses, pool.map(lambda a: probe(a, timeout_s), addresses), strict=True)
        )
    return report(shard_map, records, probes)
