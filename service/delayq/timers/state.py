"""One shard's state as the timer pipeline shares it (``ShardState``): its
files (``shardfiles``), its part in the shard (``office``), the lock and
wake-ups (``wakeups``), the in-memory books (``memory``) and the positions the
stages move on (the next sequence number, the scan cursor, what the last
checkpoint covers).

``recovery.recover`` returns it and ``opening`` builds it; nothing else names
the whole. Each stage declares the part it uses as a Protocol of its own (e.g.
``stages.accept.AcceptState``) and is handed this object through that type, so
mypy keeps a stage to its part and the imports show what it touches. Not
thread-safe by itself: every field is read and written with ``wakeups.lock``
held, except where a stage's docstring says otherwise.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..clock import Clock
from ..formats.messagestate import FORWARD_BASE, PENDING, MessageState, is_live
from ..settings import EngineSettings
from ..store.commitlog import CommitLog
from ..store.quarantine import Quarantine
from ..store.statemap import StateMap
from ..store.timerlog import TimerLog
from ..store.wheel import TimerWheel
from .memory.blockbook import BlockBook
from .memory.enqueue import EnqueueQueue
from .memory.importindex import ImportIndex
from .memory.keyindex import KeyIndex
from .memory.lateness import LatenessHistogram
from .memory.releasebuffer import ReleaseBuffer
from .memory.topics import TopicBook
from .office import Office
from .shardfiles import ShardFiles
from .wakeups import Wakeups

__all__ = ["ShardState"]


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
    # keyed SCHEDULE records by (topic id, key), and by (topic id, dedup id): see
    # ``bykey`` (kept by accept, a replica's chunks, loaded or built at open)
    keys: KeyIndex = field(default_factory=KeyIndex)
    dedups: KeyIndex = field(default_factory=KeyIndex)
    # the served map's shards (``Engine.set_map_shards``): listed and not leaving, and
    # joining; None: not told yet, every forward holds (``holding``, ``key_held``)
    listed: frozenset[int] | None = None
    joining: frozenset[int] | None = None
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

    def key_held(self, seqs: np.ndarray) -> np.ndarray:
        """Which of these messages the key indexes keep whatever their window (the
        sweep, the open's build): live ones, and those handed over to a joining
        shard (a scale-up under way: the map has not switched)."""
        raw = self.files.states.raw_many(seqs)
        held: np.ndarray = is_live(raw) | _forwarded_to(raw, self.joining)
        return held

    def holding(self, raw: np.ndarray) -> np.ndarray:
        """Which of these state values are forwards that hold their key here at a
        call (``bykey``; the server checked first that this shard owns the key by
        its map): to a shard listed and not leaving. A key comes back to a shard
        only when the shards it went to leave, so such a forward is one of a
        rebalance under way (or of a job that died), not of an earlier one."""
        return _forwarded_to(raw, self.listed)

    def left_pending(
        self, seqs: np.ndarray, tids: np.ndarray, dues: np.ndarray, state: MessageState | int
    ) -> None:
        """Account for pending messages leaving by cancel, reschedule or release to
        another shard (``state``: the state value they get)."""
        self.files.states.set_many(seqs, state)
        self.topics.left(tids, dues, cancelled=state is MessageState.CANCELLED)


def _forwarded_to(raw: np.ndarray, shards: frozenset[int] | None) -> np.ndarray:
    """Which of these state values are forwards to one of ``shards`` (None: any).
    The values are the state map's (``StateMap.raw_many``): a forward to a shard of
    128 or more (byte ``FORWARDED_FAR`` and its side file) reads ``FORWARD_BASE + T``
    as a near one does."""
    forwarded: np.ndarray = raw >= FORWARD_BASE
    if shards is None or not forwarded.any():
        return forwarded
    out: np.ndarray = forwarded & np.isin(raw.astype(np.int64) - FORWARD_BASE, list(shards))
    return out
