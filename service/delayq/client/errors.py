"""The client's exceptions, and the one place gRPC errors become them.

They are the exception tree of ``delayq.errors`` (what ``delayq`` exports), each
kind the client shares with the engine raised as a subclass that is also a
``ClientError``: ``except delayq.InvalidArgument`` catches the client's refusal and
the embedded engine's alike. Every failure a client call raises is a ``ClientError``::

    ClientError                 a delayq.DelayqError (not a grpc.RpcError)
    ├── InvalidArgument         delayq.InvalidArgument: the caller's input (INVALID_ARGUMENT,
    │                           OUT_OF_RANGE, or refused before any call); also a ValueError
    ├── NotFound                delayq.NotFound: unknown, expired or foreign id or receipt,
    │                           or no pending message of the topic has the key
    ├── AlreadyExists           delayq.AlreadyExists: a schedule with ``if_exists="reject"``
    │                           found its key taken; ``id``, ``deliver_at_ms``: that message's
    ├── FailedPrecondition      delayq.FailedPrecondition: valid call, wrong state
    │   └── WrongShard          delayq.WrongShard: no shard of the map owns the key, id or receipt
    ├── Unavailable             delayq.Unavailable: no node could take it within the retries
    ├── Congested               delayq.Congested: the server's back-pressure outlasted the
    │                           retries (RESOURCE_EXHAUSTED with ``retry_after_ms``)
    ├── TooLarge                a request over gRPC's size limit (RESOURCE_EXHAUSTED
    │                           without ``retry-after-ms``): split the batch
    ├── DeadlineExceeded        the call's deadline passed; also a TimeoutError
    ├── Cancelled               the call was cancelled (CANCELLED)
    ├── AccessDenied            PERMISSION_DENIED or UNAUTHENTICATED (TLS, certificates)
    ├── RouteError              a node answered an unusable shard map; also a ValueError
    └── ServerError             anything else the server said (INTERNAL, UNKNOWN, ...)

Invariants: gRPC errors are translated only by ``from_rpc`` (used through
``translated``, at the shells' public boundary), always ``raise ... from`` the
gRPC error, so ``__cause__`` keeps it; an item's error (``results.ItemError``) of
a one-message call is raised as its kind by ``from_item``. Internal code
(``routing``, ``fanin``) works on the raw ``grpc.RpcError`` and never sees a
``ClientError``. A ``ClientError`` is not a ``grpc.RpcError``: the client's
own retry loops (``except grpc.RpcError``) never catch one, and a caller catches
the tree, not gRPC's exception.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

import grpc

from .. import errors as tree
from ..shardmap import ShardMapError
from .results import ItemError

__all__ = [
    "EXISTING_ID_KEY",
    "AccessDenied",
    "AlreadyExists",
    "Cancelled",
    "ClientError",
    "Congested",
    "DeadlineExceeded",
    "FailedPrecondition",
    "InvalidArgument",
    "NotFound",
    "RouteError",
    "ServerError",
    "TooLarge",
    "Unavailable",
    "WrongShard",
    "from_item",
    "from_rpc",
    "retry_after_ms",
    "translated",
]

EXISTING_ID_KEY = "delayq-existing-id"
"""The trailer of an ALREADY_EXISTS status naming the message that holds the key."""

_FIELD = re.compile(r"([\w.\[\]]+): ")
"""The field the text of an ``InvalidArgument`` or ``NotFound`` starts with, as the
tree's classes write it (``delay_ms: must be >= 0``)."""


class ClientError(tree.DelayqError):
    """A client call failed. ``status``: the gRPC status it failed with (None: it was
    refused before any call); ``message``: the server's (or the client's) text;
    ``field``: the offending field when the error names one (else ""); ``retry_after_ms``:
    the server's back-off hint (0: none given); ``trailers``: the error's trailing
    metadata."""

    default_status: ClassVar[grpc.StatusCode | None] = None
    names_field: ClassVar[bool] = False
    """Whether the text starts with the field (``field`` is read from it if not given)."""

    def __init__(
        self,
        message: str,
        *,
        status: grpc.StatusCode | None = None,
        retry_after_ms: int | None = None,
        trailers: Iterable[tuple[str, Any]] = (),
        field: str = "",
    ) -> None:
        self.status = status if status is not None else self.default_status
        self.message = message
        if not field and self.names_field and (m := _FIELD.match(message)):
            field = m.group(1)
        self.field = field
        self.retry_after_ms = retry_after_ms or 0
        self.trailers: tuple[tuple[str, Any], ...] = tuple(trailers)
        # an error the server sent reads "CODE: message"; one the client raised
        # itself, before any call, reads as its message alone (Exception's own
        # __init__: the tree's kinds take other arguments)
        Exception.__init__(self, message if status is None else f"{status.name}: {message}")


class InvalidArgument(ClientError, tree.InvalidArgument, ValueError):
    default_status = grpc.StatusCode.INVALID_ARGUMENT
    names_field = True


class NotFound(ClientError, tree.NotFound):
    default_status = grpc.StatusCode.NOT_FOUND
    names_field = True


