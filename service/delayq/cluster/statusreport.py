"""``delayq cluster status``: one row per node of a local cluster, from its files
and from asking every node (``probe``) at once.

The nodes are those of the shard map (``DIR/shards.json``): each shard's master,
then its replicas. Names and pids come from ``DIR/cluster.json`` (pid 0 when
the cluster is stopped or the node is between a death and its restart). A
cluster started with ``--tls`` is asked over TLS with the certificates in
``DIR/tls/``. A
serving node's role, epoch and CommitLog end are its own (``Stats.node``); a
node that does not serve is shown with the role and epoch the map gives it and a
``log_end`` of 0 (nothing is known of it). ``lag_bytes`` is how far a replica's
CommitLog is behind its serving master's, 0 for a master or when either end is
unknown.

Nodes with the admin service (``delayq.admin.v1.ShardAdmin``, at the admin
address ``cluster.json`` records for them) are also asked its ``Status``, look-only
(epoch 0: it renews no lease and changes no in-sync set):
their role, epoch, CommitLog end and fsynced end come from it (it answers during
recovery too), and a replica's ``lag_bytes`` and ``lag_ms`` are those its
master's answer lists for it. A node without the admin service (no admin address
recorded, or it does not answer) is shown from ``Stats.node`` as before, its new fields 0.

The JSON form: the keys of issue 33, with more added (never renamed)::

    {"topology_epoch": 1,
     "nodes": [{"shard": 0, "node": "node-0", "role": "master", "epoch": 1,
                "address": "127.0.0.1:7500", "pid": 4243, "state": "serving",
                "log_end": 1024, "lag_bytes": 0,
                "flushed": 1024, "lag_ms": 0, "fenced": false, "lease_valid": true,
                "high_water": 1024, "insync": ["node-0", "node-1"], "failovers": 0},
               ...],
     "shards": [{"shard": 0, "epoch": 1, "master": "node-0",
                 "insync": ["node-0", "node-1"], "failovers": 0, "stuck": "",
                 "in_office": true}, ...]}

``insync`` of a node is the set a master counts (empty for a replica);
``shards`` is the supervisor's record (``cluster.json``), empty without one.

Exit code: 0 when every node serves, 1 otherwise (2, from the command, when
DIR holds no cluster).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..atomicfile import read_text
from ..control.admin import look
from ..control.views import Answer
from ..role import Role
from ..shardmap import ShardMap, ShardMapError, parse
from . import clusterfile
from .certs import LocalTls, control_tls, public_tls
from .errors import ClusterError
from .probe import SERVING, Probe, probe

__all__ = ["Report", "Row", "collect", "read_cluster", "report"]


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
    flushed: int = 0
    lag_ms: int = 0
    fenced: bool = False
    lease_valid: bool = False
    high_water: int = 0
    insync: tuple[str, ...] = ()
    failovers: int = 0


@dataclass(frozen=True, kw_only=True)
class Report:
    topology_epoch: int
    nodes: tuple[Row, ...]
    shards: tuple[clusterfile.ShardRecord, ...] = ()

    @property
    def exit_code(self) -> int:
        return 0 if all(r.state == SERVING for r in self.nodes) else 1

    def to_json(self) -> str:
        doc: dict[str, Any] = {
            "topology_epoch": self.topology_epoch,
            "nodes": [{**asdict(r), "insync": list(r.insync)} for r in self.nodes],
            "shards": [s.to_json() for s in self.shards],
        }
        return json.dumps(doc)

    def to_text(self) -> str:
        head = (
            *("SHARD", "NODE", "ROLE", "EPOCH", "ADDRESS", "PID", "STATE", "LOG_END", "LAG"),
            *("LAG_MS", "FLUSHED", "HW", "FENCED", "INSYNC"),
        )
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
                    r.lag_ms,
                    r.flushed,
                    r.high_water,
                    "yes" if r.fenced else "-",
                    ",".join(r.insync) or "-",
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
        for rec in self.shards:
            line = (
                f"shard {rec.shard}: recorded epoch {rec.epoch}, master {rec.master}, "
                f"in-sync {','.join(sorted(rec.insync))}, failovers {rec.failovers}"
            )
            lines.append(line + (f"; stuck: {rec.stuck}" if rec.stuck else ""))
        return "\n".join(lines)


def report(
    shard_map: ShardMap,
    records: Mapping[str, clusterfile.NodeRecord],
    probes: Mapping[str, Probe],
    admins: Mapping[str, Answer | None] | None = None,
    shards: Sequence[clusterfile.ShardRecord] = (),
) -> Report:
    """The rows (pure): every node of ``shard_map``, named by ``records`` and
    described by ``probes`` and ``admins`` (its admin ``Status``; all by address;
    a node missing from them is shown unnamed, down, or from ``Stats`` only)."""
    admins = admins or {}
    rows: list[Row] = []
    for shard in shard_map.shards:
        master_admin = admins.get(shard.master)
        master_end = _log_end(probes.get(shard.master), master_admin)
        for role, address in [(Role.MASTER, shard.master)] + [
            (Role.REPLICA, a) for a in shard.replicas
        ]:
            p = probes.get(address)
            node = p.node if p is not None and p.node is not None else None
            a = admins.get(address)
            record = records.get(address)
            name = record.node if record is not None else (a.name if a is not None else "-")
            log_end = _log_end(p, a)
            lag_bytes = _lag(role, master_end, log_end)
            lag_ms = 0
            listed = master_admin.replica(name) if master_admin is not None else None
            if role == Role.REPLICA and listed is not None:
                lag_bytes, lag_ms = listed.lag_bytes, listed.lag_ms
            if a is not None:
                now_role, epoch = a.role, a.epoch
            elif node:
                now_role, epoch = Role(str(node["role"])), int(node["epoch"])
            else:
                now_role, epoch = role, shard.epoch
            rows.append(
                Row(
                    shard=shard.index,
                    node=name,
                    role=now_role,
                    epoch=epoch,
                    address=address,
                    pid=record.pid if record is not None else 0,
                    state=p.state if p is not None else "down",
                    log_end=log_end or 0,
                    lag_bytes=lag_bytes,
                    flushed=a.flushed if a is not None else 0,
                    lag_ms=lag_ms,
                    fenced=a.fenced if a is not None else False,
                    lease_valid=a.lease_valid if a is not None else False,
                    high_water=a.high_water if a is not None else 0,
                    insync=tuple(sorted(a.insync)) if a is not None else (),
                    failovers=a.failovers if a is not None else 0,
                )
            )
    return Report(topology_epoch=shard_map.topology_epoch, nodes=tuple(rows), shards=tuple(shards))


def _log_end(p: Probe | None, a: Answer | None = None) -> int | None:
    if a is not None:
        return a.log_end
    return None if p is None or p.node is None else int(p.node["commitlog_end"])


def _lag(role: str, master_end: int | None, own_end: int | None) -> int:
    if role == Role.MASTER or master_end is None or own_end is None:
        return 0
    return max(0, master_end - own_end)


def read_cluster(dir: Path) -> tuple[ShardMap, clusterfile.ClusterState | None]:
    """DIR's shard map and its ``cluster.json`` (None when there is none); raises
    ``ClusterError`` when DIR holds no cluster (no usable ``shards.json``)."""
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
    recorded = None if state_text is None else clusterfile.parse(state_text, str(state_path))
    return shard_map, recorded


def collect(dir: Path, timeout_s: float = 1.0) -> Report:
    """Read DIR's map and state and probe every node; raises ``ClusterError`` when
    DIR holds no cluster (no usable ``shards.json``)."""
    shard_map, recorded = read_cluster(dir)
    records = {} if recorded is None else recorded.by_address()
    addresses = [a for s in shard_map.shards for a in (s.master, *s.replicas)]
    files = LocalTls(dir / "tls") if recorded is not None and recorded.tls else None
    control, public = control_tls(files), public_tls(files)

    def admin_look(address: str) -> Answer | None:
        rec = records.get(address)  # its admin address, recorded by the supervisor
        if rec is None or not rec.admin_address:
            return None
        return look(rec.admin_address, timeout_s, control)[0]

    with ThreadPoolExecutor(max_workers=min(32, 2 * len(addresses))) as pool:
        looks = pool.map(admin_look, addresses)
        probes = dict(
            zip(addresses, pool.map(lambda a: probe(a, timeout_s, public), addresses), strict=True)
        )
        admins = dict(zip(addresses, looks, strict=True))
    return report(shard_map, records, probes, admins, () if recorded is None else recorded.shards)


def supervisor_running(dir: Path) -> bool:
    """Whether a ``delayq cluster up`` runs on DIR now (its record says running and
    its process is alive)."""
    text = read_text(dir / "cluster.json")
    if text is None:
        return False
    try:
        recorded = clusterfile.parse(text, str(dir / "cluster.json"))
    except ClusterError:
        return False
    if recorded.state != clusterfile.RUNNING or recorded.supervisor_pid <= 0:
        return False
    try:
        os.kill(recorded.supervisor_pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
