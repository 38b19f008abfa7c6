"""The client's logic, written once (pure: no sockets, no sleeping). The sync
``Client`` and the ``AsyncClient`` are thin shells that send what ``Call``
describes and hand the response to its ``parse``. Here: ``Call``, the retry
policy, and the calls about messages already sent, consumers and the cluster
(cancel, lookup, by id or by topic and key, receive, subscribe, ack, stats,
route); the messages going out (schedule, reschedule) are ``outgoing``'s.

Retries: UNAVAILABLE, and RESOURCE_EXHAUSTED with the server's ``retry-after-ms``
(delayq's congestion), are retried with exponential backoff and jitter,
honouring that hint; gRPC's own RESOURCE_EXHAUSTED (a message over a size limit)
and INVALID_ARGUMENT are the caller's to fix and never retried. Every call has a
deadline.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

import grpc

from ..packed import pack_texts
from ..v1 import delayq_pb2 as pb
from .errors import ServerError, retry_after_ms
from .received import Received, received
from .results import (
    ACK_BY_NUMBER,
    CANCEL_BY_NUMBER,
    STATE_BY_NUMBER,
    AckOutcome,
    CancelOutcome,
    DueBucket,
    GroupPolicy,
    GroupStats,
    ItemError,
    Lookup,
    NodeStats,
    PushStats,
    ScheduleStats,
    ShardStats,
    TopicStats,
)

__all__ = [
    "Call",
    "NotPacked",
    "Received",
    "RetryPolicy",
    "cancel_keys",
    "item_error",
    "lookup_key",
    "one",
    "policy_of",
    "received",
    "retry_after_ms",
    "retryable",
]

R = TypeVar("R")


RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED}


def retryable(code: grpc.StatusCode, retry_after_ms: int | None) -> bool:
    """Whether a call that failed with ``code`` may succeed if sent again: UNAVAILABLE,
    or RESOURCE_EXHAUSTED that says when (``retry-after-ms``): without it, it is gRPC's
    own (a message over a size limit), which the same call would meet again."""
    if code is grpc.StatusCode.RESOURCE_EXHAUSTED:
        return retry_after_ms is not None
    return code in RETRYABLE


@dataclass(frozen=True)
class Call(Generic[R]):
    """One RPC: method name on the stub, request, deadline (s; None for a stream),
    response parser."""

    method: str
    request: Any
    timeout_s: float | None
    parse: Callable[[Any], R]


def one(call: Call[R]) -> Call[list[R]]:
    """``call`` with its result as a list of one (the shape a fan-out collects)."""
    parse = call.parse
    return Call(call.method, call.request, call.timeout_s, lambda resp: [parse(resp)])


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    attempts: int = 6
    """Tries in all (1: no retry)."""
    base_s: float = 0.05
    """First backoff; doubles each try, with full jitter."""
    max_s: float = 2.0
    """Longest single backoff."""

    def backoff_s(self, attempt: int) -> float:
        """The jittered exponential backoff after try ``attempt`` (no limit on tries:
        a subscription following a failover keeps reopening)."""
        return random.uniform(0, min(self.max_s, self.base_s * 2 ** (min(attempt, 64) - 1)))

    def delay_s(
        self, attempt: int, code: grpc.StatusCode, retry_after_ms: int | None
    ) -> float | None:
        """Seconds to wait before try ``attempt + 1``; None: do not retry."""
        if not retryable(code, retry_after_ms) or attempt >= self.attempts:
            return None
        backoff = self.backoff_s(attempt)
        if retry_after_ms is not None:
            backoff = max(backoff, retry_after_ms / 1000)
        return backoff


def item_error(exc: grpc.RpcError) -> ItemError:
    """The per-item error of an item (a message, id or receipt) whose shard failed
    while other shards answered theirs: the shard's error, not this item's."""
    details = exc.details() if hasattr(exc, "details") else str(exc)
    return ItemError(exc.code().value[0], f"{exc.code().name}: {details}")


class NotPacked(grpc.RpcError):  # type: ignore[misc]
    """A server older than the packed form answered a packed call (it read no items:
    nothing was done). Retried at once in the message form, like UNAVAILABLE; the
    client sends messages from then on."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "the server does not read the packed form: sent again as messages"

    def trailing_metadata(self) -> tuple[tuple[str, Any], ...]:
        return ()


