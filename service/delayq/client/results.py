"""What the client's calls answer, typed: enums for outcomes and states, frozen
dataclasses for records.

- ``MessageState``, ``CancelOutcome``, ``AckOutcome``: ``StrEnum``s, one member per
  value of the wire enum, each valued its lower-case name (``"cancelled"``).
- ``ItemError``: one item of a batch that failed (a malformed id or receipt, a
  refused message, or the shard of that item failing while others answered).
- ``Lookup``: one message. ``Stats``: every shard summed, ``shards`` each one's own
  (``ShardStats``, with the ``NodeStats`` of the node that answered).

Invariants: records are frozen dataclasses read by attribute; sequences in them
are tuples. ``dataclasses.asdict`` turns one into plain data for JSON (the enums
encode as their values; a ``Lookup``'s ``body`` stays bytes).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
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
        """Its one-line form, ``error: <message>`` (as the CLI prints it in place
        of an outcome)."""
        return f"error: {self.message}"

    @classmethod
    def of(cls, wire: Any) -> ItemError:
        """The ItemError of a wire ``delayq.v1.ItemError``."""
        return cls(wire.code, wire.message, wire.field, wire.retry_after_ms)


@dataclass(frozen=True, slots=True)
class Lookup:
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
class TopicStats:
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
class NodeStats:
    """The node that answered a shard's Stats."""

    shard: int
    epoch: int
    role: str
    commitlog_end: int
    topology_epoch: int
    address: str


@dataclass(frozen=True, slots=True)
class ShardStats:
    """One shard's Stats."""

    topics: tuple[TopicStats, ...]
    lateness_ms_p50: int
    lateness_ms_p99: int
    release_lag_ms: int
    node: NodeStats


@dataclass(frozen=True, slots=True)
class Stats:
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
