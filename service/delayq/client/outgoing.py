"""Messages going out, written once for both shells (pure): ``Outgoing`` (a
message to schedule) and ``Scheduled`` (what its Schedule answered), the
Schedule call in both wire forms (``schedule``: a ``NewMessage`` each, or the
packed columns of ``delayq.packed``) and ``reschedule``.

Times: ``at`` is a ``datetime`` (aware), or epoch milliseconds (int);
``delay`` is a ``timedelta`` or seconds (int/float); ``level`` is RocketMQ 4's
delay level (1..N of the server's ``--delay-levels``). Giving more than one is
refused here, before any call (``InvalidArgument``, a ValueError).

Keys: ``if_exists`` (an ``IfExists`` or its text, ``"reject"``...; None: no check)
and ``dedup_window`` (a ``timedelta`` or seconds, as ``delay``) go as the wire's
``if_exists`` and ``dedup_window_ms``; an unknown ``if_exists`` is refused here.
``Scheduled.key_outcome`` says what the key did; a ``reject`` that found the key
taken answers the existing message's id *and* an ``ItemError`` (ALREADY_EXISTS).
The calls by key (``reschedule_key``) are here, the others in ``core``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import repeat
from operator import attrgetter
from typing import Any, NamedTuple

import grpc

from ..errors import InvalidArgument as WireError
from ..packed import blob_texts, fixed, pack_blobs, pack_fixed, pack_headers, pack_texts
from ..v1 import delayq_pb2 as pb
from .core import Call, NotPacked, item_error
from .errors import InvalidArgument, ServerError
from .results import IF_EXISTS_NUMBER, KEY_OUTCOME_BY_NUMBER, IfExists, ItemError, KeyOutcome

__all__ = [
    "Outgoing",
    "Scheduled",
    "new_message",
    "refused",
    "reschedule",
    "reschedule_key",
    "schedule",
]


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
    if_exists: IfExists | str | None = None
    """What to do when a pending message of the topic has ``key``: ``IfExists``."""
    dedup_window: timedelta | float | None = None
    """How long after acceptance the key stays taken by this message even once it
    was delivered or cancelled (a ``timedelta`` or seconds; needs ``if_exists``)."""

    def __post_init__(self) -> None:
        if self.level is not None or (self.at is not None and self.delay is not None):
            _check_when(self)  # only then can something be wrong (one test, on the hot path)
        if self.if_exists is not None:
            _if_exists(self.if_exists)


def _if_exists(value: IfExists | str) -> int:
    """The wire number of an ``if_exists`` given as its text or member (one dict
    look-up: a ``StrEnum`` member hashes and compares as its text)."""
    number = IF_EXISTS_NUMBER.get(value) if isinstance(value, str) else None
    if number is None:
        known = ", ".join(IfExists)
        raise InvalidArgument(f"if_exists: {value!r}; one of {known} (or None)")
    return number


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
    key_outcome: KeyOutcome = KeyOutcome.NEW
    """What its key did (``exists``: refused, ``id`` the message holding the key)."""

    @property
    def ok(self) -> bool:
        return self.error is None


def _at_ms(at: datetime | int) -> int:
    if isinstance(at, datetime):
        if at.tzinfo is None:
            raise InvalidArgument("at: give an aware datetime (with a time zone)")
        return round(at.timestamp() * 1000)
    return int(at)


def _delay_ms(delay: timedelta | float, name: str = "delay") -> int:
    """A span (``delay``, ``dedup_window``) in ms."""
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
    if not math.isfinite(seconds) or abs(seconds) * 1000 >= 2**63:
        raise InvalidArgument(f"{name}: {delay!r} s is not a span an int64 of ms holds")
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
    if m.if_exists is not None:
        msg.if_exists = _if_exists(m.if_exists)
    if m.dedup_window is not None:
        msg.dedup_window_ms = _delay_ms(m.dedup_window, "dedup_window")
    return msg


def refused(exc: grpc.RpcError) -> Scheduled:
    """A message of a batch whose shard failed while other shards took theirs."""
    return Scheduled(None, 0, item_error(exc))


def _scheduled(resp: Any) -> list[Scheduled]:
    return [
        Scheduled(
            r.id or None,
            r.deliver_at_ms,
            ItemError.of(r.error),
            _key_outcome(r.key_outcome),
        )
        if r.HasField("error")
        else Scheduled(r.id, r.deliver_at_ms, None, _key_outcome(r.key_outcome))
        for r in resp.results
    ]


def _key_outcome(number: int) -> KeyOutcome:
    """A wire ``KeyOutcome`` (``ServerError`` for one this client does not know)."""
    if 0 <= number < len(KEY_OUTCOME_BY_NUMBER):
        return KEY_OUTCOME_BY_NUMBER[number]
    raise ServerError(f"the server's schedule answer: key outcome {number} unknown")


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


_FIELDS = attrgetter(
    "topic", "body", "key", "headers", "at", "delay", "level", "if_exists", "dedup_window"
)


def _packed_schedule(messages: Sequence[Outgoing]) -> Any:
    """A ScheduleRequest of ``messages`` as a ``PackedSchedule`` (only the columns
    some message gives; each column read in one pass at C speed)."""
    req = pb.ScheduleRequest()
    n = len(messages)
    if not n:
        return req
    p = req.packed
    topics, bodies, keys, headers, ats, delays, levels, modes, windows = zip(
        *map(_FIELDS, messages), strict=True
    )
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
    if modes.count(None) < n:
        p.if_exists = bytes(0 if v is None else _if_exists(v) for v in modes)
    if windows.count(None) < n:
        given = [0 if w is None else _delay_ms(w, "dedup_window") for w in windows]
        p.dedup_window_ms = pack_fixed(given, "<i8")
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
    codes = p.key_outcomes
    if not p.errors and not codes:
        # tuple.__new__ straight from C: a NamedTuple's own __new__/_make is Python code
        rows = zip(ids, times, repeat(None), repeat(KeyOutcome.NEW))
        return list(map(tuple.__new__, repeat(Scheduled), rows))
    if codes and (len(codes) != n or max(codes) >= len(KEY_OUTCOME_BY_NUMBER)):
        raise _wire("schedule", WireError("packed.key_outcomes", f"{len(codes)} for {n}"))
    outcomes = [KEY_OUTCOME_BY_NUMBER[c] for c in codes] if codes else [KeyOutcome.NEW] * n
    errors = {e.index: ItemError.of(e.error) for e in p.errors}
    return [
        Scheduled(mid or None, due if mid else 0, errors.get(i), o)
        for i, (mid, due, o) in enumerate(zip(ids, times, outcomes, strict=True))
    ]


def _rescheduling(req: Any, at: datetime | int | None, delay: timedelta | float | None) -> Any:
    """The RescheduleRequest ``req`` (its id, or topic and key, set) to ``at`` or
    after ``delay`` (exactly one, checked before any call)."""
    if (at is None) == (delay is None):
        raise InvalidArgument("give exactly one of at and delay")
    if at is not None:
        req.deliver_at_ms = _at_ms(at)
    else:
        assert delay is not None
        req.delay_ms = _delay_ms(delay)
    return req


def reschedule(
    message_id: str, at: datetime | int | None, delay: timedelta | float | None, timeout_s: float
) -> Call[Scheduled]:
    req = _rescheduling(pb.RescheduleRequest(id=message_id), at, delay)
    return Call("Reschedule", req, timeout_s, lambda r: Scheduled(r.id, r.deliver_at_ms))


def reschedule_key(
    topic: str,
    key: str,
    at: datetime | int | None,
    delay: timedelta | float | None,
    timeout_s: float,
) -> Call[list[Scheduled]]:
    """Every pending message of ``topic`` with ``key`` to a new time: the new
    messages, oldest first (all at the one time asked)."""
    req = _rescheduling(pb.RescheduleRequest(topic=topic, key=key), at, delay)

    def parse(r: Any) -> list[Scheduled]:
        return [Scheduled(i, r.deliver_at_ms) for i in (r.ids or [r.id])]

    return Call("Reschedule", req, timeout_s, parse)
