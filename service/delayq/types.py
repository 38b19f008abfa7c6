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
from .recurrence.spec import ScheduleSpec, ScheduleState

__all__ = [
    "BatchOutcome",
    "CancelOutcome",
    "IfExists",
    "KeyOutcome",
    "LookupResult",
    "MessageState",
    "Schedule",
    "ScheduleBatch",
    "ScheduleOutcome",
    "SchedulePage",
    "ScheduleRequest",
    "TopicStats",
]


class IfExists(enum.IntEnum):
    """What a schedule does when a pending message of its topic already has its key
    (or, within the dedup window, had it). The value is the wire's."""

    NONE = 0
    """No check: the key only chooses the shard; any number of messages may share it."""
    REJECT = 1
    """Nothing stored; the existing message's id comes back with ``AlreadyExists``."""
    KEEP = 2
    """Nothing stored; the existing message's id comes back (``KeyOutcome.KEPT``)."""
    REPLACE = 3
    """The pending messages of the key are cancelled and the new one stored, atomically."""


class KeyOutcome(enum.IntEnum):
    """What a schedule's key did (``BatchOutcome.key_outcomes``). The value is the wire's."""

    NEW = 0
    """Stored as a new message (no check asked, or no message had the key)."""
    EXISTS = 1
    """``REJECT`` found a message: nothing stored; its id, and ``AlreadyExists``."""
    KEPT = 2
    """``KEEP`` (or a dedup id) found a message: nothing stored; its id."""
    REPLACED = 3
    """``REPLACE`` cancelled the pending message(s) of the key and stored this one."""


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
    if_exists: IfExists = IfExists.NONE
    """What to do when a pending message of ``topic`` has ``key`` (needs a key)."""
    dedup_window_ms: int = 0
    """How long after acceptance the key (or ``dedup_id``) stays taken by this message
    even once it was delivered or cancelled (0: only while pending)."""
    dedup_id: str = ""
    """A second name, apart from the key, under which a later schedule of the same
    topic with the same ``dedup_id`` is answered with this message (``KEPT``) while it
    is pending or within ``dedup_window_ms``: the RocketMQ port's client message id."""


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
    if_exists: Sequence[int] | np.ndarray | None = None
    """``IfExists`` values, one per message (None: all NONE)."""
    dedup_window_ms: Sequence[int] | np.ndarray | None = None
    dedup_ids: Sequence[str] | None = None


class BatchOutcome(NamedTuple):
    """Results of a batch, by message index: ``ids[i]`` (None where refused),
    the effective ``deliver_at_ms[i]``, and ``errors`` for refused indices only."""

    ids: list[str | None]
    deliver_at_ms: list[int]
    errors: dict[int, DelayqError]
    key_outcomes: Mapping[int, KeyOutcome] = {}
    """Rows whose key (or dedup id) did something else than ``NEW``, by index; for
    ``EXISTS`` and ``KEPT`` ``ids[i]``/``deliver_at_ms[i]`` are the existing message's."""

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
        if not self.errors and not self.key_outcomes:
            return list(map(ScheduleOutcome, self.ids, self.deliver_at_ms))
        get, key = self.errors.get, self.key_outcomes.get
        new = KeyOutcome.NEW
        return [
            ScheduleOutcome(i, d, get(k), key(k, new))
            for k, (i, d) in enumerate(zip(self.ids, self.deliver_at_ms, strict=True))
        ]


class ScheduleOutcome(NamedTuple):
    """Per-message result: ``id`` and effective ``deliver_at_ms``, or ``error``.
    (A NamedTuple: one is built per scheduled message, on the hot path.)"""

    id: str | None
    deliver_at_ms: int
    error: DelayqError | None = None
    key_outcome: KeyOutcome = KeyOutcome.NEW


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


@dataclass(frozen=True, slots=True)
class Schedule:
    """A recurring schedule as stored (``engine.scheduling``): its ``name``, its
    spec, its state (paused, next and last firing, counts) and ``id``, that of its
    plan message (the pending message that holds both; a new one at each firing)."""

    name: str
    spec: ScheduleSpec
    state: ScheduleState
    id: str


@dataclass(frozen=True, slots=True)
class SchedulePage:
    """A page of schedules by name, and the name to list after for the next page
    (``next_after``; "" once this page is the last)."""

    schedules: list[Schedule]
    next_after: str
