"""How the client spreads a call over the shards (pure: no sockets, no sleeping).

``route_of`` turns a GetRoute reply into a ``ShardMap``. ``Fanout`` drives one
logical call (a Schedule batch, a Cancel of many ids, an Ack of many receipts,
a Lookup, a call by topic and key) to completion: it groups the call's items by
owning shard (keys by jump hash, a schedule's and a call by key's alike; keyless
messages to one shard in turn; ids and receipts by the shard inside them),
hands the shell one ``Call`` per shard, takes back each result or error, and
says what to do next:

- a reply: its results go back in the caller's order;
- WRONG SHARD (FAILED_PRECONDITION with the owner trailer) or UNAVAILABLE: the
  shell fetches the map again and the items are grouped and sent anew (the map
  is fetched even when the error then ends the call, its attempts used up, so
  the next call goes where the map says now);
- RESOURCE_EXHAUSTED: sent again after the server's ``retry-after-ms``;
- anything else, or attempts or the deadline used up: the error is raised,
  unless another shard answered its part (which may be written): then the
  failed part's items get a per-item error (``on_error``) and the rest their
  results, so the caller sees what was done.

Items already answered are never sent twice. The call's deadline bounds every
RPC of it (``remaining_s``), retries included. ``merge_stats`` sums per-shard
Stats into one view with a per-shard breakdown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import grpc

from ..errors import WrongShard
from ..shardmap import ACTIVE, JOINING, LEAVING, ShardEntry, ShardMap, ShardMapError, key_shards
from .core import Call, RetryPolicy, retry_after_ms, retryable
from .outgoing import Outgoing
from .results import DueBucket, ScheduleStats, ShardStats, Stats, TopicStats

__all__ = [
    "Fanout",
    "Step",
    "id_groups",
    "key_groups",
    "merge_stats",
    "receipt_groups",
    "refreshes_route",
    "route_of",
    "schedule_groups",
    "transient",
    "wrong_shard",
]

T = TypeVar("T")
R = TypeVar("R")
Groups = dict[int, list[int]]


_STATES = (ACTIVE, JOINING, LEAVING)  # by the wire's ShardState number


def route_of(resp: Any) -> ShardMap:
    """The shard map of a GetRoute reply; raises ``ShardMapError`` when incomplete."""
    entries = sorted(
        (
            ShardEntry(
                index=s.index,
                master=s.master,
                replicas=tuple(s.replicas),
                epoch=s.epoch,
                state=_STATES[s.state] if 0 <= s.state < len(_STATES) else ACTIVE,
                admin=s.admin,
            )
            for s in resp.shards
        ),
        key=lambda e: e.index,
    )
    try:
        return ShardMap(topology_epoch=max(resp.topology_epoch, 1), shards=tuple(entries))
    except ShardMapError as exc:
        raise ShardMapError(f"GetRoute returned an unusable shard map: {exc}") from None


def _group(shards: Iterable[int]) -> Groups:
    groups: Groups = {}
    for i, shard in enumerate(shards):
        groups.setdefault(shard, []).append(i)
    return groups


def schedule_groups(route: ShardMap, messages: Sequence[Outgoing], spread: int) -> Groups:
    """Message indexes by shard: keyed ones by jump hash over the active shards,
    keyless ones all to active shard ``spread % owners`` (the caller turns
    ``spread`` once per call: even over calls, and a batch of keyless messages
    stays one RPC)."""
    count = route.owners
    if count == 1:
        return {0: list(range(len(messages)))}
    owners = key_shards([m.key for m in messages], count)
    owners[owners < 0] = spread % count
    return _group(owners.tolist())


def key_groups(route: ShardMap, keys: Sequence[str]) -> Groups:
    """Key indexes by the shard that owns each key (jump hash over the active
    shards, as a keyed schedule goes); an empty key to shard 0, which names it."""
    count = route.owners
    if count == 1:
        return {0: list(range(len(keys)))}
    owners = key_shards(keys, count)
    owners[owners < 0] = 0
    return _group(owners.tolist())


def id_groups(route: ShardMap, ids: Sequence[str]) -> Groups:
    """Id indexes by the shard inside each id; a malformed id, or one of a shard
    the map does not have, goes to shard 0, which names the problem."""
    if route.count == 1:
        return {0: list(range(len(ids)))}
    import numpy as np  # (with the id codec: only a client of many shards parses ids)

    from ..ids import MessageId

    cols, errors = MessageId.parse_columns(ids)
    shards = cols[:, 0].astype(np.int64)
    shards[(shards >= route.count) | (shards < 0)] = 0
    if errors:
        shards[list(errors)] = 0
    return _group(shards.tolist())


def receipt_groups(route: ShardMap, receipts: Sequence[str]) -> Groups:
    """Receipt indexes by the shard that handed each out (a malformed one: shard 0)."""
    if route.count == 1:
        return {0: list(range(len(receipts)))}
    from ..receipts import Receipt  # (only a client of many shards parses receipts)

    return _group(s if 0 <= s < route.count else 0 for s in Receipt.shards(receipts))


@dataclass
class Step(Generic[R]):
    """One RPC of a fan-out: to ``shard``, carrying the items ``items`` (indexes
    into the caller's list)."""

    shard: int
    items: list[int]
    call: Call[list[R]]


@dataclass
class Fanout(Generic[T, R]):
    """One logical call over ``items``: ``plan`` the RPCs for the current map,
    ``settle`` their outcomes, until ``done``; then ``results`` are in order."""

    items: Sequence[T]
    group: Callable[[ShardMap, Sequence[T]], Groups]
    make: Callable[[Sequence[T]], Call[list[R]]]
    retry: RetryPolicy
    deadline_s: float
    """Monotonic time after which nothing is sent again."""
    attempt_s: float = 0.0
    """Longest one RPC may take (0: up to the deadline). A node that hangs (stopped,
    cut off) costs one attempt, then the map is fetched again and the call resent:
    its shard may have failed over meanwhile."""
    on_error: Callable[[grpc.RpcError], R] | None = None
    """The per-item result of items whose shard failed for good while other shards
    answered (their parts are written: raising would hide that). None: raise."""
    results: list[R | None] = field(init=False)
    pending: list[int] = field(init=False)
    attempt: int = 0
    answered: bool = False
    """Some part of the call was answered (and may have written)."""
    stale_route: bool = False
    """A reply said the map is out of date: fetch it before the next ``plan``."""
    ask_first: str | None = None
    """A node that refused with a newer map than the one planned with: fetch the
    map from it first (the address given may not have re-read its map yet)."""
    _route: ShardMap | None = None

    def __post_init__(self) -> None:
        self.results = [None] * len(self.items)
        self.pending = list(range(len(self.items)))

    @property
    def done(self) -> bool:
        return not self.pending

    def plan(self, route: ShardMap) -> list[Step[R]]:
        self.attempt += 1
        self.stale_route = False
        self.ask_first = None
        self._route = route
        whole = len(self.pending) == len(self.items)
        local = self.items if whole else [self.items[i] for i in self.pending]
        groups = self.group(route, local)
        if len(groups) == 1:  # the usual call (one shard, or one key): no copies
            ((shard, _),) = groups.items()
            return [Step(shard, self.pending, self._watched(shard, self.make(local)))]
        return [
            Step(
                shard,
                [self.pending[j] for j in idxs],
                self._watched(shard, self.make([local[j] for j in idxs])),
            )
            for shard, idxs in sorted(groups.items())
        ]

    def _watched(self, shard: int, call: Call[list[R]]) -> Call[list[R]]:
        """``call`` whose answer, when it names a newer shard map than the one planned
        with (a rebalance changed the shards), has the map fetched from that node
        after the call, even when the call succeeds."""
        parse = call.parse

        def watched(resp: Any) -> list[R]:
            route = self._route
            if route is not None and getattr(resp, "topology_epoch", 0) > route.topology_epoch:
                self.stale_route = True
                self.ask_first = route.shards[shard].master
            return parse(resp)

        return Call(call.method, call.request, call.timeout_s, watched)

    def settle(
        self, outcomes: Sequence[tuple[Step[R], list[R] | grpc.RpcError]], now_s: float
    ) -> float:
        """Take each step's results or error. Returns seconds to wait before the
        next ``plan`` (0 when done); raises the error that ends the call."""
        failed: list[int] = []
        lost: list[tuple[Step[R], grpc.RpcError]] = []
        wait = 0.0
        for step, out in outcomes:
            if isinstance(out, grpc.RpcError):
                delay = self._retry_in(out, step.shard)
                if delay is None or now_s + delay >= self.deadline_s:
                    lost.append((step, out))
                    continue
                failed += step.items
                wait = max(wait, delay)
                continue
            if len(out) == len(self.results) and step.items is self.pending:
                self.results = list(out)  # one step answered everything
                continue
            for i, r in zip(step.items, out, strict=True):
                self.results[i] = r
        self.answered = self.answered or any(
            not isinstance(out, grpc.RpcError) for _, out in outcomes
        )
        if lost:
            self._give_up(lost, answered=self.answered)
        self.pending = sorted(failed)
        return wait

    def _give_up(self, lost: list[tuple[Step[R], grpc.RpcError]], *, answered: bool) -> None:
        """Steps that failed for good: their items get ``on_error`` when some other
        part of the call was answered, else the error is raised."""
        if self.on_error is None or not answered:
            raise lost[0][1]
        for step, exc in lost:
            for i in step.items:
                self.results[i] = self.on_error(exc)

    def remaining_s(self, now_s: float) -> float:
        """The time one RPC of the call may take: what is left of its deadline, at
        most ``attempt_s``."""
        left = self.deadline_s - now_s
        return max(0.001, min(left, self.attempt_s) if self.attempt_s else left)

    def _retry_in(self, exc: grpc.RpcError, shard: int) -> float | None:
        code = exc.code()
        trailers = exc.trailing_metadata()
        if wrong_shard(code, trailers):
            self.stale_route = True
            route = self._route
            if route is not None and _trailer_int(trailers, WrongShard.TOPOLOGY_EPOCH_KEY) > (
                route.topology_epoch
            ):
                self.ask_first = route.shards[shard].master
            if _owner(trailers) < 0:
                return None  # no shard of the map owns it: fetching the map again won't help
            # the refusing node may hold a newer map than the one fetched next, or an
            # older one that it re-reads about every second: back off as for UNAVAILABLE
            code = grpc.StatusCode.UNAVAILABLE
        elif code is grpc.StatusCode.UNAVAILABLE:
            self.stale_route = True  # the master may have moved
        elif code is grpc.StatusCode.DEADLINE_EXCEEDED and self.attempt_s:
            # one attempt ran out, not the call: the node may hang; its shard may
            # have a new master by now
            self.stale_route = True
            code = grpc.StatusCode.UNAVAILABLE
        return self.retry.delay_s(self.attempt, code, retry_after_ms(trailers))

    def ordered(self) -> list[R]:
        out: list[Any] = self.results
        return out


def _trailer_int(trailers: Iterable[tuple[str, Any]] | None, key: str) -> int:
    """An integer trailer (-1 when absent or not a number)."""
    for k, v in trailers or ():
        if k == key:
            try:
                return int(v)
            except ValueError:
                return -1
    return -1


def _owner(trailers: Iterable[tuple[str, Any]] | None) -> int:
    """The owner a wrong-shard error names (-1: no shard of the map)."""
    return _trailer_int(trailers, WrongShard.OWNER_KEY)


def wrong_shard(code: grpc.StatusCode, trailers: Iterable[tuple[str, Any]] | None) -> bool:
    """Whether an error says the call reached a shard that does not own it."""
    return code is grpc.StatusCode.FAILED_PRECONDITION and any(
        k == WrongShard.OWNER_KEY for k, _ in trailers or ()
    )


def refreshes_route(exc: grpc.RpcError) -> bool:
    """Whether the map should be fetched again after ``exc`` (the call reached the
    wrong shard, or a node is gone: its shard may have moved)."""
    code = exc.code()
    return code is grpc.StatusCode.UNAVAILABLE or wrong_shard(code, exc.trailing_metadata())


def transient(exc: grpc.RpcError) -> bool:
    """Whether the same call may succeed later (not the caller's mistake)."""
    return retryable(exc.code(), retry_after_ms(exc.trailing_metadata())) or refreshes_route(exc)


def merge_stats(answers: Sequence[ShardStats | None]) -> Stats:
    """Stats of every shard as one: counts, backlogs and due buckets summed per
    topic; lateness and release lag the worst shard's; ``shards`` keeps each
    shard's own view (with its ``node``). A shard gone from the map while the
    call ran (None) is left out."""
    per_shard = tuple(a for a in answers if a is not None)
    counts: dict[str, list[int]] = {}
    backlogs: dict[str, dict[str, int]] = {}
    dead: dict[str, dict[str, int]] = {}
    due: dict[str, dict[int, int]] = {}
    for s in per_shard:
        for t in s.topics:
            c = counts.setdefault(t.topic, [0, 0, 0])
            c[0] += t.pending
            c[1] += t.delivered
            c[2] += t.cancelled
            into = backlogs.setdefault(t.topic, {})
            for g, n in t.group_backlog.items():
                into[g] = into.get(g, 0) + n
            into = dead.setdefault(t.topic, {})
            for g, n in t.group_dead_lettered.items():
                into[g] = into.get(g, 0) + n
            buckets = due.setdefault(t.topic, {})
            for b in t.due:
                buckets[b.within_ms] = buckets.get(b.within_ms, 0) + b.count
    topics = tuple(
        TopicStats(
            name,
            counts[name][0],
            counts[name][1],
            counts[name][2],
            backlogs[name],
            tuple(DueBucket(w, c) for w, c in sorted(due[name].items())),
            dead[name],
        )
        for name in sorted(counts)
    )
    return Stats(
        topics,
        max((s.lateness_ms_p50 for s in per_shard), default=0),
        max((s.lateness_ms_p99 for s in per_shard), default=0),
        max((s.release_lag_ms for s in per_shard), default=0),
        per_shard,
        ScheduleStats(
            sum(s.schedules.schedules for s in per_shard),
            sum(s.schedules.firings for s in per_shard),
            sum(s.schedules.missed for s in per_shard),
            max((s.schedules.lateness_ms_p50 for s in per_shard), default=0),
            max((s.schedules.lateness_ms_p99 for s in per_shard), default=0),
        ),
    )
