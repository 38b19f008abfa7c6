"""``delayq.v1`` protobuf to the engine's values and back (pure): every conversion
of delayq's own wire, for the servicer (requests in, answers out) and for
forwarding (a passed-on call's answer in), in one place.

Invariants: a schedule batch is read straight into the engine's columns (an
unset oneof member reads 0, the batch's "not given"); an item's error names its
field from the batch (``messages[i].body``) in either wire form; answers are
built in place in repeated fields (half the cost of building a list); an ack's
results come one per receipt in request order, the receipt echoed only with an
error; a cancel result carries the id the client sent; a group's policy comes in
checked (``policy.check``: out-of-range numbers refused naming the field,
``policy.backoff.max_ms``) and an enum value this server does not know is refused
the same way, never read as a default; a push group's target converts in
``pushwire``. Keys: a schedule's ``if_exists`` and
``dedup_window_ms`` are columns like the others (the engine checks their values,
naming ``messages[i].if_exists``); a row whose key was taken under REJECT answers
both the existing message's id and its ALREADY_EXISTS error, in either form (the
calls by topic and key: ``keywire``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..delivery.policy import Backoff, BackoffKind, GroupPolicy, Jitter, check
from ..delivery.types import ATTEMPT_BUCKETS
from ..engine import (
    AckOutcome,
    BatchOutcome,
    CancelOutcome,
    GroupStats,
    LookupResult,
    MessageState,
    ReceivedBatch,
    ScheduleBatch,
    ScheduleOutcome,
)
from ..errors import DelayqError, InvalidArgument
from ..packed import blob_texts, pack_fixed, pack_texts, read_schedule, write_received
from ..push.snapshot import PushSnapshot
from ..types import KeyOutcome
from ..v1 import delayq_pb2 as pb
from .pushwire import push_stats_wire, push_target, push_target_wire
from .statuscodes import PassedOn, item_error

__all__ = [
    "ack_results",
    "cancel_answer",
    "cancel_results",
    "group_policy",
    "group_policy_wire",
    "group_stats",
    "looked_up",
    "lookup_response",
    "message_batch",
    "message_results",
    "packed_batch",
    "packed_outcomes",
    "packed_results",
    "receive_response",
    "received_messages",
    "received_packed",
    "rescheduled",
    "schedule_keys",
]

T = TypeVar("T")

_CANCEL = {
    CancelOutcome.CANCELLED: pb.CANCEL_OUTCOME_CANCELLED,
    CancelOutcome.NOT_FOUND: pb.CANCEL_OUTCOME_NOT_FOUND,
    CancelOutcome.ALREADY_DELIVERED: pb.CANCEL_OUTCOME_ALREADY_DELIVERED,
    CancelOutcome.ALREADY_CANCELLED: pb.CANCEL_OUTCOME_ALREADY_CANCELLED,
}
_CANCEL_IN = {v: k for k, v in _CANCEL.items()}
_STATE = {
    MessageState.PENDING: pb.MESSAGE_STATE_PENDING,
    MessageState.CANCELLED: pb.MESSAGE_STATE_CANCELLED,
    MessageState.DELIVERED: pb.MESSAGE_STATE_DELIVERED,
    MessageState.RESCHEDULED: pb.MESSAGE_STATE_RESCHEDULED,
}
_STATE_IN = {v: k for k, v in _STATE.items()}
_KIND = {
    BackoffKind.FIXED: pb.BACKOFF_KIND_FIXED,
    BackoffKind.EXPONENTIAL: pb.BACKOFF_KIND_EXPONENTIAL,
}
_KIND_IN: dict[int, BackoffKind] = {v: k for k, v in _KIND.items()}
_JITTER = {Jitter.NONE: pb.JITTER_NONE, Jitter.FULL: pb.JITTER_FULL, Jitter.EQUAL: pb.JITTER_EQUAL}
_JITTER_IN: dict[int, Jitter] = {v: k for k, v in _JITTER.items()}
DEFAULT_MULTIPLIER = Backoff().multiplier
"""A backoff's multiplier when the wire's is 0 (not given)."""
_ACK = {
    AckOutcome.ACKED: pb.ACK_OUTCOME_ACKED,
    AckOutcome.ALREADY_ACKED: pb.ACK_OUTCOME_ALREADY_ACKED,
    AckOutcome.STALE: pb.ACK_OUTCOME_STALE,
    AckOutcome.NOT_FOUND: pb.ACK_OUTCOME_NOT_FOUND,
    AckOutcome.INVALID_RECEIPT: pb.ACK_OUTCOME_INVALID_RECEIPT,
}


# -- schedule
def message_batch(ms: Any) -> ScheduleBatch:
    """A ScheduleRequest's messages as the engine's columns, straight from the
    protobuf: an unset oneof member reads 0, which is also the batch's "not given"
    (a oneof never has two set)."""
    if_exists = [m.if_exists for m in ms]
    windows = [m.dedup_window_ms for m in ms]
    return ScheduleBatch(
        topic=[m.topic for m in ms],
        bodies=[m.body for m in ms],
        deliver_at_ms=[m.deliver_at_ms for m in ms],
        delay_ms=[m.delay_ms for m in ms],
        delay_level=[m.delay_level for m in ms],
        keys=[m.key for m in ms],
        headers=[m.headers for m in ms],
        if_exists=if_exists if any(if_exists) else None,
        dedup_window_ms=windows if any(windows) else None,
    )


def packed_batch(p: Any) -> ScheduleBatch:
    """A ``PackedSchedule`` as the engine's columns (``InvalidArgument`` naming the
    field of a malformed one)."""
    c = read_schedule(p)
    return ScheduleBatch(
        topic=c.topic,
        bodies=c.bodies,
        deliver_at_ms=c.deliver_at_ms,
        delay_ms=c.delay_ms,
        delay_level=c.delay_level,
        keys=c.keys,
        headers=c.headers,
        if_exists=c.if_exists,
        dedup_window_ms=c.dedup_window_ms,
    )


def schedule_keys(request: Any, packed: bool) -> list[str]:
    """A ScheduleRequest's keys, read alone ([] when none, or when the packed keys
    are malformed: the call itself then says why)."""
    if not packed:
        return [m.key for m in request.messages]
    p = request.packed
    try:
        return blob_texts(p.keys, "packed.keys") if p.HasField("keys") else []
    except InvalidArgument:
        return []


def message_results(results: Any, out: BatchOutcome) -> None:
    """A result per message into the response's repeated ``results`` (built in place,
    not copied from a list); an error's field names its message."""
    add = results.add
    errors = out.errors
    for i, (mid, due) in enumerate(zip(out.ids, out.deliver_at_ms, strict=True)):
        if i not in errors:
            add(id=mid, deliver_at_ms=due)
            continue
        add(error=_message_error(i, errors[i]))
    for i, o in out.key_outcomes.items():  # sparse: the rows whose key did something
        r = results[i]
        r.key_outcome = o
        if o is KeyOutcome.EXISTS:  # refused, and told which message holds the key
            r.id = out.ids[i] or ""
            r.deliver_at_ms = out.deliver_at_ms[i]


