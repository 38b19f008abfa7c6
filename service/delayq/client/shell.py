"""State shared by the sync and async client shells: address, deadline, retry
policy, the bootstrap channel, the per-address stub cache, the shard map and
the receive fan-ins. The caller passes the channel (blocking or asyncio), so
this module does no I/O. ``fanout_*`` build the ``Fanout`` of each routed call
once for both shells."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import grpc

from ..shardmap import ShardMap
from ..v1 import delayq_pb2_grpc as pb_grpc
from . import core, outgoing, routing
from .core import RetryPolicy
from .fanin import FanIn
from .outgoing import Outgoing, Scheduled
from .results import AckOutcome, CancelOutcome, ItemError

__all__ = ["ATTEMPT_S", "ShellState"]

FanKey = tuple[str, str, float, bool]
CHANNEL_OPTIONS = [
    # a restarted or moved node is dialled again within a second, not after
    # gRPC's default back-off of up to two minutes
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]
R = TypeVar("R")

ATTEMPT_S = 5.0
"""Longest one RPC of a routed call may take beyond its own wait (see
``routing.Fanout.attempt_s``): longer than a sync write's in-sync wait (3 s by
default), short enough that a hung master costs one attempt, not the call."""


class ShellState:
    def __init__(
        self,
        address: str,
        timeout_s: float,
        retry: RetryPolicy | None,
        channel: Any,
        channel_factory: Any,
        packed: bool = True,
    ) -> None:
        self.address = address
        self.packed = packed
        """Send batches in the packed form (off once a server answers that it does
        not read it: ``core.NotPacked``)."""
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        self._channel = channel
        self._new_channel = channel_factory
        self._stub = pb_grpc.DelayQueueStub(channel)
        self._routes: ShardMap | None = None
        self._shard_stubs: dict[str, Any] = {address: self._stub}
        self._channels = [channel]
        self._spread = itertools.count()
        self._fanins: dict[FanKey, FanIn] = {}
        self._state_lock = threading.Lock()  # the map held, the stub cache
        self._fan_lock = threading.Lock()  # the fan-ins' buffers and polls in flight

    def _cached_stub(self, address: str) -> Any:
        """The stub for a node, opening its channel on first use."""
        stub = self._shard_stubs.get(address)
        if stub is None:
            with self._state_lock:
                stub = self._shard_stubs.get(address)
                if stub is None:
                    channel = self._new_channel(address, options=CHANNEL_OPTIONS)
                    self._channels.append(channel)
                    stub = self._shard_stubs[address] = pb_grpc.DelayQueueStub(channel)
        return stub

    def _master_stub(self, route: ShardMap, shard: int) -> Any:
        return self._cached_stub(route.shards[shard].master)

    def _route_sources(self, first: str | None = None) -> list[str]:
        """Where to ask for the map: ``first`` (a node known to hold a newer map), the
        bootstrap address, then every node known."""
        known = [] if self._routes is None else list(self._routes.masters())
        if self._routes is not None:
            known += [r for s in self._routes.shards for r in s.replicas]
        return list(dict.fromkeys([*([first] if first else []), self.address, *known]))

    def _route_retry_s(self, exc: Any, attempt: int, deadline_s: float) -> float:
        """How long to wait before fetching the map again after ``exc``; raises it
        when it is not worth retrying or the deadline would pass."""
        wait = self.retry.delay_s(attempt, exc.code(), core.retry_after_ms(exc.trailing_metadata()))
        if wait is None or time.monotonic() + wait >= deadline_s:
            raise exc
        return wait

    def _take_route(self, new: ShardMap) -> ShardMap:
        """Serve by ``new`` unless the map held is newer."""
        with self._state_lock:
            if self._routes is None or new.topology_epoch >= self._routes.topology_epoch:
                self._routes = new
            return self._routes

    def _parsed(self, call: core.Call[R], answer: Any) -> R | grpc.RpcError:
        """A step's answer parsed, or its error; a server that did not read the
        packed form turns this client to the message form (``core.NotPacked``, an
        error the fan-out retries at once)."""
        if isinstance(answer, grpc.RpcError):
            return answer
        try:
            return call.parse(answer)
        except core.NotPacked as exc:
            self.packed = False
            return exc

    # -- the fan-out of each routed call
    def _fanout(
        self,
        items: Sequence[Any],
        group: Any,
        make: Any,
        timeout_s: float | None = None,
        on_error: Any = None,
    ) -> routing.Fanout[Any, Any]:
        total = timeout_s or self.timeout_s
        # an attempt may take the call's own wait (a long poll's) plus ATTEMPT_S
        attempt = total - self.timeout_s + ATTEMPT_S
        deadline = time.monotonic() + total
        return routing.Fanout(
            items, group, make, self.retry, deadline, attempt_s=attempt, on_error=on_error
        )

    def fanout_schedule(self, messages: Sequence[Outgoing]) -> routing.Fanout[Any, Scheduled]:
        spread = next(self._spread)
        return self._fanout(
            messages,
            lambda route, ms: routing.schedule_groups(route, ms, spread),
            # one message goes as itself: smaller than as columns, and packing
            # loads numpy, which a one-message call (``delayq send``) need not
            lambda ms: outgoing.schedule(ms, self.timeout_s, self.packed and len(ms) > 1),
            on_error=outgoing.refused,
        )

    def fanout_cancel(self, ids: Sequence[str]) -> routing.Fanout[str, CancelOutcome | ItemError]:
        return self._fanout(
            ids,
            routing.id_groups,
            lambda part: core.cancel(part, self.timeout_s),
            on_error=core.item_error,
        )

    def fanout_by_id(
        self, message_id: str, make: Callable[[str], core.Call[R]]
    ) -> routing.Fanout[str, R]:
        """A call about one message (reschedule, lookup), to its shard."""
        return self._fanout([message_id], routing.id_groups, lambda part: core.one(make(part[0])))

    def fanout_by_key(
        self,
        keys: Sequence[str],
        make: Callable[[Sequence[str]], core.Call[list[R]]],
        on_error: Callable[[grpc.RpcError], R] | None = None,
    ) -> routing.Fanout[str, R]:
        """A call by topic and key (lookup, cancel, reschedule), to each key's shard
        (``on_error``: as ``fanout_shards``')."""
        return self._fanout(keys, routing.key_groups, make, on_error=on_error)

    def fanout_settle(
        self, receipts: Sequence[str], make: Any
    ) -> routing.Fanout[str, AckOutcome | ItemError]:
        """Ack or change_invisibility: each receipt to the shard that handed it out."""
        return self._fanout(receipts, routing.receipt_groups, make, on_error=core.item_error)

    def fanout_shards(
        self,
        count: int,
        make: Callable[[], core.Call[R]],
        timeout_s: float | None = None,
        on_error: Callable[[grpc.RpcError], R] | None = None,
    ) -> routing.Fanout[int, R]:
        """One call to every shard (Stats, the group calls; a receive of a one-shard
        map). A shard gone from the map since is left out (its result stays None);
        ``on_error``: what stands for a shard that failed while others answered
        (None: the call raises)."""
        return self._fanout(
            list(range(count)),
            lambda route, shards: {s: [j] for j, s in enumerate(shards) if s < route.count},
            lambda part: core.one(make()),
            timeout_s,
            on_error,
        )

    def _fanin(self, topic: str, group: str, invisible_s: float, auto_ack: bool) -> FanIn:
        key = (topic, group, invisible_s, auto_ack)
        fan = self._fanins.get(key)
        if fan is None:
            fan = self._fanins.setdefault(key, FanIn(invisible_s, auto_ack))
        return fan
