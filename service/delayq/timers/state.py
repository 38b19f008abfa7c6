"""One shard's state as the timer pipeline shares it: its open files
(``ShardFiles``), what recovery rebuilt, its part in the shard (``Office``: role,
epoch, lease; replication changes it), and the lock and wake-ups the stages run
by (``Wakeups``).

``recovery.recover`` returns a ``ShardState``; the stages (accept, link, scan,
release, checkpoint, retention) each hold it and keep their own working fields
to themselves. Not thread-safe by itself: every field is read and written with
``wakeups.lock`` held, except where a stage's docstring says otherwise.
"""

from __future__ import annotations

import collections
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..clock import Clock
from ..epochs import EpochHistory
from ..formats.messagestate import MessageState, is_live
from ..role import Role
from ..settings import EngineSettings
from ..store.blockfiles import BlockFiles
from ..store.commitlog import CommitLog
from ..store.quarantine import Quarantine
from ..store.statemap import StateMap
from ..store.timerlog import TimerLog
from ..store.wheel import TimerWheel
from .memory.blockbook import BlockBook
from .memory.enqueue import EnqueueQueue
from .memory.importindex import ImportIndex
from .memory.lateness import LatenessHistogram
from .memory.releasebuffer import ReleaseBuffer
from .memory.topics import TopicBook

__all__ = ["PENDING", "Office", "Role", "ShardFiles", "ShardState", "Wakeups"]

PENDING = int(MessageState.PENDING)  # numpy compares a plain int 4x faster than an enum


class Wakeups:
    """The one lock over a shard's state and the signals its stages wait on.

    One lock guards all in-memory state and every write to the files: the GIL
    serialises Python anyway, stages hold the lock for in-memory work and one
    batched write, and fsync runs outside it (group commit). Two reads run
    without it: the scan walking a fired slot's chain (records that never change)
    and a receive decoding the bodies it took. One condition per waiting stage,
    all on the one lock, so each event wakes only the thread that has new work
    (notify_all on one condition woke every stage)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()  # one lock for all state: see the class docstring
        self.link = threading.Condition(self.lock)
        self.scan = threading.Condition(self.lock)
        self.release = threading.Condition(self.lock)
        self.flush_soon = threading.Event()  # wakes the flush stage before its interval
        self.warm_soon = threading.Event()  # a log has a new warm tail to read in
        self.stopped = False  # set (lock held) when the stages are told to end
        # what each stage waits for, so that others know when to wake it (lock held)
        self.link_idle = False  # the link stage sleeps with nothing queued
        self.scan_blocked = False  # the scan waits for room in the release buffer
        self.scan_awaits_checkpoint = False  # the scan is at its horizon (timingwheel)
        # when the release stage next wakes (None: idle); read without the lock by
        # the chain walk, to let release run first once it is due (see chainwalk)
        self.release_wake_ms: int | None = None

    def stop(self) -> None:
        """Tell every stage to end (their threads are joined by ``pipeline``)."""
        with self.lock:
            self.stopped = True
            for cv in (self.link, self.scan, self.release):
                cv.notify_all()
        self.flush_soon.set()
        self.warm_soon.set()


@dataclass(eq=False)
class ShardFiles:
    """A shard's open files, under its locked data directory."""

    dir: Path
    lock_fd: int  # holds the directory's flock
    cl: CommitLog
    tl: TimerLog
    wheel: TimerWheel
    states: StateMap
    blocks: BlockFiles

    def close(self, *, killed: bool = False) -> None:
        """Close every file; ``killed`` leaves the warm tails, as SIGKILL does."""
        self.cl.close(cut_tail=not killed)
        self.tl.close(cut_tail=not killed)
        self.wheel.close()
        self.states.close()
        self.blocks.close()
        os.close(self.lock_fd)


