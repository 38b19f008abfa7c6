"""Engine settings: one keyword-only dataclass, every field with unit, default and reason."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

__all__ = ["AttemptLimits", "EngineSettings", "FlushPolicy"]

DAY_MS = 86_400_000
YEAR_MS = 365 * DAY_MS


class FlushPolicy(enum.Enum):
    """When an acknowledged write is on stable storage.

    ASYNC: a write is acknowledged once it is in the operating system's page
    cache; files are fsynced every ``flush_interval_ms``. Killing the process
    (even SIGKILL) loses nothing acknowledged; a power loss or kernel crash can
    lose up to one flush interval of acknowledged writes.

    SYNC: a schedule/cancel/ack returns only after the CommitLog is fsynced;
    concurrent callers share one fsync (group commit). Delivery bookkeeping
    derived from the log (wheel, state map, ready index) is still flushed every
    interval, so after a power loss already delivered messages may be delivered
    again (at-least-once); nothing acknowledged is lost.
    """

    ASYNC = "async"
    SYNC = "sync"


_ROCKETMQ_LEVELS_MS = (
    *(1000 * s for s in (1, 5, 10, 30)),
    *(60_000 * m for m in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 30)),
    *(3_600_000 * h for h in (1, 2)),
)
"""RocketMQ 4's default messageDelayLevel "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m
10m 20m 30m 1h 2h", in ms (a test checks it against ``durations.DEFAULT_DELAY_LEVELS``)."""


@dataclass(frozen=True)
class AttemptLimits:
    """How many deliveries a consumer group gets of a message before it goes to the
    group's dead-letter topic (``deadletters``): ``default`` for every
    group but those ``groups`` names, as (group, attempts) pairs; 0 means no limit.
    Text form (``parse``): ``"16"`` or ``"16 billing=3 audit=0"``."""

    default: int = 16
    groups: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        for group, n in (("", self.default), *self.groups):
            if n < 0:
                where = f"group {group!r}" if group else "the default"
                raise ValueError(f"max_delivery_attempts: {where} is {n}; 0 (no limit) or more")

    def for_group(self, group: str) -> int:
        for name, n in self.groups:
            if name == group:
                return n
        return self.default

    @classmethod
    def parse(cls, text: str) -> AttemptLimits:
        """From the text form; a ValueError names ``max_delivery_attempts`` and the item."""
        default, groups = cls.default, []
        for item in str(text).split():
            name, eq, count = item.rpartition("=")
            if not count.isdigit() or (eq and not name):
                raise ValueError(
                    f"max_delivery_attempts: {item!r} is neither a count nor group=count "
                    '(e.g. "16 billing=3")'
                )
            if eq:
                groups.append((name, int(count)))
            else:
                default = int(count)
        return cls(default, tuple(groups))


_WINDOW_PER_FLUSH = 10
"""A window spans at least this many flush intervals (checkpoints): see
``EngineSettings.__post_init__``."""


