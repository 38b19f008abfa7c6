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

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import repeat
from operator import attrgetter
from typing import Any, Generic, NamedTuple, TypeVar

import grpc

from ..errors import InvalidArgument as WireError
from ..packed import blob_texts, fixed, pack_blobs, pack_fixed, pack_headers, pack_texts
from ..v1 import delayq_pb2 as pb
from .errors import InvalidArgument, ServerError, retry_after_ms
from .received import Received, received
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
    "NotPacked",
    "Outgoing",
    "Received",
    "RetryPolicy",
    "Scheduled",
    "item_error",
    "new_message",
    "one",
    "received",
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


def _at_ms(at: datetime | int) -> int:
    if isinstance(at, datetime):
        if at.tzinfo is None:
            raise InvalidArgument("at: give an aware datetime (with a time zone)")
        return round(at.timestamp() * 1000)
    return int(at)


def _delay_ms(delay: timedelta | float) -> int:
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
    if not math.isfinite(seconds) or abs(seconds) * 1000 >= 2**63:
        raise InvalidArgument(f"delay: {delay!r} s is not a delay an int64 of ms holds")
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


def _wire(what: str, exc: WireError) -> ServerError:
    return ServerError(f"the server's packed {what} answer: {exc}")


def schedule(
    messages: Sequence[Outgoing], timeout_s: float, packed: bool = True
) -> Call[list[Scheduled]]:
    """A Schedule of ``messages``: as columns (``packed``) or a message each."""
    if packed:
        n = len(messages)

        def parse(resp: Any) -> list[Scheduled]:
            if resp.HasField("packed"):
                return _scheduled_packed(resp.packed, n)
            if n and not resp.results:
                raise NotPacked()
            return _scheduled(resp)

        return Call("Schedule", _packed_schedule(messages), timeout_s, parse)
    req = pb.ScheduleRequest()
    for m in messages:
        new_message(m, req.messages)
    return Call("Schedule", req, timeout_s, _scheduled)


_FIELDS = attrgetter("topic", "body", "key", "headers", "at", "delay", "level")


def _packed_schedule(messages: Sequence[Outgoing]) -> Any:
    """A ScheduleRequest of ``messages`` as a ``PackedSchedule`` (only the columns
    some message gives; each column read in one pass at C speed)."""
    req = pb.ScheduleRequest()
    n = len(messages)
    if not n:
        return req
    p = req.packed
    topics, bodies, keys, headers, ats, delays, levels = zip(*map(_FIELDS, messages), strict=True)
    names = list(dict.fromkeys(topics))
    p.topics.extend(names)
    if len(names) > 1:
        if len(names) > 1 << 16:
            raise InvalidArgument(f"topic: {len(names)} topics in one batch; at most 65536")
        number = {t: i for i, t in enumerate(names)}
        p.topic_index = pack_fixed(list(map(number.__getitem__, topics)), "<u2")
    pack_blobs(bodies, p.bodies)
    if any(keys):
        pack_texts(keys, p.keys)
    if any(headers):
        pack_headers(headers, p.headers)
    given_at, given_delay, given_level = (c.count(None) < n for c in (ats, delays, levels))
    if given_level or (given_at and given_delay):
        for m in messages:
            if m.level is not None or (m.at is not None and m.delay is not None):
                _check_when(m)
    try:
        if given_at:
            p.deliver_at_ms = pack_fixed([0 if a is None else _at_ms(a) for a in ats], "<i8")
        if given_delay:
            p.delay_ms = pack_fixed(_delays_ms(delays), "<i8")
        if given_level:
            p.delay_level = pack_fixed([v or 0 for v in levels], "<i4")
    except OverflowError as exc:
        raise InvalidArgument(f"at, delay or level: out of range ({exc})") from None
    return req


def _delays_ms(delays: Sequence[timedelta | float | None]) -> Any:
    """Delays in ms (0: none), rounded half to even as ``_delay_ms``; one numpy
    call when all are numbers."""
    if set(map(type, delays)) <= {float, int}:
        import numpy as np  # here: a client that never sends a batch of delays never loads it

        ms = np.asarray(delays, dtype=np.float64) * 1000
        if np.isfinite(ms).all() and float(np.abs(ms).max()) < 2**63:
            return np.rint(ms).astype(np.int64)
    # None among them, timedeltas, or values no int64 holds (NaN, inf, huge): one by
    # one, failing as the message form fails
    return [0 if d is None else _delay_ms(d) for d in delays]


def _scheduled_packed(p: Any, n: int) -> list[Scheduled]:
    try:
        ids = blob_texts(p.ids, "packed.ids", n)
        dues = fixed(p.deliver_at_ms, "<i8", n, "packed.deliver_at_ms")
    except WireError as exc:
        raise _wire("schedule", exc) from None
    times: list[int] = [] if dues is None else dues.tolist()
    if len(times) != n:
        raise _wire("schedule", WireError("packed.deliver_at_ms", f"empty for {n} messages"))
    if not p.errors:
        # tuple.__new__ straight from C: a NamedTuple's own __new__/_make is Python code
        return list(map(tuple.__new__, repeat(Scheduled), zip(ids, times, repeat(None))))
    errors = {e.index: ItemError.of(e.error) for e in p.errors}
    return [
        Scheduled(None, 0, errors[i]) if i in errors else Scheduled(mid, due)
        for i, (mid, due) in enumerate(zip(ids, times, strict=True))
    ]


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
