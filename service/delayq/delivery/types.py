"""Values the receive side returns (part of the engine's public vocabulary).
Pure data."""

from __future__ import annotations

import enum
import itertools
from collections.abc import Sequence
from typing import NamedTuple, TypeVar

from .policy import GroupPolicy

T = TypeVar("T")

__all__ = ["ATTEMPT_BUCKETS", "AckOutcome", "GroupStats", "ReceivedBatch", "ReceivedMessage"]

ATTEMPT_BUCKETS = (1, 2, 3, 4, 8)
"""Lowest attempt of each bucket of ``GroupStats.attempts`` and ``retries``: 1, 2, 3,
4-7, 8+."""


class AckOutcome(enum.Enum):
    ACKED = "acked"
    ALREADY_ACKED = "already_acked"
    # the receipt is from an earlier delivery attempt (the message was redelivered) or
    # was replaced by a new one (``Engine.retime``, ``dead_letter``)
    STALE = "stale"
    NOT_FOUND = "not_found"
    # the receipt does not check: not handed out by this shard to this group for the
    # message at its offset (another group's, forged, or from a log that diverged)
    INVALID_RECEIPT = "invalid_receipt"


class GroupStats(NamedTuple):
    """Where one consumer group stands on one topic (``engine.Observing.group_stats``)."""

    backlog: int
    """Delivered to the topic, not yet acked by the group."""
    ready: int
    """Delivered to the topic, not yet handed to the group."""
    inflight: int
    """Handed out, not settled, their invisibility running (the in-flight limit's
    count: not those waiting for their next attempt)."""
    oldest_unacked_ms: int
    """Age (since its release) of the group's oldest unacked message; 0: none."""
    redelivered: int
    """Messages handed out again since the shard opened (invisibility ran out)."""
    dead_lettered: int
    """Messages sent to the group's dead-letter topic since the shard opened."""
    policy: GroupPolicy = GroupPolicy()
    """The group's delivery policy, topic-wide (the one set, else the defaults)."""
    explicit: bool = False
    """Whether ``policy`` was set (else: the server's defaults)."""
    paused: bool = False
    inflight_limit: int = 0
    """This shard's in-flight limit (its share of the policy's)."""
    waiting: int = 0
    """Handed out, failed (lapsed or nacked), waiting out the backoff."""
    attempts: tuple[int, ...] = (0,) * len(ATTEMPT_BUCKETS)
    """In-flight messages (and waiting ones) by attempt: 1, 2, 3, 4-7, 8+."""
    next_retry_ms: int = 0
    """When a message handed out may next be handed out again, at the earliest
    (epoch ms; 0: none in flight)."""
    throttled: int = 0
    """Receive looks the group's rate cut short since the shard opened."""
    retries: tuple[int, ...] = (0,) * len(ATTEMPT_BUCKETS)
    """Retries scheduled (lapses, nacks) since the shard opened, by the attempt
    that failed: 1, 2, 3, 4-7, 8+."""


class ReceivedMessage(NamedTuple):
    id: str
    topic: str
    key: str
    headers: dict[str, str]
    body: bytes
    deliver_at_ms: int
    delivered_ms: int
    receipt: str
    attempt: int


class ReceivedBatch(NamedTuple):
    """The messages of one receive as columns (``Engine.receive_batch``): message i
    is ``ids[i]``, ``bodies[i]``, ... Receipts are "" when auto-acked."""

    topic: str
    ids: list[str]
    keys: list[str]
    headers: list[dict[str, str]]
    bodies: list[bytes]
    deliver_at_ms: list[int]
    delivered_ms: list[int]
    receipts: list[str]
    attempts: list[int]

    def select(self, keep: Sequence[bool]) -> ReceivedBatch:
        """The messages whose ``keep`` is true."""

        def pick(column: list[T]) -> list[T]:
            return [x for x, k in zip(column, keep, strict=True) if k]

        return ReceivedBatch(
            self.topic,
            pick(self.ids),
            pick(self.keys),
            pick(self.headers),
            pick(self.bodies),
            pick(self.deliver_at_ms),
            pick(self.delivered_ms),
            pick(self.receipts),
            pick(self.attempts),
        )

    def messages(self) -> list[ReceivedMessage]:
        """One ``ReceivedMessage`` per message."""
        return list(
            map(
                ReceivedMessage,
                self.ids,
                itertools.repeat(self.topic),
                self.keys,
                self.headers,
                self.bodies,
                self.deliver_at_ms,
                self.delivered_ms,
                self.receipts,
                self.attempts,
            )
        )
