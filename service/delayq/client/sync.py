# GENERATED from aio.py by scripts/gen_sync_client.py: edit that, then run it.
"""``delayq.Client``: the blocking client of a delayq cluster; generated
from ``aio.py`` (``AsyncClient``), which documents it. Thread-safety: a Client
may be shared by threads (gRPC channels are); ``producer()`` gives a ``Producer``
that is safe to ``send`` from many threads.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import grpc

from ..addresses import DEFAULT_ADDRESS, check_target
from ..argchecks import RECEIVE_INVISIBLE_MS, RECEIVE_MAX_MESSAGES
from ..tls import TlsConfig
from . import _sync_io as io
from . import core, groups, outgoing, routing
from .core import Received, RetryPolicy
from .errors import NotFound, from_item, from_rpc
from .fanin import FanIn
from .outgoing import Outgoing, Scheduled
from .results import (
    AckOutcome,
    CancelOutcome,
    GroupInfo,
    GroupPolicy,
    IfExists,
    ItemError,
    KeyLookups,
    Lookup,
    Stats,
)
from .scheduling import Scheduling
from .shell import CHANNEL_OPTIONS
from .subscription import RECONNECT_S, Subscription

__all__ = ["Client"]


class Client(Scheduling):
    """Client of a delayq cluster, given any one node's address: it fetches the
    shard map from it and routes every call (see ``client.routing``); receive and
    subscribe fan in from every shard. A node serving alone is a cluster of one
    shard. Every failure raises a ``ClientError``."""

    def __init__(
        self,
        address: str = DEFAULT_ADDRESS,
        *,
        timeout_s: float = 10.0,
        retry: RetryPolicy | None = None,
        tls: TlsConfig | None = None,
        packed: bool = True,
    ) -> None:
        """``tls``: dial every node over TLS (``delayq.tls``); None: plaintext.
        ``packed``: send Schedule and Ack batches as columns (``delayq.packed``;
        a server older than that form is met once, then sent messages); False:
        a protobuf message per item, as other languages' stubs do."""
        check_target(address)  # gRPC would dial a port out of range wrapped
        super().__init__(
            address,
            timeout_s,
            retry,
            io.dial(address, tls, CHANNEL_OPTIONS),
            functools.partial(io.dial, tls=tls),
            packed,
        )
        self._polls = io.Polls()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._fan_lock:  # polls in flight end; what they held comes again later
            for fan in self._fanins.values():
                for poll in fan.inflight.values():
                    poll.handle.cancel()
        for channel in self._channels:
            io.close_channel(channel)

    # -- messages
    def schedule(
        self,
        topic: str,
        body: bytes,
        *,
        at: datetime | int | None = None,
        delay: timedelta | float | None = None,
        level: int | None = None,
        key: str = "",
        headers: Mapping[str, str] | None = None,
        if_exists: IfExists | str | None = None,
        dedup_window: timedelta | float | None = None,
    ) -> Scheduled:
        """Schedule one message; ``at`` (aware datetime or epoch ms), ``delay`` (seconds)
        or ``level`` (RocketMQ delay level 1..N of the server's ``--delay-levels``).
        With a ``key``, ``if_exists`` schedules it once per key (``IfExists``: ``"reject"``
        raises ``AlreadyExists`` naming the message that holds the key, ``"keep"``
        answers that message, ``"replace"`` cancels the key's pending ones);
        ``dedup_window`` (a ``timedelta`` or seconds) keeps the key taken that long
        after acceptance. A refused message raises its error (``InvalidArgument``
        naming the field...)."""
        m = Outgoing(
            topic=topic,
            body=body,
            at=at,
            delay=delay,
            level=level,
            key=key,
            headers=headers or {},
            if_exists=if_exists,
            dedup_window=dedup_window,
        )
        [sent] = self.schedule_many([m])
        if sent.error is not None:
            raise from_item(sent.error, sent.id, sent.deliver_at_ms)
        return sent

    def schedule_many(self, messages: Sequence[Outgoing]) -> list[Scheduled]:
        """Schedule a batch, split by owning shard (keyless messages: one shard per
        call, in turn). Results come in the batch's order; a refused message has
        ``error`` set (an ``ItemError``)."""
        return self._routed(self.fanout_schedule(messages))

    def cancel(self, *ids: str) -> list[CancelOutcome | ItemError]:
        """An outcome per id, in order (an ``ItemError`` for a malformed id, or one whose
        shard failed while others answered); one id's error is raised, retried first."""
        attempt = 0
        while True:
            attempt += 1
            outcomes = self._routed(self.fanout_cancel(ids))
            if len(ids) != 1 or not isinstance(err := outcomes[0], ItemError):
                return outcomes
            wait = self.retry.delay_s(attempt, err.status, err.retry_after_ms or None)
            if wait is None:
                raise from_item(err)
            io.sleep(wait)

    def reschedule(
        self,
        message_id: str,
        *,
        at: datetime | int | None = None,
        delay: timedelta | float | None = None,
    ) -> Scheduled:
        call = outgoing.reschedule(message_id, at, delay, self.timeout_s)  # checks at/delay first
        return (self._routed(self.fanout_by_id(message_id, lambda _: call)))[0]

    def lookup(self, message_id: str) -> Lookup:
        make = functools.partial(core.lookup, timeout_s=self.timeout_s)
        return (self._routed(self.fanout_by_id(message_id, make)))[0]

    # -- by topic and key (every pending message of the topic with the key)
    def lookup_key(self, topic: str, key: str) -> KeyLookups:
        """The pending messages of ``topic`` with ``key``, oldest first, at most the
        oldest 1000 (``total``: how many); ``NotFound`` when none (more than one
        only when scheduled without ``if_exists``). One call; a message whose body
        did not fit its answer (4 MiB of bodies) is looked up by id."""
        call = core.one(core.lookup_key(topic, key, self.timeout_s))
        [found] = self._routed(self.fanout_by_key([key], lambda _: call))
        whole = {m.id: m for m in found.messages}
        got = [whole[i] if i in whole else self.lookup(i) for i in found.ids]
        return KeyLookups(got, found.matches)

    def cancel_key(self, topic: str, key: str) -> int:
        """Cancel every pending message of ``topic`` with ``key``: how many;
        ``NotFound`` when none."""
        [n] = self.cancel_keys(topic, [key])
        if isinstance(n, ItemError):
            raise from_item(n)
        if not n:
            raise NotFound(
                f"key: no pending message of topic {topic} has key {key!r}",
                status=grpc.StatusCode.NOT_FOUND,
            )
        return n

    def cancel_keys(self, topic: str, keys: Sequence[str]) -> list[int | ItemError]:
        """Cancel every pending message of ``topic`` with each key: how many, per key
        in order (0: none had it; an ``ItemError`` for a malformed key, or one whose
        shard failed while others answered)."""

        def make(part: Sequence[str]) -> core.Call[list[int | ItemError]]:
            return core.cancel_keys(topic, part, self.timeout_s)

        return self._routed(self.fanout_by_key(keys, make, core.item_error))

    def reschedule_key(
        self,
        topic: str,
        key: str,
        *,
        at: datetime | int | None = None,
        delay: timedelta | float | None = None,
    ) -> list[Scheduled]:
        """Move every pending message of ``topic`` with ``key`` to ``at`` or after
        ``delay``: the new messages (new ids), oldest first; ``NotFound`` when none."""
        call = outgoing.reschedule_key(topic, key, at, delay, self.timeout_s)
        return (self._routed(self.fanout_by_key([key], lambda _: core.one(call))))[0]

    # -- consumers
    def receive(
        self,
        topic: str,
        group: str,
        *,
        max_messages: int = RECEIVE_MAX_MESSAGES,
        wait_s: float = 0.0,
        invisible_s: float = RECEIVE_INVISIBLE_MS / 1000,
        auto_ack: bool = False,
    ) -> Sequence[Received]:
        """Up to ``max_messages`` due messages for ``group``, long-polling ``wait_s``,
        from every shard (see ``client.fanin``). Ack them by receipt (a one-shard
        answer is a ``ReceivedBatch``: ack its ``receipts`` as they are), or pass
        ``auto_ack`` to have them acked as they are handed out (at-most-once: no
        receipts, never redelivered)."""
        route = self._table()
        if route.count == 1:
            call = core.receive(
                topic, group, max_messages, wait_s, invisible_s, self.timeout_s, auto_ack
            )
            return (self._routed(self.fanout_shards(1, lambda: call, call.timeout_s)))[0]
        fan = self._fanin(topic, group, invisible_s, auto_ack)
        deadline = time.monotonic() + wait_s + self.timeout_s
        share = FanIn.share(route.count, max_messages)
        call = core.receive(topic, group, share, wait_s, invisible_s, self.timeout_s, auto_ack)
        with self._fan_lock:
            fan.begin()
            now = time.monotonic()
            if not fan.buffered(now):
                for shard in fan.idle(route.count):
                    method = self._master_stub(route, shard).Receive
                    fan.sent(shard, self._polls.start(method, call.request, call.timeout_s), now)
        while True:
            with self._fan_lock:
                now = time.monotonic()
                fan.harvest(self._polls.outcome, self._polls.epoch)
                if fan.buffered(now) or not fan.inflight or now >= deadline:
                    taken = fan.take(max_messages, now)
                    failure = None if taken else fan.failure()
                    break
                handles = [poll.handle for poll in fan.inflight.values()]
                seen = self._polls.ended
            self._polls.wait(handles, seen, deadline - now)
        if fan.stale_route(route.topology_epoch):
            self._refresh_quietly()
        if failure is not None:
            raise from_rpc(failure) from failure
        return taken

    def subscribe(
        self,
        topic: str,
        group: str,
        *,
        max_messages: int = 1000,
        wait_s: float = 1.0,
        invisible_s: float = RECEIVE_INVISIBLE_MS / 1000,
        auto_ack: bool = False,
        reconnect_s: float = RECONNECT_S,
    ) -> Subscription:
        """Batches of due messages pushed by every shard as they come due (no request
        per batch), merged into one stream that follows failovers and rebalances
        (``AsyncSubscription``). Iterate it; ``cancel()`` it, or leave its ``with``,
        to stop."""
        call = core.subscribe(topic, group, max_messages, wait_s, invisible_s, auto_ack)
        return Subscription(self, call, reconnect_s)

    def ack(self, topic: str, group: str, receipts: Sequence[str]) -> list[AckOutcome | ItemError]:
        """An outcome per receipt, in order (an ``ItemError`` for a malformed one, or
        one whose shard failed while others answered)."""
        return self._routed(
            self.fanout_settle(
                receipts, lambda part: core.ack(topic, group, part, self.timeout_s, self.packed)
            )
        )

    def change_invisibility(
        self, topic: str, group: str, receipts: Sequence[str], invisible_s: float
    ) -> list[AckOutcome | ItemError]:
        def make(part: Sequence[str]) -> core.Call[list[AckOutcome | ItemError]]:
            return core.change_invisibility(topic, group, part, invisible_s, self.timeout_s)

        return self._routed(self.fanout_settle(receipts, make))

    def nack(self, topic: str, group: str, receipts: Sequence[str]) -> list[AckOutcome | ItemError]:
        """A negative acknowledgement ("failed, try later"): each message is handed
        out again after its group's backoff for the attempt it had (or goes to the
        dead-letter topic once it had ``max_attempts``). An outcome per receipt, as
        ``change_invisibility``."""

        def make(part: Sequence[str]) -> core.Call[list[AckOutcome | ItemError]]:
            return core.nack(topic, group, part, self.timeout_s)

        return self._routed(self.fanout_settle(receipts, make))

    # -- consumer groups' delivery policies (every shard's master: client.groups)
    def _every_shard(self, make: Any) -> list[Any]:
        """``make()``'s call on every shard's master: each one's answer, a
        ``groups.Failed`` for one that failed while others answered."""
        route = self._table()
        return self._routed(self.fanout_shards(route.count, make, on_error=groups.Failed))

    def _agreed(self, topic: str, group: str, make: Any, write: bool) -> GroupPolicy:
        """The policy every shard answered ``make()``'s call with (``groups.agreed``)."""
        answers = self._every_shard(make)
        return groups.agreed(f"group {group} of {topic}", answers, write)[0]

    def set_group_policy(self, topic: str, group: str, policy: GroupPolicy) -> GroupPolicy:
        """Set ``group``'s delivery policy on ``topic`` (all of it: see
        ``GroupPolicy``) on every shard; the policy stored (a burst filled in)."""
        make = functools.partial(groups.set_policy, topic, group, policy, self.timeout_s)
        return self._agreed(topic, group, make, True)

    def group_policy(self, topic: str, group: str) -> GroupPolicy:
        """``group``'s delivery policy on ``topic``: the one set, else the server's
        defaults; ``FailedPrecondition`` when the shards disagree."""
        make = functools.partial(groups.policy, topic, group, self.timeout_s)
        return self._agreed(topic, group, make, False)

    def groups(self, topic: str = "") -> list[GroupInfo]:
        """Every consumer group the shards know (set, or received by), of ``topic``
        alone when given, by topic then group."""
        make = functools.partial(groups.listing, topic, self.timeout_s)
        return groups.merge_groups(self._every_shard(make))

    def pause_group(self, topic: str, group: str) -> GroupPolicy:
        """Hand ``group`` nothing of ``topic`` until ``resume_group``: messages due
        meanwhile wait, then go in due order. The policy stored."""
        make = functools.partial(groups.pause, topic, group, True, self.timeout_s)
        return self._agreed(topic, group, make, True)

    def resume_group(self, topic: str, group: str) -> GroupPolicy:
        """Undo ``pause_group``; the policy stored."""
        make = functools.partial(groups.pause, topic, group, False, self.timeout_s)
        return self._agreed(topic, group, make, True)

    # -- cluster
    def stats(self, topic: str = "") -> Stats:
        """Stats of every shard: summed per topic, with each shard's own under
        ``shards`` (see ``routing.merge_stats``)."""
        route = self._table()
        per_shard = self._routed(
            self.fanout_shards(route.count, lambda: core.stats(topic, self.timeout_s))
        )
        return routing.merge_stats(per_shard)

    def route(self, topic: str = "") -> Any:
        """The GetRoute reply of the address given."""
        return self._run(core.route(topic, self.timeout_s))
