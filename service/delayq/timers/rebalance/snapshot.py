"""Export snapshots: a shard's pending messages as they stood at one moment, read
in partitions while the shard keeps running (the Spark job's input, through the
admin ``Export`` stream).

``take`` holds the shard's lock briefly: it notes the CommitLog end (``position``;
a sync master's high-water mark when lower: nothing unacknowledged), the kept
records' positions, the topic names, and copies the state map's entries of every
seq that may still be pending. It then walks the log once without the lock (no
record below ``position`` ever changes) for the roll count of each rolled message
and for partition boundaries at record starts. From the snapshot on, and until
``release``, retention deletes no CommitLog segment and drops no kept record
(``SnapshotState.export_pins``), so every partition reads the files as they were.

A partition ``[start, end)`` yields, one row per message, the messages whose
SCHEDULE record lies in that range (a kept record counts at its old position) and
that were pending at the snapshot (``blocked`` says which are in a compaction
block: the compaction job skips those). Rows are decoded with their CRCs checked; the
ids are those the messages were given (shard, the message's epoch, position).
"""

from __future__ import annotations

import itertools
import mmap
import threading
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ... import formats
from ...errors import CorruptData, FailedPrecondition
from ...formats.commitlog import record_starts, unchecked_messages
from ...formats.fileheader import HEADER_SIZE
from ...formats.frame import RecordType
from ...formats.messagestate import BLOCKED, FORWARD_BASE, MessageState, is_live
from ...settings import EngineSettings
from ...store.commitlog import CommitLog
from ...store.statemap import StateMap
from ..memory.topics import TopicBook
from ..office import Office
from ..wakeups import Wakeups

__all__ = ["ExportRows", "ExportSnapshot", "SnapshotState", "read_partition", "release", "take"]

_KEPT_RECORD_GUESS = 512  # bytes of a kept record, for sizing their partitions


class SnapshotState(Protocol):
    """What an export snapshot uses of the shard's state."""

    export_pins: int
    next_seq: int
    office: Office
    settings: EngineSettings
    topics: TopicBook
    wakeups: Wakeups

    @property
    def cl(self) -> CommitLog: ...

    @property
    def states(self) -> StateMap: ...


@dataclass(frozen=True, slots=True)
class ExportRows:
    """Exported messages as columns, one row per message."""

    epochs: np.ndarray  # u4: the epoch each message was accepted in (part of its id)
    positions: np.ndarray  # i8: its SCHEDULE record's CommitLog position
    topics: list[str]
    keys: list[str]
    headers: list[bytes]  # encoded (``formats.headers``)
    bodies: list[bytes]
    deliver_at_ms: np.ndarray
    accepted_ms: np.ndarray
    roll_counts: np.ndarray  # times the message was re-parked so far
    forwarded_to: np.ndarray  # i8: -1 pending here; else the shard a rebalance moved it to
    blocked: np.ndarray  # bool: in a compaction block (pending, out of the roll cycle)

    def __len__(self) -> int:
        return len(self.positions)


@dataclass(eq=False)
class ExportSnapshot:
    shard: int
    epoch: int  # the shard's epoch at the snapshot
    position: int  # records before this are in it
    since: int  # partitions cover [since, position) (0: all, kept records first)
    log_start: int  # the first segment's first record then; kept records lie below
    partitions: list[tuple[int, int]]  # [start, end) ranges covering [0, position)
    pending: int  # messages pending at the snapshot
    seq_lo: int  # ``states`` holds the entries of seqs seq_lo..
    states: np.ndarray = field(repr=False)
    kept_positions: np.ndarray = field(repr=False)
    kept_seqs: np.ndarray = field(repr=False)
    topics: dict[int, str] = field(repr=False)
    roll_origins: np.ndarray = field(repr=False)  # ascending positions of rolled messages
    roll_counts: np.ndarray = field(repr=False)  # ... and their highest roll count
    owner: SnapshotState = field(repr=False)  # the state it was taken of (a rewind makes another)
    released: threading.Event = field(default_factory=threading.Event, repr=False)

    def states_of(self, seqs: np.ndarray) -> np.ndarray:
        """The state values of these seqs at the snapshot (below ``seq_lo``: done)."""
        rel = seqs.astype(np.int64) - self.seq_lo
        ok = (rel >= 0) & (rel < len(self.states))
        out = np.full(len(seqs), int(MessageState.DELIVERED), dtype=self.states.dtype)
        out[ok] = self.states[rel[ok]]
        return out

    def wanted(self, seqs: np.ndarray) -> np.ndarray:
        """Which of these seqs were pending (blocked ones too) at the snapshot, or
        forwarded (a rebalance's re-run imports those again: see ``rebalance.transfer``)."""
        states = self.states_of(seqs)
        out: np.ndarray = is_live(states) | (states >= FORWARD_BASE)
        return out

    def rolls_of(self, positions: np.ndarray) -> np.ndarray:
        """The highest roll count of the messages whose SCHEDULE is at ``positions``."""
        at = np.searchsorted(self.roll_origins, positions)
        at = np.minimum(at, max(len(self.roll_origins) - 1, 0))
        out = np.zeros(len(positions), dtype=np.int64)
        if len(self.roll_origins):
            hit = self.roll_origins[at] == positions
            out[hit] = self.roll_counts[at[hit]]
        return out


