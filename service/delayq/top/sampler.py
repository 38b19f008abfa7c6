"""``delayq top``'s samples (I/O: DIR's files, gRPC to every node): where the nodes
are, and what each of them answers, asked of all at once.

Where the nodes are, read afresh for every sample (a failover or a change of
the shard count rewrites the map):

- ``DirNodes``: a local cluster's ``shards.json`` and ``cluster.json``
  (``cluster.statusreport.read_cluster``): the nodes' names and admin addresses, and, for
  a cluster started with ``--tls``, the certificates in ``DIR/tls/`` (as ``cluster
  status`` uses them);
- ``ServerNodes``: the shard map a node serves by (``GetRoute``), asked of the
  node given and, when it does not answer, of the nodes of the last map it gave,
  in turn. A master's admin address is the map's; a replica's is
  ``addresses.admin_address``'s (``DELAYQ_ADMIN_ADDRESSES`` or ``DELAYQ_ADMIN_PORT``,
  else its public address, which serves no admin service: that replica is then
  shown from its ``Stats`` alone, its lag from the log ends, its in-sync state
  unknown). Names are those the admin services answer with. The admin calls
  carry the client certificate given (``--tls-cert``); a TLS cluster's admin ports
  refuse a caller without one, and the nodes are shown from their ``Stats``.

Each node is asked its health and ``Stats`` (``cluster.probe.probe_stats``) and, at the
same time, its admin ``Status``, look-only (``control.admin.look``: it renews no
lease and changes nothing), all nodes at once on a pool of threads, every call
with ``timeout_s``. So a sample takes at most about twice ``timeout_s`` (three
times with ``GetRoute``) however many nodes there are. A node that does not
answer is ``down``; nothing raises but a DIR without a cluster (``ClusterError``).

``Sampler`` is not thread-safe: one caller takes its samples in turn.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import grpc

from ..addresses import admin_address
from ..cluster.certs import LocalTls, control_tls, public_tls
from ..cluster.probe import DOWN, probe_stats, shard_map
from ..cluster.statusreport import read_cluster
from ..control.admin import look
from ..control.views import Answer
from ..role import Role
from ..shardmap import ShardMap, ShardMapError
from ..tls import TlsConfig
from .samples import NodeRef, NodeSample, Sample

__all__ = ["DirNodes", "NodeSource", "Nodes", "Sampler", "ServerNodes", "Target"]

MAX_THREADS = 32
"""Calls in flight at once: two a node (public and admin ports), so 16 nodes
answer within one timeout; more nodes queue for a thread."""


@dataclass(frozen=True, kw_only=True)
class Target(NodeRef):
    """A node to ask."""

    admin_address: str = ""
    """"": none known (no admin ``Status`` asked)."""


@dataclass(frozen=True, kw_only=True)
class Nodes:
    """Where the nodes are now, and how to call them."""

    topology_epoch: int = 0
    targets: tuple[Target, ...] = ()
    public: TlsConfig | None = None
    admin: TlsConfig | None = None
    error: str = ""
    """What went wrong finding them (the map kept from before, or none)."""


class NodeSource(Protocol):
    description: str
    """What is looked at, for the title line: ``dir PATH`` or ``server ADDRESS``."""

    def nodes(self, timeout_s: float) -> Nodes: ...


def _targets(m: ShardMap, name: Callable[[str], str], admin: Callable[[str], str]) -> list[Target]:
    return [
        Target(
            shard=s.index,
            address=address,
            name=name(address),
            map_role=role,
            map_epoch=s.epoch,
            admin_address=admin(address),
        )
        for s in m.shards
        for role, address in [(Role.MASTER, s.master)] + [(Role.REPLICA, r) for r in s.replicas]
    ]


class DirNodes:
    """The nodes of the local cluster in ``dir`` (module notes)."""

    def __init__(self, dir: Path) -> None:
        self.dir = dir
        self.description = f"dir {dir}"

    def nodes(self, timeout_s: float) -> Nodes:
        m, recorded = read_cluster(self.dir)  # ClusterError: no cluster there
        records = {} if recorded is None else recorded.by_address()
        files = LocalTls(self.dir / "tls") if recorded is not None and recorded.tls else None

        def name(address: str) -> str:
            rec = records.get(address)
            return rec.node if rec is not None else ""

        def admin(address: str) -> str:
            rec = records.get(address)
            return rec.admin_address if rec is not None else ""

        return Nodes(
            topology_epoch=m.topology_epoch,
            targets=tuple(_targets(m, name, admin)),
            public=public_tls(files),
            admin=control_tls(files),
        )


class ServerNodes:
    """The nodes of the shard map the node at ``address`` serves by (module notes)."""

    def __init__(self, address: str, tls: TlsConfig | None = None) -> None:
        self.address = address
        self.tls = tls
        self.description = f"server {address}"
        self._last: ShardMap | None = None

    def nodes(self, timeout_s: float) -> Nodes:
        asked = [self.address]
        if self._last is not None:
            asked += [a for s in self._last.shards for a in (s.master, *s.replicas)]
        error = ""
        for address in dict.fromkeys(asked):  # in order, once each
            try:
                self._last = shard_map(address, timeout_s, self.tls)
                error = ""
                break
            except grpc.RpcError as exc:
                code = exc.code() if hasattr(exc, "code") else None
                error = f"GetRoute of {address}: {code.name if code is not None else exc}"
            except (ShardMapError, ValueError) as exc:  # (ValueError: an address gRPC refuses)
                error = f"GetRoute of {address}: {exc}"
        if self._last is None:
            return Nodes(error=error)
        masters = {s.master: s.admin_address(os.environ) for s in self._last.shards}

        def admin(address: str) -> str:
            return masters.get(address) or admin_address(address, os.environ)

        return Nodes(
            topology_epoch=self._last.topology_epoch,
            targets=tuple(_targets(self._last, lambda _: "", admin)),
            public=self.tls,
            admin=self.tls,
            error=error,
        )


def _look(address: str, timeout_s: float, tls: TlsConfig | None) -> Answer | None:
    try:
        return look(address, timeout_s, tls)[0]
    except (ValueError, OSError):  # an address gRPC refuses; TLS files unreadable
        return None


class Sampler:
    """Samples of the nodes ``source`` names (module notes); ``close`` ends its
    threads. ``clock_s`` (monotonic seconds) and ``wall_ms`` (Unix ms) are the
    clocks it stamps samples with."""

    def __init__(
        self,
        source: NodeSource,
        timeout_s: float,
        *,
        clock_s: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.source = source
        self.timeout_s = timeout_s
        self._clock_s = clock_s
        self._wall_ms = wall_ms
        self._pool = ThreadPoolExecutor(max_workers=MAX_THREADS, thread_name_prefix="delayq-top")

    def sample(self) -> Sample:
        """Ask every node now (at most ~2-3 ``timeout_s``); raises ``ClusterError``
        only when DIR holds no cluster."""
        start = self._clock_s()
        nodes = self.source.nodes(self.timeout_s)
        at_s, wall_ms = self._clock_s(), self._wall_ms()
        probes = [
            self._pool.submit(probe_stats, t.address, self.timeout_s, nodes.public)
            for t in nodes.targets
        ]
        looks: list[Future[Answer | None] | None] = [
            self._pool.submit(_look, t.admin_address, self.timeout_s, nodes.admin)
            if t.admin_address
            else None
            for t in nodes.targets
        ]
        out = []
        for t, p, lk in zip(nodes.targets, probes, looks, strict=True):
            try:
                state, stats = p.result()
            except (ValueError, OSError):  # an address gRPC refuses; TLS files unreadable
                state, stats = DOWN, None
            out.append(
                NodeSample(
                    **t.ref(),
                    state=state,
                    stats=stats,
                    admin=lk.result() if lk is not None else None,
                )
            )
        return Sample(
            source=self.source.description,
            at_s=at_s,
            wall_ms=wall_ms,
            took_ms=round((self._clock_s() - start) * 1000),
            topology_epoch=nodes.topology_epoch,
            nodes=tuple(out),
            error=nodes.error,
        )

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> Sampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
