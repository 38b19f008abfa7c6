# GENERATED from aiosubscription.py by scripts/gen_sync_client.py: edit that, then run it.
# ruff: noqa: UP028  (an async for that yields reads as a yield from once unasynced)
"""``delayq.Subscription``: ``Client.subscribe``'s merged stream of
every shard's Subscribe, following failovers and rebalances; generated from
``aiosubscription.py`` (``AsyncSubscription``), which documents it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import grpc

from ..shardmap import ShardMap
from . import _sync_io as io
from . import core, routing
from .core import Received
from .errors import Unavailable, translated

__all__ = ["RECONNECT_S", "Shell", "Subscription"]

RECONNECT_S = 60.0
"""How long a subscription keeps reopening a shard's stream that no node serves
(a failover takes a lease and a probe or two) before it raises ``Unavailable``."""


class Shell(Protocol):
    """What a subscription uses of its ``AsyncClient``: the map and the stubs."""

    retry: core.RetryPolicy

    def _table(self, deadline_s: float | None = None) -> ShardMap: ...

    def _refresh_quietly(self, first: str | None = None) -> None: ...

    def _master_stub(self, route: ShardMap, shard: int) -> Any: ...


class Subscription:
    """A Subscribe stream per shard, merged: iterating yields one ``Sequence[Received]``
    per batch of any shard, as they come. Each shard's stream is reopened at its
    master when it fails as a failover or rebalance explains (see the module), for
    up to ``reconnect_s`` without a batch; a shard that joins the map is subscribed
    to when a batch or a reopening shows the new map. Delivery stays at-least-once:
    a batch handed out and not acked before a failover comes again from the new
    master after its invisibility."""

    def __init__(
        self, client: Shell, call: core.Call[Sequence[Received]], reconnect_s: float
    ) -> None:
        self._client = client
        self._call = call
        self._reconnect_s = reconnect_s
        self._cancelled = False
        self._stop = io.Event()
        self._streams: dict[int, Any] = {}
        self._started: set[int] = set()
        self._merge: io.Merge[Sequence[Received]] | None = None

    def __iter__(self) -> Iterator[Sequence[Received]]:
        return self._batches()

    def _batches(self) -> Iterator[Sequence[Received]]:
        route = self._client._table()
        self._merge = io.Merge(route.count)
        self._follow_new(route)
        try:
            with translated():
                for batch in self._merge:
                    yield batch
        finally:
            self.cancel()

    def _follow_new(self, route: ShardMap) -> None:
        """Subscribe to the shards of ``route`` not yet followed."""
        merge = self._merge
        for shard in range(route.count):
            if merge is not None and shard not in self._started and not self._cancelled:
                self._started.add(shard)
                merge.add(self._follow(shard))

    def _follow(self, shard: int) -> Iterator[Sequence[Received]]:
        """Shard ``shard``'s batches, its stream reopened until the subscription is
        cancelled, the shard leaves the map, or it fails for good."""
        client = self._client
        failing_since: float | None = None
        attempt = 0
        while not self._cancelled:
            route = client._table()
            if shard >= route.count:
                return  # a rebalance removed the shard
            stream = client._master_stub(route, shard).Subscribe(self._call.request)
            self._streams[shard] = stream
            if self._cancelled:  # cancel() may have missed it
                stream.cancel()
            error: grpc.RpcError | None = None
            try:
                for resp in stream:
                    failing_since, attempt = None, 0
                    if resp.topology_epoch > route.topology_epoch:
                        client._refresh_quietly(route.shards[shard].master)
                        route = client._table()
                        self._follow_new(route)
                    yield self._call.parse(resp)
            except grpc.RpcError as exc:
                if self._cancelled:
                    return
                if not _reopens(exc):
                    raise
                error = exc
            finally:
                self._streams.pop(shard, None)
            # the stream ended or failed as a failover or rebalance does: reopen it
            now = time.monotonic()
            failing_since = failing_since or now
            if now - failing_since >= self._reconnect_s:
                if error is not None:
                    raise error
                raise Unavailable(
                    f"shard {shard}: no node served its stream for {self._reconnect_s:g} s"
                )
            attempt += 1
            client._refresh_quietly()
            self._follow_new(client._table())
            io.pause(self._stop, client.retry.backoff_s(attempt))

    def cancel(self) -> None:
        """Stop every stream; the iteration ends."""
        self._cancelled = True
        self._stop.set()
        for stream in list(self._streams.values()):
            stream.cancel()
        if self._merge is not None:
            self._merge.close()

    def close(self) -> None:
        """``cancel()``."""
        self.cancel()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()


def _reopens(exc: grpc.RpcError) -> bool:
    """Whether a subscription's stream that failed with ``exc`` is worth reopening
    at the shard's (maybe new) master: its node went away or stepped down, or the
    server ended it (CANCELLED while the subscription was not)."""
    return routing.transient(exc) or exc.code() is grpc.StatusCode.CANCELLED
