"""The node's calls in terms of the engine's own values and errors (``Calls``):
one layer under every protocol the node speaks, delayq's own (``servicer``) and
RocketMQ 5's (``delayq.rocketmq``), each of which only converts its wire to
these calls and their answers back.

What every call needs, in one place: the engine calls run on a pool or on the
event loop; the checks of what this node may answer under its shard map
(``ownership``: keys, ids, receipts; the batch size); the map's re-read on a
wrong shard; passing on calls about messages that moved (``forwarding``); the
consumer's calls, the long poll of a receive and settling (``consuming``); the
calls by topic and key (``keycalls``); those of recurring schedules
(``schedulecalls``). One
``Calls`` serves the whole node (``app`` makes it
and hands it to every protocol). Every call takes and answers values (a
``ScheduleBatch``, ids, receipts; outcomes and errors per item), never a
protocol's messages. Concurrent small schedules, cancels, acks and re-timings
of either protocol are gathered into batches of at most ``GATHER_MOST`` items,
each one engine call (one per topic and group for settling calls:
``gathering``, ``batches``), each caller answered with its own outcome or error.

Invariants: an engine call that may block (an fsync) runs on the pool, never on
the event loop; one that cannot runs on the loop (``inline``: with async flush
every write). A ``WrongShard`` is answered only after the map file has been
read again (a newer map may say otherwise), and counted in
``Topology.refused``. A batch holds at most ``MAX_BATCH`` items. Errors are
raised as ``DelayqError``, or ``PassedOn`` (another shard's answer) for a call
passed on; a batch answers one value per item.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

import grpc

from ..delivery.pushtarget import PushTarget, literal_refusal, origin
from ..engine import (
    BatchOutcome,
    CancelOutcome,
    Engine,
    GroupStats,
    LookupResult,
    ScheduleBatch,
    ScheduleOutcome,
    TopicStats,
)
from ..errors import DelayqError, Forwarded, InvalidArgument, NotFound, WrongShard
from ..ids import MessageId
from ..push.snapshot import PushSnapshot
from ..role import Role
from ..settings import EngineSettings, FlushPolicy
from ..shardmap import JOINING, LEAVING, ShardMap
from ..tls import TlsConfig
from .batches import Batches, Settle
from .consuming import Consuming
from .forwarding import Forwarder
from .gathering import Gathering
from .groupcalls import GroupCalls
from .keycalls import KeyCalls
from .ownership import Held, Mode, check_keys
from .schedulecalls import ScheduleCalls
from .statuscodes import PassedOn
from .topology import Topology

__all__ = [
    "HOLD_POLL_S",
    "HOLD_WAIT_S",
    "MAX_BATCH",
    "Calls",
    "CancelAnswer",
    "NodeStats",
]

T = TypeVar("T")
In = TypeVar("In")

MAX_BATCH = 10_000
GATHER_MOST = 128
"""Most items (messages, ids, receipts) one gathered engine call holds: calls of one
message each gather up to it; a call of this many or more goes alone."""
HOLD_WAIT_S = 10.0  # longest a schedule held back by a finishing rebalance waits here
HOLD_POLL_S = 0.05  # how often it looks whether the map switched

CancelAnswer = CancelOutcome | DelayqError | PassedOn
"""What a cancel answers for one id: an outcome, this shard's error, or the error of
the shard it was passed on to."""


@dataclass(frozen=True, slots=True)
class _Elsewhere:
    """Where a call about a moved message goes: shard ``target``, or a search (None)."""

    target: int | None


def _rows(batch: ScheduleBatch) -> int:
    return len(batch.bodies)


def _ids(asked: tuple[Sequence[str], Mode]) -> int:
    return len(asked[0])


def _receipts(asked: Settle) -> int:
    return len(asked.receipts)


class NodeStats(NamedTuple):
    """What ``Calls.stats`` reads: the topics' figures, their groups' (by topic and
    group), release lateness, the node, and its recurring schedules (``schedules``,
    ``firings``, ``missed``, firing lateness ``p50`` and ``p99``)."""

    topics: list[TopicStats]
    groups: dict[tuple[str, str], GroupStats]
    lateness: dict[str, int]
    epoch: int
    role: Role
    commitlog_end: int
    schedules: dict[str, int]
    push: dict[tuple[str, str], PushSnapshot]
    """The pushers of this node, by topic and group (none but on a master)."""


def schedule_figures(engine: Engine) -> dict[str, int]:
    """The shard's recurring schedules as ``NodeStats.schedules`` gives them."""
    seen = engine.observing
    late = seen.schedule_lateness_snapshot()
    return {
        "schedules": seen.schedules(),
        "firings": seen.counters.get("schedule_firings", 0),
        "missed": seen.counters.get("schedule_missed", 0),
        "p50": late.percentile(0.5),
        "p99": late.percentile(0.99),
    }


