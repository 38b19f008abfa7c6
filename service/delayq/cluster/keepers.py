"""The failover loops of a local cluster's shards (``control.keeper.ShardKeeper``,
one thread a shard), wired to the supervisor: each calls its shard's nodes at
their admin addresses (with TLS, the supervisor's certificate), records through
the registry's ``store`` and publishes a new master through its ``publish``.

Invariants: a shard has a keeper exactly when the cluster has several nodes a
shard (a shard of one node has nothing to fail over to: no loop, no admin calls,
no lease); a keeper is made before its shard's nodes start (they ask it how to
start: ``start_target``) and started after; keepers stop before the nodes do, so
nothing fails over while they stop.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from ..control.admin import GrpcAdmin
from ..control.keeper import KeeperSettings, ShardKeeper
from .certs import LocalTls, control_tls
from .layout import Layout
from .registry import ShardRegistry

__all__ = ["KeepersHost", "ShardKeepers"]


class KeepersHost(Protocol):
    """What a new keeper is made from (the layout changes with ``cluster scale``)."""

    layout: Layout
    tls_files: LocalTls | None


class ShardKeepers:
    def __init__(
        self, host: KeepersHost, registry: ShardRegistry, settings: KeeperSettings
    ) -> None:
        self._host = host
        self._registry = registry
        self.settings = settings
        self._by_shard: dict[int, ShardKeeper] = {}

    def add(self, shards: Iterable[int], *, start: bool = False) -> None:
        """Make the keepers of ``shards`` (their records must be in the registry),
        and start them when ``start``; nothing with one node a shard."""
        if self._host.layout.replicas <= 1:
            return
        for s in shards:
            self._by_shard[s] = k = self._make(s)
            if start:
                k.start()

    def _make(self, shard: int) -> ShardKeeper:
        nodes = [(n.name, n.admin_address) for n in self._host.layout.shard_nodes(shard)]
        return ShardKeeper(
            shard=shard,
            nodes=nodes,
            record=self._registry.records[shard],
            settings=self.settings,
            admin=GrpcAdmin(dict(nodes), control_tls(self._host.tls_files)),
            store=self._registry.store,
            publish=self._registry.publish,
        )

    def of(self, shard: int) -> ShardKeeper | None:
        """The keeper of ``shard`` (None: the shard has none)."""
        return self._by_shard.get(shard)

    def start(self) -> None:
        for k in self._by_shard.values():
            k.start()

    def stop(self) -> None:
        for k in self._by_shard.values():
            k.stop()

    def detach(self, first: int) -> list[ShardKeeper]:
        """Take out the keepers of the shards from ``first`` on, to be stopped."""
        return [self._by_shard.pop(s) for s in sorted(self._by_shard) if s >= first]

    def ready(self, first: int = 0) -> bool:
        """Every keeper of the shards from ``first`` on is ready (``ShardKeeper.ready``)."""
        return all(k.ready() for s, k in self._by_shard.items() if s >= first)