@dataclass(eq=False)
class Office:
    """The node's part in its shard as its state holds it: role, epoch, lease and
    the limits replication puts on the stages. ``replication.transitions``
    changes it (lock held); the stages read it (``delivering``) to know whether
    they may fire, deliver and ack.

    A master delivers only while it is not fenced and its lease (a deadline on
    ``clock.monotonic_s()``; None: none needed, serving alone) runs."""

    clock: Clock
    role: Role = Role.MASTER
    fenced: bool = False
    lease_until: float | None = None
    epoch: int = 1  # the epoch new records are written in (see epochs, opening)
    epochs: EpochHistory = field(default_factory=EpochHistory)  # as saved in epochs.json
    # a replica's scan fires only slots before this one: where its master's scan
    # stood at its last PROGRESS record (None: nothing may fire yet)
    fire_limit: int | None = None
    # sync replication: the link stage indexes only records before this position
    # (the high-water mark: what the in-sync set holds); None: no limit
    index_limit: int | None = None
    progress_written: int = -1  # the scan resume point of this master's last PROGRESS

    def delivering(self) -> bool:
        """Whether this node may fire, deliver and ack now: a master, not fenced,
        within its lease."""
        return (
            self.role is Role.MASTER
            and not self.fenced
            and (self.lease_until is None or self.clock.monotonic_s() < self.lease_until)
        )


@dataclass(eq=False)
class ShardState:
    """What the stages share; see the module docstring for the locking rule."""

    settings: EngineSettings
    clock: Clock
    files: ShardFiles
    wakeups: Wakeups
    quarantine: Quarantine
    topics: TopicBook = field(default_factory=TopicBook)
    next_seq: int = 1  # the next message's sequence number (state map index)
    scan_cursor: int = 0  # the next slot the scan fires
    enqueue_q: EnqueueQueue = field(default_factory=EnqueueQueue)  # accepted, not linked
    release: ReleaseBuffer = field(default_factory=ReleaseBuffer)  # fired, not released
    # the scan's durable point: the scan cursor of the last saved checkpoint, where a
    # restart resumes (see timingwheel.scan_horizon)
    durable_scan_from: int = 0
    checkpointed_end: int = 0  # CommitLog end covered by the last checkpoint
    fill_bound: int = 0  # >= the count of the fullest wheel slot (see accept)
    counters: collections.Counter[str] = field(default_factory=collections.Counter)
    lateness: LatenessHistogram = field(default_factory=LatenessHistogram)  # of releases
    recovery: dict[str, Any] = field(default_factory=dict)  # what the last open did
    # export snapshots open (see ``rebalance.snapshot``): while any is, retention deletes no
    # CommitLog segment and drops no kept record, so a snapshot's files stay as they were
    export_pins: int = 0
    imports: ImportIndex = field(default_factory=ImportIndex)  # what rebalances moved here
    blocks: BlockBook = field(init=False)  # compaction blocks (see ``compaction.loading``)
    office: Office = field(init=False)  # role, epoch, lease (``Office``)

    def __post_init__(self) -> None:
        self.blocks = BlockBook(self.files.blocks)
        self.office = Office(self.clock)

    @property
    def cl(self) -> CommitLog:
        return self.files.cl

    @property
    def tl(self) -> TimerLog:
        return self.files.tl

    @property
    def wheel(self) -> TimerWheel:
        return self.files.wheel

    @property
    def states(self) -> StateMap:
        return self.files.states

    def pending(self, seqs: np.ndarray) -> np.ndarray:
        """Which of these messages are still pending (a bool per seq): not in a
        compaction block, whose timer entries are dropped (see ``compaction.loading``)."""
        still: np.ndarray = self.files.states.raw_many(seqs) == PENDING
        return still

    def live(self, seqs: np.ndarray) -> np.ndarray:
        """Which of these messages are still to deliver: pending, or in a block."""
        return is_live(self.files.states.raw_many(seqs))

    def left_pending(
        self, seqs: np.ndarray, tids: np.ndarray, dues: np.ndarray, state: MessageState | int
    ) -> None:
        """Account for pending messages leaving by cancel, reschedule or release to
        another shard (``state``: the state value they get)."""
        self.files.states.set_many(seqs, state)
        self.topics.left(tids, dues, cancelled=state is MessageState.CANCELLED)