def cancel(ids: Sequence[str], timeout_s: float) -> Call[list[CancelOutcome | ItemError]]:
    """An outcome per id, or an ``ItemError`` for a malformed id."""

    def parse(resp: Any) -> list[CancelOutcome | ItemError]:
        return _outcomes(resp, CANCEL_BY_NUMBER)

    return Call("Cancel", pb.CancelRequest(ids=list(ids)), timeout_s, parse)


def cancel_keys(topic: str, keys: Sequence[str], timeout_s: float) -> Call[list[int | ItemError]]:
    """How many pending messages of ``topic`` each key had cancelled (0: none had
    it), or an ``ItemError`` for a malformed key."""

    def parse(resp: Any) -> list[int | ItemError]:
        return [ItemError.of(r.error) if r.HasField("error") else r.cancelled for r in resp.results]

    return Call("Cancel", pb.CancelRequest(topic=topic, keys=list(keys)), timeout_s, parse)


def _lookup(r: Any) -> Lookup:
    """A LookupResponse as a ``Lookup``."""
    return Lookup(
        r.id,
        STATE_BY_NUMBER[r.state] if r.state < len(STATE_BY_NUMBER) else STATE_BY_NUMBER[0],
        r.topic,
        r.deliver_at_ms,
        r.accepted_at_ms,
        r.key,
        dict(r.headers),
        r.body,
    )


def lookup(message_id: str, timeout_s: float) -> Call[Lookup]:
    return Call("Lookup", pb.LookupRequest(id=message_id), timeout_s, _lookup)


class KeyFound(NamedTuple):
    """A Lookup by key's answer: the messages it gave whole (the oldest first), the
    ids of those it lists (at most 1000, oldest first) and how many there are."""

    messages: list[Lookup]
    ids: list[str]
    matches: int


def lookup_key(topic: str, key: str, timeout_s: float) -> Call[KeyFound]:
    """The pending messages of ``topic`` with ``key`` (NOT_FOUND when none)."""

    def parse(r: Any) -> KeyFound:
        messages = [_lookup(r), *map(_lookup, r.key_messages)]
        return KeyFound(messages, list(r.key_ids) or [r.id], r.key_matches or 1)

    return Call("Lookup", pb.LookupRequest(topic=topic, key=key), timeout_s, parse)


def receive(
    topic: str,
    group: str,
    max_messages: int,
    wait_s: float,
    invisible_s: float,
    timeout_s: float,
    auto_ack: bool = False,
) -> Call[Sequence[Received]]:
    req = _receive_request(topic, group, max_messages, wait_s, invisible_s, auto_ack)

    return Call("Receive", req, timeout_s + wait_s, received)


def _receive_request(
    topic: str, group: str, max_messages: int, wait_s: float, invisible_s: float, auto_ack: bool
) -> Any:
    """A ReceiveRequest asking for the packed answer (an older server answers
    messages; ``received`` reads either)."""
    return pb.ReceiveRequest(
        topic=topic,
        group=group,
        max_messages=max_messages,
        wait_ms=round(wait_s * 1000),
        invisible_ms=round(invisible_s * 1000),
        auto_ack=auto_ack,
        packed=True,
    )


def subscribe(
    topic: str, group: str, max_messages: int, wait_s: float, invisible_s: float, auto_ack: bool
) -> Call[Sequence[Received]]:
    """A Subscribe stream: ``parse`` applies to each batch; no deadline, no retries."""
    req = _receive_request(topic, group, max_messages, wait_s, invisible_s, auto_ack)
    return Call("Subscribe", req, None, received)


def _ack_outcomes(resp: Any) -> list[AckOutcome | ItemError]:
    return _outcomes(resp, ACK_BY_NUMBER)


def _outcomes(resp: Any, by_number: tuple[R, ...]) -> list[R | ItemError]:
    """Each result's outcome (looked up by its wire number: no per-item string
    work), or its per-item error."""
    return [
        ItemError.of(r.error) if r.HasField("error") else by_number[r.outcome] for r in resp.results
    ]