def take(st: SnapshotState, partition_bytes: int, since: int = 0) -> ExportSnapshot:
    """A snapshot of ``st``'s pending messages in partitions of about
    ``partition_bytes`` of log each; ``release`` it when done. ``since``: an
    earlier snapshot's ``position`` (a record start): only the log from there is
    walked and partitioned (what was written since; roll counts then count only
    the rolls written since too). One below the log's start means all of it."""
    with st.wakeups.lock:
        if st.export_pins < 0:
            raise AssertionError("export pins below zero")
        position = st.cl.log.end
        if st.office.index_limit is not None:
            position = min(position, st.office.index_limit)
        log = st.cl.log
        log_start = log.start
        if since < log_start or since > position:
            since = 0
        segments = [
            (max(log.first_record_pos(s.base), since), s.fd, min(s.end, position))
            for s in log.segments
            if s.base < position and (not since or s.end > since)
        ]
        if since:
            kept_positions = np.empty(0, dtype=np.int64)
            kept_seqs = np.empty(0, dtype=np.uint64)
        else:
            kept_positions, kept_seqs = st.cl.kept.below(log_start)
        seq_lo, states = st.states.copy_live(st.next_seq)
        topics = dict(st.topics.names)
        st.export_pins += 1
    try:
        origins, counts, cuts = _walk(segments, partition_bytes)
    except BaseException:
        with st.wakeups.lock:
            st.export_pins -= 1
        raise
    kept_cuts = kept_positions[:: max(1, partition_bytes // _KEPT_RECORD_GUESS)].tolist()
    bounds = sorted({*kept_cuts, max(log_start, since), *cuts, position})
    parts = [(a, b) for a, b in itertools.pairwise(bounds) if a < b]
    if parts and len(kept_positions):
        parts[0] = (0, parts[0][1])
    origins, counts = _highest(origins, counts)
    return ExportSnapshot(
        shard=st.settings.shard,
        epoch=st.office.epoch,
        position=position,
        since=since,
        log_start=log_start,
        partitions=parts,
        pending=int(np.count_nonzero(is_live(states[max(0, 1 - seq_lo) :]))),  # seqs from 1
        seq_lo=seq_lo,
        states=states,
        kept_positions=kept_positions,
        kept_seqs=kept_seqs,
        topics=topics,
        roll_origins=origins,
        roll_counts=counts,
        owner=st,
    )


def _highest(origins: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One entry per origin, ascending, with its highest count."""
    if not len(origins):
        return origins, counts
    order = np.lexsort((counts, origins))
    origins, counts = origins[order], counts[order]
    last = np.flatnonzero(np.r_[origins[1:] != origins[:-1], True])
    return origins[last], counts[last]


def release(snap: ExportSnapshot) -> None:
    """Let retention go on (once per snapshot; a second call does nothing)."""
    st = snap.owner
    with st.wakeups.lock:
        if not snap.released.is_set():
            snap.released.set()
            st.export_pins -= 1


def read_partition(
    st: SnapshotState, snap: ExportSnapshot, start: int, end: int, rows: int
) -> Generator[ExportRows, None, None]:
    """The messages of partition ``[start, end)`` of ``snap``, at most ``rows`` per
    batch. ``FailedPrecondition`` when the snapshot was released or the shard's log
    changed under it (a replica that cut its log): take a new one."""
    end = min(end, snap.position)
    if start < snap.log_start:
        yield from _kept_rows(st, snap, start, min(end, snap.log_start), rows)
    for base, fd, upto in _segments_of(st, snap, max(start, snap.log_start), end):
        for view, first, stop in _views(fd, base, max(start, base + HEADER_SIZE), min(end, upto)):
            with view:
                offs, heads = unchecked_messages(view, first - base)
                keep = (offs + base < stop) & snap.wanted(heads["seq"])
                offs, seqs = offs[keep], heads["seq"][keep]
                del heads
                for i in range(0, len(offs), rows):
                    cols = formats.decode_messages(view, offs[i : i + rows], payload=True)
                    yield _rows_of(snap, cols, offs[i : i + rows] + base, seqs[i : i + rows])


def _segments_of(
    st: SnapshotState, snap: ExportSnapshot, start: int, end: int
) -> list[tuple[int, int, int]]:
    with st.wakeups.lock:
        _check(st, snap)
        if st.cl.log.end < snap.position:
            raise FailedPrecondition("snapshot", "the shard's log was cut since; take a new one")
        return [
            (s.base, s.fd, min(s.end, snap.position))
            for s in st.cl.log.segments
            if s.base < end and s.end > start
        ]


def _check(st: SnapshotState, snap: ExportSnapshot) -> None:
    if snap.released.is_set():
        raise FailedPrecondition("snapshot", "this export snapshot was released; take a new one")
    if st is not snap.owner:
        raise FailedPrecondition("snapshot", "the shard reopened its log since; take a new one")


def _kept_rows(
    st: SnapshotState, snap: ExportSnapshot, start: int, end: int, rows: int
) -> Iterator[ExportRows]:
    sel = (snap.kept_positions >= start) & (snap.kept_positions < end)
    sel &= snap.wanted(snap.kept_seqs)
    positions, seqs = snap.kept_positions[sel], snap.kept_seqs[sel]
    for i in range(0, len(positions), rows):
        recs: list[bytes] = []
        with st.wakeups.lock:
            _check(st, snap)
            for pos in positions[i : i + rows].tolist():
                data = st.cl.kept.read(pos)
                if not data:
                    raise FailedPrecondition(
                        "snapshot", f"kept record {pos} is gone; take a new one"
                    )
                recs.append(data)
        buf = b"".join(recs)
        offs = np.cumsum([0, *map(len, recs[:-1])], dtype=np.int64)
        cols = formats.decode_messages(buf, offs, payload=True)
        yield _rows_of(snap, cols, positions[i : i + rows], seqs[i : i + rows])


def _rows_of(
    snap: ExportSnapshot, cols: formats.MessageColumns, positions: np.ndarray, seqs: np.ndarray
) -> ExportRows:
    if not cols.ok.all():
        bad = int(positions[np.flatnonzero(~cols.ok)[0]])
        raise CorruptData(f"export: the record at {bad} does not decode")
    heads = cols.heads
    names = snap.topics
    states = snap.states_of(seqs)
    return ExportRows(
        epochs=heads["epoch"].astype(np.int64),
        positions=positions.astype(np.int64),
        topics=[names.get(t, f"#{t}") for t in heads["topic_id"].tolist()],
        keys=list(cols.keys),
        headers=list(cols.headers),
        bodies=list(cols.bodies),
        deliver_at_ms=heads["deliver_at_ms"].astype(np.int64),
        accepted_ms=heads["accepted_ms"].astype(np.int64),
        roll_counts=snap.rolls_of(positions.astype(np.int64)),
        forwarded_to=np.where(states >= FORWARD_BASE, states.astype(np.int64) - FORWARD_BASE, -1),
        blocked=states == BLOCKED,
    )


def _views(fd: int, base: int, start: int, end: int) -> Iterator[tuple[mmap.mmap, int, int]]:
    """A map of the segment at ``base`` (file ``fd``) covering its records from
    ``start`` (a record start) to ``end``, with where its walk starts and stops."""
    if start < end:
        yield mmap.mmap(fd, end - base, prot=mmap.PROT_READ), start, end


def _walk(
    segments: list[tuple[int, int, int]], partition_bytes: int
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """One walk over the log's segments ((first record, file, end)): the origins
    and roll counts of every ROLL record, and partition cuts: the first record
    start at or after each ``partition_bytes`` step from the previous cut."""
    origins: list[np.ndarray] = []
    counts: list[np.ndarray] = []
    cuts: list[int] = []
    target = segments[0][0] + partition_bytes if segments else 0
    for first, fd, end in segments:
        base = first - HEADER_SIZE
        if end <= first:
            continue
        with mmap.mmap(fd, end - base, prot=mmap.PROT_READ) as view:
            starts = record_starts(view, first - base)
            _, heads = unchecked_messages(view, 0, (RecordType.ROLL,), starts)
            origins.append(heads["origin_pos"].astype(np.int64))
            counts.append(heads["roll_count"].astype(np.int64))
            del heads
        at = starts + base
        while len(at) and target <= int(at[-1]):
            cut = int(at[np.searchsorted(at, target)])
            cuts.append(cut)
            target = cut + partition_bytes
    empty = np.empty(0, dtype=np.int64)
    return (
        np.concatenate(origins) if origins else empty,
        np.concatenate(counts) if counts else empty,
        cuts,
    )
