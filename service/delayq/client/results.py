"""What the client's calls answer, typed: enums for outcomes and states, frozen
dataclasses for records.

- ``MessageState``, ``CancelOutcome``, ``AckOutcome``: ``StrEnum``s whose values are
  the lower-case names the client answered before (``"cancelled"``...), so a
  comparison with the old string still holds.
- ``ItemError``: one item of a batch that failed (a malformed id or receipt, a
  refused message, or the shard of that item failing while others answered).
- ``Lookup``: one message. ``Stats``: every shard summed, ``shards`` each one's own
  (``ShardStats``, with the ``NodeStats`` of the node that answered).

Invariants: the records are immutable (tuples, read-only mappings); ``to_dict()``
gives the exact dict the client answered before (lists, plain strings), for JSON.
Compatibility (one release): ``record["field"]`` (and ``get``, ``keys``, ``in``)
still answer that dict's values, and an ``ItemError`` compares with and answers
the string methods of the old ``"error: ..."`` text, with a ``DeprecationWarning``.
"""

from __future__ import annotations

import dataclasses
import enum
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc

from ..v1 import delayq_pb2 as pb

__all__ = [
    "AckOutcome",
    "CancelOutcome",
    "DueBucket",
    "ItemError",
    "Lookup",
    "MessageState",
    "NodeStats",
    "ShardStats",
    "Stats",
    "TopicStats",
]


class MessageState(enum.StrEnum):
    """Where a message is: ``pending`` (waiting for its time), ``delivered``,
    ``cancelled``, or ``rescheduled`` (replaced by a new id)."""

    UNSPECIFIED = "unspecified"
    PENDING = "pending"
    CANCELLED = "cancelled"
    DELIVERED = "delivered"
    RESCHEDULED = "rescheduled"


class CancelOutcome(enum.StrEnum):
    UNSPECIFIED = "unspecified"
    CANCELLED = "cancelled"
    NOT_FOUND = "not_found"
    ALREADY_DELIVERED = "already_delivered"
    ALREADY_CANCELLED = "already_cancelled"


class AckOutcome(enum.StrEnum):
    """An ack's (or change of invisibility's) answer per receipt: ``stale`` is an
    earlier attempt's receipt; ``invalid_receipt`` one this shard did not hand out
    to this group (nothing is acked)."""

    UNSPECIFIED = "unspecified"
    ACKED = "acked"
    ALREADY_ACKED = "already_acked"
    STALE = "stale"
    NOT_FOUND = "not_found"
    INVALID_RECEIPT = "invalid_receipt"


def _by_number(enum_type: Any, wire: Any, prefix: str) -> tuple[Any, ...]:
    """``enum_type``'s members indexed by their wire number (the proto enum ``wire``)."""
    names = {v.number: v.name.removeprefix(prefix).lower() for v in wire.DESCRIPTOR.values}
    return tuple(enum_type(names[n]) for n in range(max(names) + 1))


STATE_BY_NUMBER: tuple[MessageState, ...] = _by_number(
    MessageState, pb.MessageState, "MESSAGE_STATE_"
)
CANCEL_BY_NUMBER: tuple[CancelOutcome, ...] = _by_number(
    CancelOutcome, pb.CancelOutcome, "CANCEL_OUTCOME_"
)
ACK_BY_NUMBER: tuple[AckOutcome, ...] = _by_number(AckOutcome, pb.AckOutcome, "ACK_OUTCOME_")


