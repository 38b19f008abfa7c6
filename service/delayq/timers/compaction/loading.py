"""Compaction blocks: far-future messages kept out of the roll cycle until their
block comes near, then loaded into the wheel (the shard's side of
``delayq-spark compact``; ``compaction.adding`` adds them).

Why this design. A message due beyond the wheel window is parked at the window's
far end and re-appended to the CommitLog each window (a ROLL copy): ~180 copies
of a message due in a year with the 2-day window. A block takes such messages
out: its BLOCK record (``formats.block``) is written to the CommitLog once,
holding for each message the ROLL copy it gets at the load, and the messages'
state byte becomes BLOCKED (``formats.messagestate``), so the timer entries they still
have are dropped when their slots fire, as a cancelled message's are. Because
the block is a CommitLog record, a replica gets it by the one replication stream
and applies it with recovery's own ``apply_record``, and a crash is handled by
the log's replay like every other fact. Because retention deletes old CommitLog
segments, each node also copies its BLOCK records into a file per block
(``store.blockfiles``), derived like a ready queue: cut to the checkpoint's
length on open and appended again from the log's replay, so a file never lacks
a record the checkpoint covers, and nothing needs the segment once it is
checkpointed. A message's SCHEDULE record stays kept past its segment while it
is BLOCKED (retention keeps live messages' records), so its id keeps working.

Loading. When the scan's cursor comes a window before a block's start (the
block's start enters the window the wheel covers), the master reads the block's
file one BLOCK record a scan step, appends the ROLL copies of the messages still
BLOCKED (as they were written: nothing is encoded), makes them PENDING and
queues them for the link stage, which links each into the slot of its exact due
ms (or parks it once more, when the block is longer than a window reaches). After
the last record it appends a LOADED record. Replay and replicas apply the same
facts: a ROLL copy of a BLOCKED message is its load (PENDING again: no other ROLL
copy of a BLOCKED message is ever written), LOADED lets the file go after the
next checkpoint. Loads are not saved: after a restart a block loads from its
start again and skips what is no longer BLOCKED; a copy appended twice (a kill
before LOADED) is never delivered twice (the state map).

Invariants: a BLOCKED message has a BLOCK record in its block's file or in the
log after the checkpoint (write order: the BLOCK record, then the file entry,
then the state byte, all under the shard's lock; the checkpoint fsyncs the files
before it is saved); a block's start is at least two windows ahead when it is
added (``compaction.adding``), so every timer entry its messages had fires (and is
dropped) before it loads, and none is rolled again. Recovery reads each block
file's name and length only: its cost does not grow with the blocked messages.

Not thread-safe: called with the shard's lock held.
"""

from __future__ import annotations

import collections
from typing import Protocol

import numpy as np

from ... import formats
from ...batchops import first_of_each, spans
from ...clock import Clock
from ...errors import CorruptData
from ...formats.blockfile import ENTRY_HEAD
from ...formats.fileheader import HEADER_SIZE
from ...formats.messagestate import BLOCKED, MessageState
from ...settings import EngineSettings
from ...store.commitlog import CommitLog
from ...store.quarantine import Quarantine
from ...store.statemap import StateMap
from ..memory.blockbook import BlockBook
from ..memory.enqueue import EnqueueQueue, pending_batch
from ..wakeups import Wakeups

__all__ = ["LoadingState", "added", "load_step", "roll_applied"]

_PENDING = int(MessageState.PENDING)


class LoadingState(Protocol):
    """What loading compaction blocks uses of the shard's state."""

    blocks: BlockBook
    clock: Clock
    counters: collections.Counter[str]
    enqueue_q: EnqueueQueue
    quarantine: Quarantine
    scan_cursor: int
    settings: EngineSettings
    wakeups: Wakeups

    @property
    def cl(self) -> CommitLog: ...

    @property
    def states(self) -> StateMap: ...


def added(st: LoadingState, block: formats.Block, pos: int) -> None:
    """Apply the BLOCK record ``block`` at CommitLog ``pos`` (written, replayed or a
    replica's): its copy goes to its block's file, its messages become BLOCKED
    (they were all pending when it was written)."""
    b, book = block, st.blocks
    record = formats.encode_block(
        b.start_ms, b.end_ms, b.written_ms, b.job, b.copies, len(b.offsets)
    )
    if not book.files.size(b.start_ms):
        st.counters["blocks_added"] += 1
    book.files.append(b.start_ms, pos, record, st.clock.now_ms())
    book.loaded.pop(b.start_ms, None)  # (a block added to after its load loads again)
    st.states.set_many(b.heads["seq"], BLOCKED)


def roll_applied(st: LoadingState, seq: int) -> None:
    """A ROLL copy of ``seq`` was applied (replayed or a replica's): if it is
    BLOCKED, this is its load."""
    if st.states.raw(seq) == BLOCKED:
        st.states.set(seq, _PENDING)


def load_step(st: LoadingState, now: int) -> bool:
    """The master's load: one BLOCK record of the earliest block whose start is
    within a window of the scan (or its LOADED record once all are). False when no
    block is due."""
    s, book = st.settings, st.blocks
    if len(st.enqueue_q) >= s.enqueue_queue_messages // 2:
        return False  # the link stage catches up first: its queue stays bounded
    # as the link stage plans (``timingwheel.plan``): the block's start then lands
    # inside the window, and every slot its messages' old entries were parked in
    # (before it was added, two windows ahead) has fired
    p = s.precision_ms
    horizon = min(now, st.scan_cursor * p) // p * p + s.window_ms
    skip = book.loaded.keys() | book.stuck
    start = next((b for b in book.files.starts if b not in skip), None)
    if start is None or start >= horizon:
        return False
    offset = book.loading.get(start, HEADER_SIZE)
    if offset >= book.files.size(start):
        st.cl.append(formats.encode_loaded(start, now), now)
        book.was_loaded(start)
        st.counters["blocks_loaded"] += 1
        return True
    try:
        _, record = book.files.read_entry(start, offset)
        block, _ = formats.decode(record)
        if not isinstance(block, formats.Block):
            raise CorruptData("not a BLOCK record")
    except CorruptData as exc:  # never retried forever: reported, the file left as is
        st.quarantine("blocks", start, f"block file entry at byte {offset}: {exc}")
        book.stuck.add(start)
        return True
    _load(st, block, now)
    book.loading[start] = offset + ENTRY_HEAD - 4 + len(record)
    return True


def _load(st: LoadingState, block: formats.Block, now: int) -> None:
    """Append the ROLL copies of ``block``'s messages still BLOCKED, make them
    PENDING and queue them for linking."""
    heads = block.heads
    take = (st.states.raw_many(heads["seq"]) == BLOCKED) & first_of_each(heads["seq"])
    if not take.any():
        return
    starts = block.offsets[take]
    sizes = heads["length"][take].astype(np.int64)
    buf = b"".join(spans(block.copies, starts.tolist(), (starts + sizes).tolist()))
    base = st.cl.append(buf, now)
    loaded = heads[take]
    st.states.set_many(loaded["seq"], _PENDING)
    st.enqueue_q.put(
        pending_batch(
            base + np.cumsum(sizes) - sizes,
            sizes,
            loaded["seq"],
            loaded["topic_id"],
            loaded["deliver_at_ms"],
            loaded["roll_count"],
        )
    )
    st.wakeups.link.notify()
    st.counters["loaded"] += len(loaded)