class AlreadyExists(ClientError, tree.AlreadyExists):
    """A schedule with ``if_exists="reject"`` found its key taken (ALREADY_EXISTS):
    nothing was stored; ``id`` and ``deliver_at_ms`` are the message that holds the
    key (a retried schedule learns the id its first attempt got)."""

    default_status = grpc.StatusCode.ALREADY_EXISTS
    names_field = True

    def __init__(
        self, message: str, *, id: str = "", deliver_at_ms: int = 0, **kwargs: Any
    ) -> None:
        super().__init__(message, **kwargs)
        self.id = id or _trailer(self.trailers, EXISTING_ID_KEY)
        self.deliver_at_ms = deliver_at_ms


class FailedPrecondition(ClientError, tree.FailedPrecondition):
    default_status = grpc.StatusCode.FAILED_PRECONDITION


class WrongShard(FailedPrecondition, tree.WrongShard):
    """No shard of the client's map owns the key, id or receipt (after fetching
    the map again): ``owner`` is the shard the node named (-1: none), under its
    shard map ``topology_epoch`` (-1: not said)."""

    def __init__(self, message: str, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.owner = _trailer_int(self.trailers, tree.WrongShard.OWNER_KEY)
        self.topology_epoch = _trailer_int(self.trailers, tree.WrongShard.TOPOLOGY_EPOCH_KEY)


def _trailer_int(trailers: Iterable[tuple[str, Any]], key: str) -> int:
    with contextlib.suppress(ValueError):
        return int(_trailer(trailers, key) or -1)
    return -1


def _trailer(trailers: Iterable[tuple[str, Any]], key: str) -> str:
    """A trailer's value as text ("" when absent)."""
    for k, value in trailers:
        if k == key:
            return value.decode() if isinstance(value, bytes) else str(value)
    return ""


class Unavailable(ClientError, tree.Unavailable):
    default_status = grpc.StatusCode.UNAVAILABLE


class Congested(ClientError, tree.Congested):
    default_status = grpc.StatusCode.RESOURCE_EXHAUSTED


class TooLarge(ClientError):
    default_status = grpc.StatusCode.RESOURCE_EXHAUSTED


class DeadlineExceeded(ClientError, TimeoutError):
    default_status = grpc.StatusCode.DEADLINE_EXCEEDED


class Cancelled(ClientError):
    default_status = grpc.StatusCode.CANCELLED


class AccessDenied(ClientError):
    default_status = grpc.StatusCode.PERMISSION_DENIED


class RouteError(ClientError, ValueError):
    """A node answered a shard map the client cannot use."""


class ServerError(ClientError):
    default_status = grpc.StatusCode.UNKNOWN


_BY_STATUS: dict[grpc.StatusCode, type[ClientError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.OUT_OF_RANGE: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.CANCELLED: Cancelled,
    grpc.StatusCode.PERMISSION_DENIED: AccessDenied,
    grpc.StatusCode.UNAUTHENTICATED: AccessDenied,
}


def retry_after_ms(trailers: Iterable[tuple[str, Any]] | None) -> int | None:
    """The server's ``retry-after-ms`` trailer (None: absent or not a number)."""
    for key, value in trailers or ():
        if key == "retry-after-ms":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def from_rpc(exc: grpc.RpcError | ClientError) -> ClientError:
    """The ``ClientError`` for a gRPC error (a ``ClientError`` is returned as it is:
    for a caller that catches both, such as the CLI)."""
    if isinstance(exc, ClientError):
        return exc
    code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    details = (exc.details() if hasattr(exc, "details") else None) or str(exc)
    trailers = tuple(exc.trailing_metadata() or ()) if hasattr(exc, "trailing_metadata") else ()
    after = retry_after_ms(trailers)
    kind = _BY_STATUS.get(code, ServerError)
    if code is grpc.StatusCode.RESOURCE_EXHAUSTED:
        kind = TooLarge if after is None else Congested
    elif kind is FailedPrecondition and any(k == tree.WrongShard.OWNER_KEY for k, _ in trailers):
        kind = WrongShard
    return kind(details, status=code, retry_after_ms=after, trailers=trailers)


def from_item(item: ItemError, id: str | None = None, deliver_at_ms: int = 0) -> ClientError:
    """The ``ClientError`` a one-message call raises for its item's error (``id``,
    ``deliver_at_ms``: of the message holding the key, for an ``AlreadyExists``)."""
    status = item.status
    kind = _BY_STATUS.get(status, ServerError)
    if status is grpc.StatusCode.RESOURCE_EXHAUSTED:
        kind = Congested if item.retry_after_ms else TooLarge
    if kind is AlreadyExists:
        return AlreadyExists(
            item.message,
            status=status,
            field=item.field,
            id=id or "",
            deliver_at_ms=deliver_at_ms,
        )
    return kind(item.message, status=status, retry_after_ms=item.retry_after_ms, field=item.field)


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Raise a gRPC error (or an unusable shard map) escaping the block as the
    client's own exception, ``from`` the original."""
    try:
        yield
    except grpc.RpcError as exc:
        raise from_rpc(exc) from exc
    except ShardMapError as exc:
        raise RouteError(str(exc)) from exc
