"""RocketMQ status codes for delayq's answers (pure).

RocketMQ 5 carries an outcome as ``Status{code, message}`` inside a gRPC-OK
response (one per entry of a batch); a client retries on some codes (e.g.
TOO_MANY_REQUESTS with back-off) and fails the call on others. A delayq error
maps by its kind, an ``InvalidArgument`` also by the field it names, so the
message (which names the field) reaches the client with the most specific code.
"""

from __future__ import annotations

from ..errors import (
    Congested,
    DelayqError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Unavailable,
    WrongShard,
)
from .v2 import definition_pb2 as rmq

__all__ = ["Code", "not_implemented", "ok", "status", "status_of"]

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
    "user_properties": rmq.ILLEGAL_MESSAGE_PROPERTY_KEY,
    "headers": rmq.ILLEGAL_MESSAGE_PROPERTY_KEY,
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
