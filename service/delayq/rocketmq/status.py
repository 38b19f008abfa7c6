"""RocketMQ statuses for delayq's answers (pure): every status a reply carries
is made here.

RocketMQ 5 carries an outcome as ``Status{code, message}`` inside a gRPC-OK
response (one per entry of a batch); a client retries on some codes (e.g.
TOO_MANY_REQUESTS with back-off) and fails the call on others. A delayq error
maps by its kind, an ``InvalidArgument`` also by the field it names, so the
message (which names the field) reaches the client with the most specific code.
The engine's outcomes map by table (``settled``: an ack's, an invisibility
change's or a dead letter's; ``recalled``: a cancel's); another shard's error
for a recall passed on to it is HA_NOT_AVAILABLE (``passed_on``); a batch's
status is OK, its entries' one error, or MULTIPLE_RESULTS (``overall``).
"""

from __future__ import annotations

from ..engine import AckOutcome, CancelOutcome
from ..errors import (
    Congested,
    DelayqError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Unavailable,
    WrongShard,
)
from ..server.statuscodes import PassedOn
from .v2 import definition_pb2 as rmq

__all__ = [
    "Code",
    "not_implemented",
    "ok",
    "overall",
    "passed_on",
    "recalled",
    "send_error",
    "settled",
    "status",
    "status_of",
]

Code = rmq.Code

_FIELDS = {  # a part of an InvalidArgument's field -> the code that names it
    "topic": rmq.ILLEGAL_TOPIC,
    "group": rmq.ILLEGAL_CONSUMER_GROUP,
    "deliver_at_ms": rmq.ILLEGAL_DELIVERY_TIME,
    "delivery_timestamp": rmq.ILLEGAL_DELIVERY_TIME,
    "invisible_ms": rmq.ILLEGAL_INVISIBLE_TIME,
    "invisible_duration": rmq.ILLEGAL_INVISIBLE_TIME,
    "receipts": rmq.INVALID_RECEIPT_HANDLE,
    "receipt_handle": rmq.INVALID_RECEIPT_HANDLE,
    "recall_handle": rmq.BAD_REQUEST,
    "filter_expression": rmq.ILLEGAL_FILTER_EXPRESSION,
    "message_group": rmq.ILLEGAL_MESSAGE_GROUP,
    "tag": rmq.ILLEGAL_MESSAGE_TAG,
    "keys": rmq.ILLEGAL_MESSAGE_KEY,
    "message_id": rmq.ILLEGAL_MESSAGE_ID,
    "user_properties": rmq.ILLEGAL_MESSAGE_PROPERTY_KEY,
    "headers": rmq.ILLEGAL_MESSAGE_PROPERTY_KEY,
}
_ACK_CODES = {
    AckOutcome.ACKED: (rmq.OK, "OK"),
    AckOutcome.ALREADY_ACKED: (rmq.OK, "already acknowledged"),
    AckOutcome.STALE: (
        rmq.INVALID_RECEIPT_HANDLE,
        "stale receipt handle: the message was delivered again or given a new handle since",
    ),
    AckOutcome.NOT_FOUND: (rmq.INVALID_RECEIPT_HANDLE, "no message holds this receipt handle"),
    AckOutcome.INVALID_RECEIPT: (
        rmq.INVALID_RECEIPT_HANDLE,
        "not a receipt handle of this topic and group",
    ),
}
_RECALL_CODES = {
    CancelOutcome.CANCELLED: (rmq.OK, "OK"),
    CancelOutcome.ALREADY_CANCELLED: (rmq.OK, "already recalled"),
    CancelOutcome.NOT_FOUND: (rmq.MESSAGE_NOT_FOUND, "no such message"),
    CancelOutcome.ALREADY_DELIVERED: (
        rmq.PRECONDITION_FAILED,
        "already delivered: a message can be recalled only before it is due",
    ),
}
_SEND_FIELDS = {  # delayq's field of a message -> the RocketMQ one, in error messages
    "deliver_at_ms": "system_properties.delivery_timestamp",
    "headers": "user_properties",
    "topic": "topic.name",
    "key": "system_properties.keys",  # its first value
    "dedup_id": "system_properties.message_id",
}


def status(code: int, message: str = "") -> rmq.Status:
    return rmq.Status(code=code, message=message)  # type: ignore[arg-type]


def ok() -> rmq.Status:
    return status(rmq.OK, "OK")


def not_implemented(what: str) -> rmq.Status:
    return status(rmq.NOT_IMPLEMENTED, f"{what} is not supported by delayq")


def _field_code(exc: InvalidArgument) -> int:
    """The code of the innermost part of the field that has one (``topic.name``:
    the topic's)."""
    for part in reversed([p.split("[", 1)[0] for p in exc.field.split(".")]):
        if part == "body":
            empty = "empty" in exc.message
            return rmq.MESSAGE_BODY_EMPTY if empty else rmq.MESSAGE_BODY_TOO_LARGE
        if part in _FIELDS:
            return _FIELDS[part]
    return rmq.BAD_REQUEST


def code_of(exc: BaseException) -> int:
    """The RocketMQ code of an error the engine or the server raised."""
    if isinstance(exc, InvalidArgument):
        return _field_code(exc)
    if isinstance(exc, Congested):
        return rmq.TOO_MANY_REQUESTS
    if isinstance(exc, (WrongShard, Unavailable)):
        # not this node's to answer now (a replica, another shard's, a failover or
        # sync replication under way): clients retry elsewhere and refresh routes
        return rmq.HA_NOT_AVAILABLE
    if isinstance(exc, NotFound):
        return rmq.MESSAGE_NOT_FOUND
    if isinstance(exc, FailedPrecondition):
        return rmq.PRECONDITION_FAILED
    return rmq.INTERNAL_SERVER_ERROR


def status_of(exc: BaseException) -> rmq.Status:
    """``exc`` as a RocketMQ status: its code and delayq's message (naming the field)."""
    message = str(exc) if isinstance(exc, DelayqError) else "internal error"
    if isinstance(exc, WrongShard):  # a RocketMQ client's route call is QueryRoute
        message = message.replace("(GetRoute)", "(QueryRoute)")
    return status(code_of(exc), message)


def send_error(exc: DelayqError, i: int) -> rmq.Status:
    """The error of message ``i`` of a send, its field named as the RocketMQ message
    has it."""
    if isinstance(exc, InvalidArgument):
        last = exc.field.rsplit(".", 1)[-1]
        exc = InvalidArgument(f"messages[{i}].{_SEND_FIELDS.get(last, last)}", exc.message)
    return status_of(exc)


def settled(o: str | AckOutcome | DelayqError) -> rmq.Status:
    """The status of one receipt's outcome (a new receipt: OK)."""
    if isinstance(o, DelayqError):
        return status_of(o)
    return ok() if isinstance(o, str) else status(*_ACK_CODES[o])


def recalled(outcome: CancelOutcome) -> rmq.Status:
    return status(*_RECALL_CODES[outcome])


def passed_on(exc: PassedOn) -> rmq.Status:
    """The error of the shard a recall was passed on to."""
    return status(rmq.HA_NOT_AVAILABLE, f"the shard of the message: {exc}")


def overall(statuses: list[rmq.Status]) -> rmq.Status:
    """A batch's status: OK, the one error of its entries, or MULTIPLE_RESULTS."""
    bad = {(s.code, s.message) for s in statuses if s.code != rmq.OK}
    if not bad:
        return ok()
    if len(bad) == 1:
        code, message = bad.pop()
        return status(code, message)
    return status(rmq.MULTIPLE_RESULTS, "entries ended differently: see each entry's status")