def _any_secret(ref: str) -> None:
    """``Calls.check_push_secret`` of a node that has not been told how to check."""


class Calls:
    def __init__(
        self,
        engine: Engine,
        topology: Topology,
        *,
        threads: int = 64,
        peer_tls: TlsConfig | None = None,
    ) -> None:
        """``peer_tls``: how calls passed on to other shards are made (``tls``)."""
        self._engine = engine
        self.topology = topology
        self.shard = engine.settings.shard
        # With async flush no write waits for an fsync, so short engine calls run on the
        # event loop itself: the hop to a pool thread cost more than the call.
        self._inline_writes = engine.settings.flush is FlushPolicy.ASYNC
        # Each engine call that may block holds one thread, never the event loop.
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="delayq-rpc")
        self._forwarder = Forwarder(topology, self.shard, peer_tls)
        b = self._batches = Batches(engine, topology)
        # small calls are gathered (a big one goes alone: an engine call that holds
        # the loop for long delays the deliveries waiting behind it)
        most = min(GATHER_MOST, engine.settings.enqueue_queue_messages)
        self.schedules = Gathering(self._gathered(b.schedule), _rows, most)
        self.cancels = Gathering(self._gathered(b.cancel), _ids, GATHER_MOST)
        self.settles = Gathering(self._gathered(b.settle), _receipts, GATHER_MOST)
        self.consuming = Consuming(
            engine,
            run=self.run,
            by_map=self._by_map,
            settles=self.settles,
            check_batch=self.check_batch,
            inline_writes=self._inline_writes,
        )
        """The consumer's calls: the long poll and settling."""
        self.groups = GroupCalls(engine, self.run, self._inline_writes)
        """The calls about consumer groups' delivery policies."""
        self.keys = KeyCalls(
            engine, topology, self.run, self._forwarder, self.check_batch, self._inline_writes
        )
        """The calls by topic and key."""
        self.recurring = ScheduleCalls(engine, topology, self.run, self._inline_writes)
        """The calls about recurring schedules."""
        self.push_snapshots: Callable[[], Sequence[PushSnapshot]] = tuple
        """The node's pushers' figures (read on the loop, for Stats); the server sets it."""
        self.push_allow: Sequence[str] = ()
        """Networks (CIDR) push targets may be in though private, loopback..."""
        self.check_push_secret: Callable[[str], None] = _any_secret
        """Raises ``InvalidArgument("policy.push.secret_ref", ...)`` for a secret's name
        that does not resolve here; the server sets it (default: any is taken)."""
        # rate and in-flight limits are split over the shards the topics span
        self._unwatch = topology.on_change(lambda m: self._watch(engine, m))

    @staticmethod
    def _watch(engine: Engine, m: ShardMap) -> None:
        """A new map served: how many shards the topics span (rate and in-flight
        limits are split over them) and which are listed and not leaving, and
        joining (a message handed over to one still holds its key here:
        ``timers.bykey``)."""
        engine.set_topic_shards(m.count)
        listed = frozenset(e.index for e in m.shards if e.state != LEAVING)
        engine.set_map_shards(listed, frozenset(e.index for e in m.shards if e.state == JOINING))

    def gatherings(self) -> dict[str, Gathering[Any, Any]]:
        """The calls gathered into engine calls, by kind."""
        return {"schedule": self.schedules, "cancel": self.cancels, "settle": self.settles}

    def shutdown(self) -> None:
        self.consuming.shutdown()
        self._unwatch()
        for gathering in self.gatherings().values():
            gathering.close()
        self._pool.shutdown(wait=True, cancel_futures=True)

    async def close(self) -> None:
        """Close the channels calls were passed on through (after ``shutdown``)."""
        await self._forwarder.close()

    @property
    def settings(self) -> EngineSettings:
        return self._engine.settings

    @property
    def map(self) -> ShardMap:
        """The shard map this node serves by now."""
        return self.topology.map

    def now_ms(self) -> int:
        return self._engine.clock.now_ms()

    async def run(self, fn: Callable[[], T], *, inline: bool = False) -> T:
        """Run an engine call (on the loop when ``inline``, else on the pool), its
        delayq error raised as is; a ``WrongShard`` only once the map file was read
        again (and counted in ``Topology.refused``)."""
        return await self._by_map(lambda: self._call(fn, inline))

    async def _call(self, fn: Callable[[], T], inline: bool) -> T:
        if inline:
            return fn()
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn)

    def _gathered(self, fn: Callable[[list[In]], T]) -> Callable[[list[In]], Awaitable[T]]:
        """``fn`` (a ``Batches`` call) run as an engine write (on the loop with async
        flush, else on the pool), for a ``Gathering``."""

        async def run(items: list[In]) -> T:
            return await self._call(lambda: fn(items), self._inline_writes)

        return run

    async def _by_map(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """``attempt()``'s answer; on a ``WrongShard``, once more if the map file holds
        a newer map, else the refusal (counted in ``Topology.refused``)."""
        for first in (True, False):
            try:
                return await attempt()
            except WrongShard as exc:
                # another shard's, by this node's map: the file may hold a newer one
                # this node has not read yet (a client that has it would be refused
                # until then): read it now, and answer by it when it changed
                if first and type(exc) is WrongShard and self.topology.reload_now():
                    continue
                self.topology.refused += 1
                raise
        raise AssertionError("unreachable: the second pass returns or raises")

    @staticmethod
    def check_batch(n: int, field: str) -> None:
        if n > MAX_BATCH:
            raise InvalidArgument(field, f"{n} items; at most {MAX_BATCH} per call")

    # -- producing
    async def schedule(self, batch: ScheduleBatch, field: str) -> BatchOutcome:
        """Schedule a batch whose keys are this shard's (keyless: any active shard's);
        ``field`` names the batch in a refusal of its size. Gathered with concurrent
        schedules into one engine call."""
        self.check_batch(len(batch.bodies), field)
        return await self._by_map(lambda: self.schedules(batch))

    async def until_unheld(self, keys: Sequence[str], timeout_s: float | None) -> None:
        """While a finishing rebalance holds these keys back (``ownership.Held``), wait
        for the map to switch (it then says where they go), as long as the call's
        deadline (``timeout_s`` from now) allows; the schedule (or call by key)
        itself then answers."""
        if self.topology.moving() is None:
            return
        loop = asyncio.get_running_loop()
        left = HOLD_WAIT_S if timeout_s is None else min(HOLD_WAIT_S, timeout_s - 0.5)
        until = loop.time() + left
        while loop.time() < until:
            moving = self.topology.moving()
            if moving is None:
                return
            try:
                check_keys(self.topology.map, self.shard, keys, moving)
                return
            except Held:
                await asyncio.sleep(HOLD_POLL_S)
                self.topology.reload()
            except DelayqError:
                return

    async def cancel(
        self, ids: Sequence[str], mode: Mode, timeout_s: float | None
    ) -> list[CancelAnswer]:
        """Cancel by id, one answer per id; those of messages a rebalance moved away
        (or of a removed shard) are passed on to where they went (``forwarding``)."""

        self.check_batch(len(ids), "ids")
        out: list[CancelAnswer] = list(await self._by_map(lambda: self.cancels((ids, mode))))
        moved: list[tuple[int, str, int | None]] = []
        for k, (mid, o) in enumerate(zip(ids, out, strict=True)):
            if isinstance(o, Forwarded):
                moved.append((k, o.id, o.target))
            elif o is CancelOutcome.NOT_FOUND and self._searched(mid, mode):
                moved.append((k, mid, None))
        if moved:
            for k, answer in (await self._forwarder.cancel(moved, timeout_s)).items():
                out[k] = answer
        return out

    async def recall(self, message_id: str, field: str, timeout_s: float | None) -> CancelOutcome:
        """Cancel one message wherever it is, for a client that cannot route by id
        (RocketMQ's recall, arriving at any node): here, or passed on to the shard its
        id names. Raises ``DelayqError`` or ``PassedOn``."""
        owner = MessageId.parse(message_id, field).shard
        if self.topology.map.standalone or owner == self.shard:
            (got,) = await self.cancel([message_id], Mode.CLIENT, timeout_s)
        else:
            moved = [(0, message_id, owner)]
            got = (await self._forwarder.cancel(moved, timeout_s))[0]
        if isinstance(got, (DelayqError, PassedOn)):
            raise got
        return got

    def channel_to(self, address: str) -> grpc.aio.Channel:
        """The node's kept channel to another node's port (dialled as calls passed on
        are), for a front-end passing on calls in its own protocol (RocketMQ's sends
        of other shards' keys, ``rocketmq.passing``)."""
        return self._forwarder.channel(address)

    async def reschedule(
        self,
        message_id: str,
        mode: Mode,
        timeout_s: float | None,
        *,
        deliver_at_ms: int | None = None,
        delay_ms: int | None = None,
    ) -> ScheduleOutcome:
        """Move a pending message to a new time (its new id), here or where it went."""

        def run() -> ScheduleOutcome | _Elsewhere:
            return self._by_id(
                message_id,
                mode,
                lambda: self._engine.reschedule(
                    message_id, deliver_at_ms=deliver_at_ms, delay_ms=delay_ms
                ),
            )

        out = await self.run(run)
        if isinstance(out, _Elsewhere):
            return await self._forwarder.reschedule(
                out.target, message_id, deliver_at_ms, delay_ms, timeout_s
            )
        return out

    async def lookup(self, message_id: str, mode: Mode, timeout_s: float | None) -> LookupResult:
        """What a message is and holds, here or where it went."""

        def run() -> LookupResult | _Elsewhere:
            return self._by_id(message_id, mode, lambda: self._engine.lookup(message_id))

        out = await self.run(run, inline=True)
        if isinstance(out, _Elsewhere):
            return await self._forwarder.lookup(out.target, message_id, timeout_s)
        return out

    def _searched(self, message_id: str, mode: Mode) -> bool:
        """Whether a client's id names a shard the map no longer lists (drained and
        removed): the other shards are asked for its message (``forwarding``)."""
        m = self.topology.map
        if mode is not Mode.CLIENT or m.standalone:
            return False
        try:
            return MessageId.parse(message_id).shard >= m.count
        except DelayqError:
            return False

    def _by_id(self, message_id: str, mode: Mode, fn: Callable[[], T]) -> T | _Elsewhere:
        """``fn`` (an engine call about one message), or where else to ask."""
        self._batches.owns_ids([message_id], "id", mode)
        try:
            return fn()
        except Forwarded as moved:
            return _Elsewhere(moved.target)
        except NotFound:
            if self._searched(message_id, mode):
                return _Elsewhere(None)
            raise

    def check_push(self, target: PushTarget) -> None:
        """Refuse a push target this node would never send to: a literal address of
        a refused category not in ``push_allow`` (names are judged when connecting),
        or a secret's name that does not resolve (``check_push_secret``)."""
        refused = literal_refusal(target.url, self.push_allow)
        if refused is not None:
            raise InvalidArgument(
                "policy.push.url",
                f"{origin(target.url)} is a {refused} address, refused unless the "
                "server's push allow-list (--push-allow) holds it",
            )
        if target.secret_ref:
            self.check_push_secret(target.secret_ref)

    # -- the node
    async def stats(self, topic: str | None) -> NodeStats:
        def run() -> NodeStats:
            e = self._engine
            groups = e.observing.group_stats()
            topics = e.stats(topic)
            return NodeStats(
                topics,
                groups,
                e.lateness(),
                e.epoch,
                e.role,
                e.commitlog_end,
                schedule_figures(e),
                push,
            )

        push = {(s.topic, s.group): s for s in self.push_snapshots()}  # on the loop
        return await self.run(run)