def _message_error(i: int, exc: DelayqError) -> Any:
    """The ItemError of message ``i`` of a batch, its field named from the batch
    (``messages[i].body``) in either wire form."""
    err = item_error(exc)
    if err.field and not err.field.startswith("messages["):
        err.field = f"messages[{i}].{err.field}"
    return err


def packed_results(into: Any, out: BatchOutcome) -> None:
    """The outcome as a ``PackedScheduled``: ids ("" where refused), times, errors."""
    ids = out.ids
    if out.errors:
        ids = [i or "" for i in ids]
        for i, exc in sorted(out.errors.items()):
            into.errors.add(index=i).error.CopyFrom(_message_error(i, exc))
    pack_texts(ids, into.ids)  # type: ignore[arg-type]  # no None left
    into.deliver_at_ms = pack_fixed(out.deliver_at_ms, "<i8")
    if out.key_outcomes:
        codes = bytearray(len(ids))
        for i, o in out.key_outcomes.items():
            codes[i] = o
        into.key_outcomes = bytes(codes)


# -- by id
def cancel_results(results: Any, ids: Sequence[str], out: Sequence[Any]) -> None:
    """A cancel's answers (``calls.CancelAnswer``) into the response's ``results``."""
    add = results.add
    for mid, o in zip(ids, out, strict=True):
        if isinstance(o, PassedOn):
            add(id=mid, error=o.item_error())
        elif isinstance(o, DelayqError):
            add(id=mid, error=item_error(o))
        else:
            add(id=mid, outcome=_CANCEL[o])


