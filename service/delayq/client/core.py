"""The client's logic, written once (pure: no sockets, no sleeping). The sync
``Client`` and the ``AsyncClient`` are thin shells that send what ``Call``
describes and hand the response to its ``parse``.

Times: ``at`` is a ``datetime`` (aware), or epoch milliseconds (int);
``delay`` is a ``timedelta`` or seconds (int/float); ``level`` is RocketMQ 4's
delay level (1..N of the server's ``--delay-levels``). Retries: UNAVAILABLE, and
RESOURCE_EXHAUSTED with the server's ``retry-after-ms`` (delayq's congestion), are
retried with exponential backoff and jitter, honouring that hint; gRPC's own
RESOURCE_EXHAUSTED (a message over a size limit) and INVALID_ARGUMENT are the
caller's to fix and never retried. Every call has a deadline.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Generic, NamedTuple, TypeVar

import grpc

from ..v1 import delayq_pb2 as pb
from .errors import InvalidArgument, retry_after_ms
from .results import (
    ACK_BY_NUMBER,
    CANCEL_BY_NUMBER,
    STATE_BY_NUMBER,
    AckOutcome,
    CancelOutcome,
    DueBucket,
    ItemError,
    Lookup,
    NodeStats,
    ShardStats,
    TopicStats,
)

__all__ = [
    "Call",
    "Outgoing",
    "Received",
    "RetryPolicy",
    "Scheduled",
    "item_error",
    "new_message",
    "one",
    "refused",
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


@dataclass(slots=True, kw_only=True)  # not frozen: built per message on the hot path
class Outgoing:
    """A message to schedule: at most one of ``at``, ``delay`` and ``level`` (their
    forms: the module's docstring); giving more raises ``InvalidArgument`` (a
    ValueError) here, before any call."""

    topic: str
    body: bytes
    at: datetime | int | None = None
    delay: timedelta | float | None = None
    level: int | None = None
    key: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.level is not None or (self.at is not None and self.delay is not None):
            _check_when(self)  # only then can something be wrong (one test, on the hot path)


def _check_when(m: Outgoing) -> None:
    """``InvalidArgument`` unless ``m`` gives at most one of at, delay and level, and a level
    of at least 1 (0 would read as "not given" on the server)."""
    if (m.at is not None) + (m.delay is not None) + (m.level is not None) > 1:
        raise InvalidArgument("give only one of at, delay and level")
    if m.level is not None and m.level < 1:
        raise InvalidArgument(f"level: must be 1..N of the server's --delay-levels, got {m.level}")


class Scheduled(NamedTuple):
    id: str | None
    deliver_at_ms: int
    error: ItemError | None = None  # set when this message was refused

    @property
    def ok(self) -> bool:
        return self.error is None


class Received(NamedTuple):
    id: str
    topic: str
    key: str
    headers: dict[str, str]
    body: bytes
    deliver_at_ms: int
    delivered_at_ms: int
    receipt: str
    attempt: int


def _at_ms(at: datetime | int) -> int:
    if isinstance(at, datetime):
        if at.tzinfo is None:
            raise InvalidArgument("at: give an aware datetime (with a time zone)")
        return round(at.timestamp() * 1000)
    return int(at)


def _delay_ms(delay: timedelta | float) -> int:
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
    return round(seconds * 1000)


def new_message(m: Outgoing, into: Any = None) -> Any:
    """``m`` as a NewMessage, added in place to the repeated field ``into`` when
    given (building a list and passing it to the request copies every message)."""
    # checked again (an Outgoing's fields may have changed since it was made), with
    # one inline test on the hot path
    at, delay, level = m.at, m.delay, m.level
    if level is not None or (at is not None and delay is not None):
        _check_when(m)
    msg = (
        pb.NewMessage(topic=m.topic, body=m.body)
        if into is None
        else into.add(topic=m.topic, body=m.body)
    )
    if m.key:
        msg.key = m.key
    if m.headers:
        msg.headers.update(m.headers)
    if at is not None:
        msg.deliver_at_ms = _at_ms(at)
    elif delay is not None:
        msg.delay_ms = _delay_ms(delay)
    elif level is not None:
        msg.delay_level = level
    return msg


def item_error(exc: grpc.RpcError) -> ItemError:
    """The per-item error of an item (a message, id or receipt) whose shard failed
    while other shards answered theirs: the shard's error, not this item's."""
    details = exc.details() if hasattr(exc, "details") else str(exc)
    return ItemError(exc.code().value[0], f"{exc.code().name}: {details}")


def refused(exc: grpc.RpcError) -> Scheduled:
    """A message of a batch whose shard failed while other shards took theirs."""
    return Scheduled(None, 0, item_error(exc))


def _scheduled(resp: Any) -> list[Scheduled]:
    return [
        Scheduled(None, 0, ItemError.of(r.error))
        if r.HasField("error")
        else Scheduled(r.id, r.deliver_at_ms)
        for r in resp.results
    ]


def schedule(messages: Sequence[Outgoing], timeout_s: float) -> Call[list[Scheduled]]:
    req = pb.ScheduleRequest()
    for m in messages:
        new_message(m, req.messages)
    return Call("Schedule", req, timeout_s, _scheduled)


def cancel(ids: Sequence[str], timeout_s: float) -> Call[list[CancelOutcome | ItemError]]:
    """An outcome per id, or an ``ItemError`` for a malformed id."""

    def parse(resp: Any) -> list[CancelOutcome | ItemError]:
        return _outcomes(resp, CANCEL_BY_NUMBER)

    return Call("Cancel", pb.CancelRequest(ids=list(ids)), timeout_s, parse)


def reschedule(
    message_id: str, at: datetime | int | None, delay: timedelta | float | None, timeout_s: float
) -> Call[Scheduled]:
    if (at is None) == (delay is None):
        raise InvalidArgument("give exactly one of at and delay")
    req = pb.RescheduleRequest(id=message_id)
    if at is not None:
        req.deliver_at_ms = _at_ms(at)
    else:
        assert delay is not None
        req.delay_ms = _delay_ms(delay)
    return Call("Reschedule", req, timeout_s, lambda r: Scheduled(r.id, r.deliver_at_ms))


def lookup(message_id: str, timeout_s: float) -> Call[Lookup]:
    def parse(r: Any) -> Lookup:
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

    return Call("Lookup", pb.LookupRequest(id=message_id), timeout_s, parse)


def receive(
    topic: str,
    group: str,
    max_messages: int,
    wait_s: float,
    invisible_s: float,
    timeout_s: float,
    auto_ack: bool = False,
) -> Call[list[Received]]:
    req = _receive_request(topic, group, max_messages, wait_s, invisible_s, auto_ack)

    return Call("Receive", req, timeout_s + wait_s, received)


def _receive_request(
    topic: str, group: str, max_messages: int, wait_s: float, invisible_s: float, auto_ack: bool
) -> Any:
    return pb.ReceiveRequest(
        topic=topic,
        group=group,
        max_messages=max_messages,
        wait_ms=round(wait_s * 1000),
        invisible_ms=round(invisible_s * 1000),
        auto_ack=auto_ack,
    )


def received(resp: Any) -> list[Received]:
    """The messages of one ReceiveResponse (a Receive reply or a Subscribe batch)."""
    return [
        Received(
            m.id,
            m.topic,
            m.key,
            dict(h) if (h := m.headers) else {},  # most have none: skip copying the map
            m.body,
            m.deliver_at_ms,
            m.delivered_at_ms,
            m.receipt,
            m.attempt,
        )
        for m in resp.messages
    ]


def subscribe(
    topic: str, group: str, max_messages: int, wait_s: float, invisible_s: float, auto_ack: bool
) -> Call[list[Received]]:
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
    topic: str, group: str, receipts: Sequence[str], timeout_s: float
) -> Call[list[AckOutcome | ItemError]]:
    req = pb.AckRequest(topic=topic, group=group, receipts=list(receipts))
    return Call("Ack", req, timeout_s, _ack_outcomes)


def change_invisibility(
    topic: str, group: str, receipts: Sequence[str], invisible_s: float, timeout_s: float
) -> Call[list[AckOutcome | ItemError]]:
    req = pb.ChangeInvisibilityRequest(
        topic=topic, group=group, receipts=list(receipts), invisible_ms=round(invisible_s * 1000)
    )
    return Call("ChangeInvisibility", req, timeout_s, _ack_outcomes)


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
                )
                for t in r.topics
            ),
            r.lateness_ms_p50,
            r.lateness_ms_p99,
            r.release_lag_ms,
            NodeStats(n.shard, n.epoch, n.role, n.commitlog_end, n.topology_epoch, n.address),
        )

    return Call("Stats", pb.StatsRequest(topic=topic), timeout_s, parse)


def route(topic: str, timeout_s: float) -> Call[Any]:
    return Call("GetRoute", pb.GetRouteRequest(topic=topic), timeout_s, lambda r: r)