def _plain(value: Any) -> Any:
    """``value`` as the client's old answers held it: dicts, lists, plain strings."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


class _DictAccess:
    """Deprecated dict-style reads (``record["state"]``) of a record that was a dict."""

    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        """The record as the dict the client answered before (JSON-ready but for bytes)."""
        out: dict[str, Any] = _plain(self)
        return out

    def _old(self) -> dict[str, Any]:
        warnings.warn(
            f"reading {type(self).__name__} like a dict is deprecated and goes in the next "
            "release: use its attributes (or to_dict())",
            DeprecationWarning,
            stacklevel=3,
        )
        return self.to_dict()

    def __getitem__(self, key: str) -> Any:
        return self._old()[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._old().get(key, default)

    def keys(self) -> Any:
        return self._old().keys()

    def __contains__(self, key: object) -> bool:
        return key in self._old()

    def __iter__(self) -> Iterator[str]:
        return iter(self._old())


def _deprecated_text() -> None:
    warnings.warn(
        'using an ItemError as the string "error: ..." is deprecated and goes in the next '
        "release: read its code, field and message",
        DeprecationWarning,
        stacklevel=3,
    )


@dataclass(frozen=True, slots=True)
class ItemError:
    """One item of a batch that failed: ``code`` is the gRPC status number (as
    ``google.rpc.Code``), ``field`` the offending field when the server named one."""

    code: int
    message: str
    field: str = ""
    retry_after_ms: int = 0

    @property
    def status(self) -> grpc.StatusCode:
        for s in grpc.StatusCode:
            if s.value[0] == self.code:
                return s
        return grpc.StatusCode.UNKNOWN

    def __str__(self) -> str:
        return f"error: {self.message}"

    # -- the old "error: ..." string's shape, kept for one release
    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            _deprecated_text()
            return str(self) == other
        if not isinstance(other, ItemError):
            return NotImplemented
        return (self.code, self.message, self.field, self.retry_after_ms) == (
            other.code,
            other.message,
            other.field,
            other.retry_after_ms,
        )

    def __getattr__(self, name: str) -> Any:
        """``startswith`` and the other methods of the old string, with a warning."""
        if name.startswith("_") or not hasattr(str, name):
            raise AttributeError(name)
        _deprecated_text()
        return getattr(str(self), name)

    @classmethod
    def of(cls, wire: Any) -> ItemError:
        """The ItemError of a wire ``delayq.v1.ItemError``."""
        return cls(wire.code, wire.message, wire.field, wire.retry_after_ms)


@dataclass(frozen=True, slots=True)
class Lookup(_DictAccess):
    """One message, as its shard knows it."""

    id: str
    state: MessageState
    topic: str
    deliver_at_ms: int
    accepted_at_ms: int
    key: str
    headers: Mapping[str, str] = field(hash=False)
    body: bytes


@dataclass(frozen=True, slots=True)
class DueBucket:
    """``count`` pending messages due within ``within_ms`` (0: overdue; -1: later)."""

    within_ms: int
    count: int


@dataclass(frozen=True, slots=True)
class TopicStats(_DictAccess):
    topic: str
    pending: int
    delivered: int
    cancelled: int
    group_backlog: Mapping[str, int] = field(hash=False)
    """Per consumer group: messages delivered and not yet acked."""
    due: tuple[DueBucket, ...]
    group_dead_lettered: Mapping[str, int] = field(default_factory=dict, hash=False)
    """Per consumer group: messages sent to its dead-letter topic (``dlq.<group>``)
    since each shard opened."""


@dataclass(frozen=True, slots=True)
class NodeStats(_DictAccess):
    """The node that answered a shard's Stats."""

    shard: int
    epoch: int
    role: str
    commitlog_end: int
    topology_epoch: int
    address: str


@dataclass(frozen=True, slots=True)
class ShardStats(_DictAccess):
    """One shard's Stats."""

    topics: tuple[TopicStats, ...]
    lateness_ms_p50: int
    lateness_ms_p99: int
    release_lag_ms: int
    node: NodeStats


@dataclass(frozen=True, slots=True)
class Stats(_DictAccess):
    """Every shard's Stats as one: counts, backlogs and due buckets summed per topic,
    lateness and release lag the worst shard's; ``shards``: each shard's own."""

    topics: tuple[TopicStats, ...]
    lateness_ms_p50: int
    lateness_ms_p99: int
    release_lag_ms: int
    shards: tuple[ShardStats, ...] = ()

    def topic(self, name: str) -> TopicStats | None:
        """The summed stats of topic ``name`` (None: no shard has it)."""
        return next((t for t in self.topics if t.topic == name), None)