@dataclass(frozen=True, kw_only=True)
class EngineSettings:
    data_dir: Path
    """Directory holding this shard's files; created if missing."""

    shard: int = 0
    """Shard index encoded into every message id (0 for the embedded single node)."""

    epoch: int = 1
    """The lowest replication epoch (fencing token) to write in. The data directory
    records every epoch it was written in (``epochs.json``); a node writes in the
    higher of this and the last recorded one, and ``Replicating.begin_epoch`` raises it
    (a failover). Encoded into ids."""

    replicated: bool = False
    """The shard has (or may get) replicas: a master then writes PROGRESS records
    (how far its timers have fired) into its log, for a promoted replica to resume
    there. Off for a node serving alone: its log stays free of them."""

    precision_ms: int = 1000
    """Wheel slot length (ms). Release inside a slot is still by the exact ms; this only
    sets how many slots the wheel has. Immutable for a data directory."""

    window_ms: int = 2 * DAY_MS
    """Wheel window (ms): messages due further out are rolled (re-parked). The wheel file
    holds two windows of slots; 2 days at 1 s precision is an 11 MB file."""

    flush: FlushPolicy = FlushPolicy.ASYNC
    """See ``FlushPolicy`` for what each policy does not guarantee."""

    flush_interval_ms: int = 1000
    """Period (ms) of background fsync + checkpoint; bounds recovery replay to ~this much log."""

    commitlog_segment_bytes: int = 1 << 30
    """Soft size limit of a CommitLog segment; retention deletes whole segments."""

    timerlog_segment_bytes: int = 256 << 20
    """Soft size limit of a TimerLog segment (64-byte records)."""

    max_body_bytes: int = 256 << 10
    """Largest accepted message body (bytes)."""

    max_delay_ms: int = 10 * YEAR_MS
    """Largest accepted delay from now (ms); later delivery times are refused."""

    delay_levels_ms: tuple[int, ...] = _ROCKETMQ_LEVELS_MS
    """Delays (ms) of RocketMQ 4's delay levels: a message's ``delay_level`` L (1..N)
    means a delay of ``delay_levels_ms[L-1]`` from now. Default: RocketMQ's own 1s 5s
    10s 30s 1m 2m ... 2h (``durations.DEFAULT_DELAY_LEVELS``), for clients migrating from
    setDelayTimeLevel."""

    enqueue_queue_messages: int = 200_000
    """Bound of the accept -> wheel queue (messages). Full -> new schedules get Congested."""

    slot_limit: int = 250_000
    """Most messages one wheel slot may hold; more are refused as Congested. Bounds the
    memory the release stage needs for one slot."""

    release_buffer_messages: int = 500_000
    """Bound of the wheel -> delivery buffer (messages); the scan waits when it is full.
    Also bounds the messages of slots about to fire kept in memory (the near rows)."""

    max_inflight_per_group: int = 100_000
    """Most received-but-unacked messages one consumer group may hold."""

    delivery_attempts: AttemptLimits = AttemptLimits()
    """Deliveries a group gets of a message before it is dead-lettered (RocketMQ's
    default, 16); per group."""

    retention_ms: int = 7 * DAY_MS
    """How long delivered messages stay receivable; sealed segments older than
    window + retention are deleted."""

    max_dedup_window_ms: int = 7 * DAY_MS
    """Longest dedup window a schedule may ask for (ms): how long after acceptance its
    key (or dedup id) stays taken once the message ended. Bounds the key index's
    entries of ended messages; a window longer than window + retention may outlive
    the record that holds it (its segment deleted: the key is free again)."""

    def __post_init__(self) -> None:
        if self.precision_ms <= 0 or self.window_ms < 2 * self.precision_ms:
            raise ValueError("need precision_ms > 0 and window_ms >= 2 * precision_ms")
        if self.window_ms % self.precision_ms:
            raise ValueError("window_ms must be a multiple of precision_ms")
        if self.flush_interval_ms <= 0:
            raise ValueError("flush_interval_ms must be > 0")
        if self.window_ms < _WINDOW_PER_FLUSH * self.flush_interval_ms:
            # The scan never runs a window ahead of the last checkpoint's cursor (a
            # restart resumes there, and the wheel holds two windows): with fewer
            # checkpoints per window it would keep waiting for one, releasing late.
            raise ValueError(
                f"window_ms ({self.window_ms}) must be at least {_WINDOW_PER_FLUSH} x "
                f"flush_interval_ms ({self.flush_interval_ms})"
            )
        if self.max_dedup_window_ms < 0:
            raise ValueError("max_dedup_window_ms must be >= 0")
        if not 0 <= self.shard < 65536:
            raise ValueError("shard must be in 0..65535")
        if self.epoch < 1:
            raise ValueError("epoch must be >= 1")
        if not self.delay_levels_ms:
            raise ValueError("delay_levels_ms: give at least one level")
        for level, ms in enumerate(self.delay_levels_ms, 1):
            if not 0 < ms <= self.max_delay_ms:
                raise ValueError(
                    f"delay_levels_ms: level {level} is {ms} ms; each must be > 0 and at "
                    f"most max_delay_ms ({self.max_delay_ms})"
                )

    @property
    def window_slots(self) -> int:
        return self.window_ms // self.precision_ms

    @property
    def scan_lead_ms(self) -> int:
        """How long before a slot starts the scan fires it: reading a slot's chain
        takes time, and messages due in its first milliseconds must already be in
        the release buffer then (release itself stays exact to the ms)."""
        return min(self.precision_ms // 2, 200)