def cancel_answer(result: Any) -> CancelOutcome | PassedOn:
    """One result of another shard's CancelResponse."""
    if result.HasField("error"):
        return PassedOn.of_item(result.error)
    return _CANCEL_IN[result.outcome]


def rescheduled(resp: Any) -> ScheduleOutcome:
    """A RescheduleResponse (of another shard) as the engine's outcome."""
    return ScheduleOutcome(resp.id, resp.deliver_at_ms)


def lookup_response(r: LookupResult) -> pb.LookupResponse:
    return pb.LookupResponse(
        id=r.id,
        state=_STATE[r.state],
        topic=r.topic,
        deliver_at_ms=r.deliver_at_ms,
        accepted_at_ms=r.accepted_ms,
        key=r.key,
        headers=r.headers,
        body=r.body,
    )


def looked_up(resp: Any) -> LookupResult:
    """A LookupResponse (of another shard) as the engine's result."""
    return LookupResult(
        id=resp.id,
        state=_STATE_IN[resp.state],
        topic=resp.topic,
        deliver_at_ms=resp.deliver_at_ms,
        accepted_ms=resp.accepted_at_ms,
        key=resp.key,
        headers=dict(resp.headers),
        body=resp.body,
    )


# -- receive
def _fill(messages: Any, column: list[T], set_: Callable[[Any, T], None]) -> None:
    """Set one optional field where its column has a value (most columns are empty)."""
    if any(column):
        for msg, value in zip(messages, column, strict=True):
            if value:
                set_(msg, value)


def _set_receipt(msg: Any, value: str) -> None:
    msg.receipt = value


def _set_key(msg: Any, value: str) -> None:
    msg.key = value


def _set_headers(msg: Any, value: dict[str, str]) -> None:
    msg.headers.update(value)


def received_messages(messages: Any, got: ReceivedBatch) -> None:
    """A receive's columns as ReceivedMessages added in place to the repeated field
    ``messages`` (half the cost of building a list): only non-empty fields set."""
    add = messages.add
    topic = got.topic
    for mid, body, due, delivered, attempt in zip(
        got.ids, got.bodies, got.deliver_at_ms, got.delivered_ms, got.attempts, strict=True
    ):
        add(
            id=mid,
            topic=topic,
            body=body,
            deliver_at_ms=due,
            delivered_at_ms=delivered,
            attempt=attempt,
        )
    _fill(messages, got.receipts, _set_receipt)
    _fill(messages, got.keys, _set_key)
    _fill(messages, got.headers, _set_headers)


def received_packed(into: Any, got: ReceivedBatch) -> None:
    """A receive's columns into the ``PackedReceived`` ``into``."""
    write_received(
        into,
        got.topic,
        got.ids,
        got.bodies,
        got.keys,
        got.headers,
        got.deliver_at_ms,
        got.delivered_ms,
        got.receipts,
        got.attempts,
    )


def receive_response(got: ReceivedBatch, packed: bool, topology_epoch: int) -> pb.ReceiveResponse:
    """One look's batch as a ReceiveResponse, in the form the request asked for."""
    resp = pb.ReceiveResponse(topology_epoch=topology_epoch)
    if packed:
        received_packed(resp.packed, got)
    else:
        received_messages(resp.messages, got)
    return resp


# -- settle
def ack_results(receipts: Sequence[str], out: Sequence[AckOutcome | DelayqError]) -> list[Any]:
    """One result per receipt, in request order; the receipt is echoed only with an
    error (echoing every one doubled the cost of an ack)."""
    ok = {o: pb.AckResult(outcome=v) for o, v in _ACK.items()}  # shared, immutable use
    return [
        pb.AckResult(receipt=r, error=item_error(o)) if isinstance(o, DelayqError) else ok[o]
        for r, o in zip(receipts, out, strict=True)
    ]