def ack(
    topic: str, group: str, receipts: Sequence[str], timeout_s: float, packed: bool = True
) -> Call[list[AckOutcome | ItemError]]:
    """An Ack of ``receipts``: in one blob (``packed``: a received batch's own
    ``receipts`` go back as they came) or a string each."""
    if not packed:
        req = pb.AckRequest(topic=topic, group=group, receipts=list(receipts))
        return Call("Ack", req, timeout_s, _ack_outcomes)
    req = pb.AckRequest(topic=topic, group=group)
    blob = getattr(receipts, "blob", None)
    if blob is not None:
        req.packed_receipts.CopyFrom(blob)
    else:
        pack_texts(list(receipts), req.packed_receipts)
    n = len(receipts)

    def parse(resp: Any) -> list[AckOutcome | ItemError]:
        if not resp.outcomes and not resp.errors:
            if n and not resp.results:
                raise NotPacked()
            return _ack_outcomes(resp)
        return _packed_outcomes(resp, n)

    return Call("Ack", req, timeout_s, parse)


def _packed_outcomes(resp: Any, n: int) -> list[AckOutcome | ItemError]:
    """An AckResponse's ``outcomes`` (a byte each) with its ``errors`` in place."""
    codes = resp.outcomes
    if len(codes) != n or (codes and max(codes) >= len(ACK_BY_NUMBER)):
        raise ServerError(f"the server's packed ack answer: {len(codes)} outcomes for {n}")
    out: list[AckOutcome | ItemError] = [ACK_BY_NUMBER[c] for c in codes]
    for e in resp.errors:
        if e.index >= n:
            raise ServerError(f"the server's packed ack answer: error at {e.index} of {n}")
        out[e.index] = ItemError.of(e.error)
    return out


def change_invisibility(
    topic: str, group: str, receipts: Sequence[str], invisible_s: float, timeout_s: float
) -> Call[list[AckOutcome | ItemError]]:
    req = pb.ChangeInvisibilityRequest(
        topic=topic, group=group, receipts=list(receipts), invisible_ms=round(invisible_s * 1000)
    )
    return Call("ChangeInvisibility", req, timeout_s, _ack_outcomes)


def nack(
    topic: str, group: str, receipts: Sequence[str], timeout_s: float
) -> Call[list[AckOutcome | ItemError]]:
    req = pb.NackRequest(topic=topic, group=group, receipts=list(receipts))
    return Call("Nack", req, timeout_s, _ack_outcomes)


def policy_of(wire: Any) -> GroupPolicy:
    """A wire ``GroupPolicy`` as the client's (``ServerError`` for one it cannot read)."""
    try:
        return GroupPolicy.of(wire)
    except ValueError as exc:
        raise ServerError(str(exc)) from None


def _group_stats(g: Any) -> GroupStats:
    return GroupStats(
        g.group,
        policy_of(g.policy),
        g.explicit,
        g.paused,
        g.in_flight,
        g.in_flight_limit,
        g.waiting,
        {a.attempt: a.count for a in g.attempts},
        g.next_retry_at_ms,
        g.throttled,
        g.retries,
        PushStats.of(g.push) if g.HasField("push") else None,
    )


def stats(topic: str, timeout_s: float) -> Call[ShardStats]:
    def parse(r: Any) -> ShardStats:
        n = r.node
        return ShardStats(
            tuple(
                TopicStats(
                    t.topic,
                    t.pending,
                    t.delivered,
                    t.cancelled,
                    dict(t.group_backlog),
                    tuple(DueBucket(b.within_ms, b.count) for b in t.due),
                    dict(t.group_dead_lettered),
                    tuple(_group_stats(g) for g in t.groups),
                )
                for t in r.topics
            ),
            r.lateness_ms_p50,
            r.lateness_ms_p99,
            r.release_lag_ms,
            NodeStats(n.shard, n.epoch, n.role, n.commitlog_end, n.topology_epoch, n.address),
            ScheduleStats(
                r.schedules.schedules,
                r.schedules.firings,
                r.schedules.missed,
                r.schedules.lateness_ms_p50,
                r.schedules.lateness_ms_p99,
            ),
        )

    return Call("Stats", pb.StatsRequest(topic=topic), timeout_s, parse)


def route(topic: str, timeout_s: float) -> Call[Any]:
    return Call("GetRoute", pb.GetRouteRequest(topic=topic), timeout_s, lambda r: r)
