"""The one boundary between delayq errors and gRPC status codes.

| delayq error       | gRPC status          |
|--------------------|----------------------|
| InvalidArgument    | INVALID_ARGUMENT     |
| NotFound           | NOT_FOUND            |
| AlreadyExists      | ALREADY_EXISTS (+ trailer ``delayq-existing-id``: the message |
|                    | holding the key; in a Schedule it is an item's error, the id  |
|                    | in its result)                                                 |
| FailedPrecondition | FAILED_PRECONDITION  |
| WrongShard         | FAILED_PRECONDITION (+ trailers ``delayq-owner-shard``,  |
|                    | ``delayq-topology-epoch``: the client fetches the map) |
| Congested          | RESOURCE_EXHAUSTED (+ trailer ``retry-after-ms``) |
| NotMaster          | FAILED_PRECONDITION, as WrongShard (the owner: this shard) |
| EngineClosed       | UNAVAILABLE          |
| Unavailable        | UNAVAILABLE (+ ``retry-after-ms`` when it has one) |
| CorruptData        | DATA_LOSS            |
| anything else      | INTERNAL (logged)    |

``PassedOn`` is the other way round: the status another shard answered a call
passed on to it (``forwarding``), given back to the client as is.
"""

from __future__ import annotations

from typing import NoReturn

import grpc

from ..errors import (
    AlreadyExists,
    Congested,
    CorruptData,
    DelayqError,
    EngineClosed,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Unavailable,
    WrongShard,
)
from ..v1 import delayq_pb2 as pb

__all__ = [
    "EXISTING_ID_KEY",
    "RETRY_AFTER_KEY",
    "PassedOn",
    "abort_with",
    "code_of",
    "item_error",
    "status_of",
]

RETRY_AFTER_KEY = "retry-after-ms"
EXISTING_ID_KEY = "delayq-existing-id"

_BY_NUMBER = {c.value[0]: c for c in grpc.StatusCode}

_CODES: list[tuple[type[DelayqError], grpc.StatusCode]] = [
    (InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (AlreadyExists, grpc.StatusCode.ALREADY_EXISTS),
    (FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION),
    (Congested, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (EngineClosed, grpc.StatusCode.UNAVAILABLE),
    (Unavailable, grpc.StatusCode.UNAVAILABLE),
    (CorruptData, grpc.StatusCode.DATA_LOSS),
]


def code_of(exc: BaseException) -> grpc.StatusCode:
    for kind, code in _CODES:
        if isinstance(exc, kind):
            return code
    return grpc.StatusCode.INTERNAL


def status_of(exc: BaseException) -> tuple[grpc.StatusCode, str, tuple[tuple[str, str], ...]]:
    """(code, message, trailing metadata) for an error raised by the engine."""
    trailers: tuple[tuple[str, str], ...] = ()
    if isinstance(exc, Congested) or (isinstance(exc, Unavailable) and exc.retry_after_ms):
        trailers = ((RETRY_AFTER_KEY, str(exc.retry_after_ms)),)
    elif isinstance(exc, AlreadyExists):
        trailers = ((EXISTING_ID_KEY, exc.id),)
    elif isinstance(exc, WrongShard):
        trailers = (
            (WrongShard.OWNER_KEY, str(exc.owner)),
            (WrongShard.TOPOLOGY_EPOCH_KEY, str(exc.topology_epoch)),
        )
    message = str(exc) if isinstance(exc, DelayqError) else "internal error"
    return code_of(exc), message, trailers


async def abort_with(context: grpc.aio.ServicerContext, exc: DelayqError) -> NoReturn:
    """End the call with ``exc``'s status, message and trailers (``status_of``)."""
    code, message, trailers = status_of(exc)
    if trailers:
        context.set_trailing_metadata(trailers)
    await context.abort(code, message)
    raise AssertionError("unreachable: abort raises")


def item_error(exc: DelayqError) -> pb.ItemError:
    return pb.ItemError(
        code=code_of(exc).value[0],
        field=getattr(exc, "field", ""),
        message=str(exc),
        retry_after_ms=exc.retry_after_ms if isinstance(exc, Congested) else 0,
    )


class PassedOn(Exception):
    """Another shard's error for a call passed on to it: given back to the client as
    is (the whole call's status, or an item's error of a batch it answered)."""

    def __init__(
        self, code: grpc.StatusCode, details: str, field: str = "", retry_after_ms: int = 0
    ) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details
        self.field = field
        self.retry_after_ms = retry_after_ms

    @classmethod
    def of(cls, exc: DelayqError) -> PassedOn:
        return cls(code_of(exc), str(exc))

    @classmethod
    def of_item(cls, error: pb.ItemError) -> PassedOn:
        """An item's error in another shard's answer."""
        code = _BY_NUMBER.get(error.code, grpc.StatusCode.UNKNOWN)
        return cls(code, error.message, error.field, error.retry_after_ms)

    def item_error(self) -> pb.ItemError:
        return pb.ItemError(
            code=self.code.value[0],
            field=self.field,
            message=self.details,
            retry_after_ms=self.retry_after_ms,
        )