def packed_outcomes(errors: Any, out: Sequence[AckOutcome | DelayqError]) -> bytes:
    """An ack's outcomes as one byte each (0 where an error, which goes to ``errors``)."""
    n = len(out)
    if n and not isinstance(out[0], DelayqError) and out.count(out[0]) == n:
        return bytes((_ACK[out[0]],)) * n  # the usual: one outcome for all, told in C
    codes = bytearray(n)
    for i, o in enumerate(out):
        if isinstance(o, DelayqError):
            errors.add(index=i).error.CopyFrom(item_error(o))
        else:
            codes[i] = _ACK[o]
    return bytes(codes)


# -- group policies
def _known(by_number: dict[int, T], number: int, field: str) -> T:
    """The value of a wire enum's ``number``; InvalidArgument naming ``field`` when
    this server has no such value (a newer client's, or garbage)."""
    value = by_number.get(number)
    if value is None:
        known = ", ".join(str(n) for n in sorted(by_number))
        raise InvalidArgument(field, f"is {number}; one of {known}")
    return value


def group_policy(p: Any, default_attempts: int, prefix: str = "policy") -> GroupPolicy:
    """A wire ``GroupPolicy`` as the engine's, checked (``policy.check``): a field out
    of range, or an enum value unknown here, refused naming it (``policy.backoff.kind``).
    A multiplier of 0 is the default's (2); ``max_attempts`` left out is
    ``default_attempts`` (the server's for the group)."""
    b = p.backoff
    backoff = Backoff(
        kind=_known(_KIND_IN, b.kind, f"{prefix}.backoff.kind"),
        initial_ms=b.initial_ms,
        multiplier=b.multiplier or DEFAULT_MULTIPLIER,
        max_ms=b.max_ms,
        jitter=_known(_JITTER_IN, b.jitter, f"{prefix}.backoff.jitter"),
    )
    return check(
        GroupPolicy(
            max_attempts=p.max_attempts if p.HasField("max_attempts") else default_attempts,
            backoff=backoff,
            rate_per_s=p.rate_per_s,
            burst=p.burst,
            max_in_flight=p.max_in_flight,
            paused=p.paused,
            push=push_target(p.push) if p.HasField("push") else None,
        ),
        prefix,
    )


def group_policy_wire(policy: GroupPolicy, into: Any, *, shown: bool = False) -> None:
    """The engine's ``policy`` into the wire ``GroupPolicy`` ``into`` (in place); a
    push target as set, or (``shown``: Stats) by its safe URL alone."""
    b = policy.backoff
    into.max_attempts = policy.max_attempts
    into.backoff.kind = _KIND[b.kind]
    into.backoff.initial_ms = b.initial_ms
    into.backoff.multiplier = b.multiplier
    into.backoff.max_ms = b.max_ms
    into.backoff.jitter = _JITTER[b.jitter]
    into.rate_per_s = policy.rate_per_s
    into.burst = policy.burst
    into.max_in_flight = policy.max_in_flight
    into.paused = policy.paused
    if policy.push is not None:
        push_target_wire(policy.push, into.push, shown=shown)


def group_stats(into: Any, group: str, g: GroupStats, push: PushSnapshot | None = None) -> None:
    """One group's figures on this shard added to the repeated ``GroupStats`` ``into``
    (with its pusher's, ``push``, on a master pushing it)."""
    out = into.add(
        group=group,
        explicit=g.explicit,
        paused=g.paused,
        in_flight=g.inflight,
        in_flight_limit=g.inflight_limit,
        waiting=g.waiting,
        next_retry_at_ms=g.next_retry_ms,
        throttled=g.throttled,
        retries=sum(g.retries),
    )
    group_policy_wire(g.policy, out.policy, shown=True)
    for attempt, count in zip(ATTEMPT_BUCKETS, g.attempts, strict=True):
        if count:
            out.attempts.add(attempt=attempt, count=count)
    if push is not None:
        push_stats_wire(push, out.push)
