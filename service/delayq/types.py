"""Values the engine takes and returns when scheduling (its public vocabulary).
Pure data; the receive side's values are in ``delivery.types``."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from .errors import DelayqError
from .formats.messagestate import MessageState

__all__ = [
    "BatchOutcome",
    "CancelOutcome",
    "LookupResult",
    "MessageState",
    "ScheduleBatch",
    "ScheduleOutcome",
    "ScheduleRequest",
    "TopicStats",
]


@dataclass(slots=True, kw_only=True)  # not frozen: a frozen __init__ is slow on this hot path
class ScheduleRequest:
    """One message to schedule: give one of ``deliver_at_ms`` (epoch ms), ``delay_ms`` or
    ``delay_level`` (RocketMQ 4's level L: the L-th of ``EngineSettings.delay_levels_ms``
    from now); none means now. A time in the past means deliver now."""

    topic: str
    body: bytes
    deliver_at_ms: int | None = None
    delay_ms: int | None = None
    delay_level: int | None = None
    key: str = ""
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True, kw_only=True)
class ScheduleBatch:
    """Many messages as columns: the bulk form of ``ScheduleRequest`` (no object per
    message). ``topic`` is one name for all or one per message; ``deliver_at_ms``,
    ``delay_ms`` and ``delay_level`` hold one value per message where given, 0 meaning
    "not given" (all 0: now). Optional columns left ``None`` mean empty keys / no headers."""

    topic: str | Sequence[str]
    bodies: Sequence[bytes]
    deliver_at_ms: Sequence[int] | np.ndarray | None = None
    delay_ms: Sequence[int] | np.ndarray | None = None
    delay_level: Sequence[int] | np.ndarray | None = None
    keys: Sequence[str] | None = None
    headers: Sequence[Mapping[str, str]] | None = None


class BatchOutcome(NamedTuple):
    """Results of a batch, by message index: ``ids[i]`` (None where refused),
    the effective ``deliver_at_ms[i]``, and ``errors`` for refused indices only."""

    ids: list[str | None]
    deliver_at_ms: list[int]
    errors: dict[int, DelayqError]

    @classmethod
    def spread(
        cls,
        n: int,
        rows: Sequence[int] | None,
        ids: list[str | None],
        dues: list[int],
        errors: dict[int, DelayqError],
        refused: Mapping[int, DelayqError],
    ) -> BatchOutcome:
        """The outcome of a batch of ``n`` whose accepted rows were ``rows`` (None:
        all) with ``ids``/``dues``/``refused`` by accepted row; ``errors`` (by batch
        index) gains the refusals. Rows refused by validation keep None and 0."""
        all_ids: list[str | None] = [None] * n
        all_dues = [0] * n
        for k, i in enumerate(range(n) if rows is None else rows):
            all_ids[i], all_dues[i] = ids[k], dues[k]
            if k in refused:
                errors[i] = refused[k]
        return cls(all_ids, all_dues, errors)

    def outcomes(self) -> list[ScheduleOutcome]:
        """The same results as one ``ScheduleOutcome`` per message."""
        if not self.errors:
            return list(map(ScheduleOutcome, self.ids, self.deliver_at_ms))
        get = self.errors.get
        return [
            ScheduleOutcome(i, d, get(k))
            for k, (i, d) in enumerate(zip(self.ids, self.deliver_at_ms, strict=True))
        ]


class ScheduleOutcome(NamedTuple):
    """Per-message result: ``id`` and effective ``deliver_at_ms``, or ``error``.
    (A NamedTuple: one is built per scheduled message, on the hot path.)"""

    id: str | None
    deliver_at_ms: int
    error: DelayqError | None = None


class CancelOutcome(enum.Enum):
    CANCELLED = "cancelled"
    NOT_FOUND = "not_found"
    ALREADY_DELIVERED = "already_delivered"
    ALREADY_CANCELLED = "already_cancelled"


@dataclass(frozen=True, slots=True)
class LookupResult:
    id: str
    state: MessageState
    topic: str
    deliver_at_ms: int
    accepted_ms: int
    key: str
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True, slots=True)
class TopicStats:
    topic: str
    pending: int
    delivered: int
    cancelled: int
    groups: dict[str, int]
    """group -> backlog (delivered, not yet acked)."""
    due: list[tuple[int, int]]
    """(within_ms, count): pending messages due within that many ms (0: overdue;
    -1: later than the last bound); see ``timers.duecounts.BUCKETS_MS``."""
    dead_lettered: dict[str, int] = field(default_factory=dict)
    """group -> messages sent to its dead-letter topic since the shard opened."""
