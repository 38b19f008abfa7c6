"""Recovery: bring a shard's derived state up to its CommitLog after any stop.

Reads the checkpoint (or starts from the beginning when there is none) and
replays only what follows it, so the work is bounded by one flush interval of
traffic, not by the number of pending messages:

1. TimerLog records after the checkpoint are re-linked into their wheel slots
   (each record carries its slot and chain index, so this is idempotent) and
   the first torn/corrupt record and everything after it is cut.
2. Only after a power loss can a slot point past the valid TimerLog end; such
   slots are rebuilt by a full TimerLog pass (the one unbounded path, and the
   only one that needs lost page-cache writes to trigger).
3. CommitLog records after the checkpoint are re-applied (topics, cancels,
   deliveries into the ready index, acks, hand-outs and their attempts, groups'
   policies, sequence numbers, pending counts);
   message records not yet linked are queued again, never twice; the torn tail
   is cut. (After a kill both logs also end in a warm tail of zeros, which the
   scans read as the end: it stays as the tail and is not counted as cut.)
4. The scan resumes at the first slot that was not fully released; messages
   already delivered are skipped by the state map (at-least-once).

``recover`` returns the rebuilt ``ShardState``; the consumers' part (ready
queues, groups) is restored through the ``Deliveries`` port.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ... import formats
from ...errors import FailedPrecondition
from ...formats.imports import MOVED_FROM
from ...formats.messagestate import MessageState, forward_state
from ...store.checkpoint import Checkpoint
from ...store.datadir import CHECKPOINT
from ...store.logview import LogView
from ...store.wheel import TimerWheel
from ..compaction import loading
from ..deliveries import Deliveries
from ..memory.enqueue import pending_batch
from ..state import ShardState
from ..timingwheel import slot_of

__all__ = ["apply_record", "cut_after", "note_import", "recover", "relink"]


def recover(state: ShardState, deliveries: Deliveries) -> ShardState:
    """Bring ``state`` (just opened: its files, nothing else) up to its CommitLog;
    return it, with what was done in ``state.recovery``."""
    started = time.perf_counter()  # real time (not the Clock's): the work's seconds
    s = state.settings
    now = state.clock.now_ms()
    ckpt = Checkpoint.load(state.files.dir / CHECKPOINT)
    report: dict[str, Any] = {"checkpoint": ckpt is not None}
    if ckpt is None:
        ckpt = Checkpoint(shard=s.shard, epoch=state.office.epoch, scan_from_slot=-1)
    if ckpt.shard != s.shard:
        raise FailedPrecondition(
            f"data directory holds shard {ckpt.shard}; this engine is shard {s.shard}"
        )
    if state.office.epoch < ckpt.epoch:
        raise FailedPrecondition(
            f"epoch {state.office.epoch} is older than the checkpoint's epoch {ckpt.epoch}"
        )

    # -- state as of the checkpoint (block files: cut back to it, see ``compaction.loading``)
    segs = state.cl.log.segments
    lengths = {int(k): v for k, v in ckpt.blocks.items()} if report["checkpoint"] else None
    complete = not segs or segs[0].base == 0
    report["block_files_cut"] = state.blocks.files.recover(lengths, complete)
    state.topics.load_from(ckpt)
    state.next_seq = ckpt.next_seq
    deliveries.restore(ckpt, now)

    # -- 1. re-link TimerLog records written after the checkpoint
    wheel, tl = state.wheel, state.tl
    tail_cl: set[int] = set()
    low_slot: int | None = None
    relinked = 0
    for pos, rec in tl.scan(ckpt.timerlog_end):
        relink(wheel, pos, rec.slot, rec.prev, rec.chain_index)
        tail_cl.add(rec.cl_pos)
        low_slot = rec.slot if low_slot is None else min(low_slot, rec.slot)
        relinked += 1
    report["timerlog_relinked"] = relinked
    report["timerlog_bytes_cut"] = _cut_after_valid(tl)

    # -- 2. slots pointing past the valid end (power loss only): rebuild them
    valid = tl.end
    dangling = {slot for slot, e in wheel.occupied() if e.last >= valid or e.first >= valid}
    report["slots_rebuilt"] = len(dangling)
    if dangling:
        for slot in dangling:
            wheel.clear(slot)
        for pos, rec in tl.scan(0):
            if rec.slot in dangling:
                relink(wheel, pos, rec.slot, rec.prev, rec.chain_index)
                low_slot = rec.slot if low_slot is None else min(low_slot, rec.slot)

    # -- 3. re-apply CommitLog records written after the checkpoint
    cl = state.cl
    replayed = 0
    requeue: list[tuple[int, int, int, int, int, int]] = []
    for pos, fact, size in cl.scan(min(ckpt.replay_from, ckpt.applied_end)):
        if pos >= ckpt.applied_end:
            apply_record(state, deliveries, fact, pos)
            replayed += 1
        if isinstance(fact, formats.Message) and pos >= ckpt.replay_from and pos not in tail_cl:
            requeue.append(
                (pos, size, fact.seq, fact.topic_id, fact.deliver_at_ms, fact.roll_count)
            )
    report["commitlog_replayed"] = replayed
    report["commitlog_bytes_cut"] = _cut_after_valid(cl)
    state.imports.load(state.files.dir, cl.end)
    state.imports.drop_from(cl.end)
    if requeue:
        state.enqueue_q.put(pending_batch(*(list(col) for col in zip(*requeue, strict=True))))
    report["requeued"] = len(requeue)

    # -- 4. where the scan resumes
    now_slot = slot_of(now, s.precision_ms)
    cursor = ckpt.scan_from_slot if ckpt.scan_from_slot >= 0 else now_slot
    if low_slot is not None:
        cursor = min(cursor, low_slot)
    state.scan_cursor = cursor
    report["scan_behind_slots"] = max(0, now_slot - cursor)
    report["seconds"] = round(time.perf_counter() - started, 4)
    state.recovery = report
    return state


def relink(wheel: TimerWheel, pos: int, slot: int, prev: int, chain_index: int) -> None:
    """Point ``slot`` at the TimerLog record at ``pos`` (its ``prev`` and
    ``chain_index`` as written): idempotent, and records relinked in file order
    rebuild the slot (a record with no prev starts the chain)."""
    existing = wheel.get(slot)
    first = pos if prev < 0 or existing is None else existing.first
    wheel.put(slot, first, pos, chain_index + 1)


def apply_record(state: ShardState, deliveries: Deliveries, rec: formats.Record, pos: int) -> None:
    """Apply one CommitLog fact at ``pos`` to the derived state (checkpoint replay,
    and a replica's copy of its master's records); a message is not queued for
    linking here (the caller knows whether it is linked already)."""
    if isinstance(rec, formats.TopicDef):
        state.topics.define(rec.topic_id, rec.name)
    elif isinstance(rec, formats.Message):
        state.next_seq = max(state.next_seq, rec.seq + 1)
        if rec.type is formats.RecordType.ROLL:
            loading.roll_applied(state, rec.seq)
        elif rec.type is formats.RecordType.SCHEDULE:
            state.topics.accepted(rec.topic_id, np.array([rec.deliver_at_ms]), rec.accepted_ms)
            note_import(state, pos, rec)
            if rec.replaces_seq:
                old, _ = state.cl.read(rec.origin_pos, payload=False)
                assert isinstance(old, formats.Message)
                moved = MessageState.RESCHEDULED
                _left(state, [old.seq], [old.topic_id], [old.deliver_at_ms], moved)
    elif isinstance(rec, formats.Cancels):
        ended = MessageState.CANCELLED if rec.target is None else forward_state(rec.target)
        _left(state, rec.seq, rec.topic_id, rec.deliver_at_ms, ended)
    elif isinstance(rec, formats.Cancel):  # as written before CANCELS
        _left(state, [rec.seq], [rec.topic_id], [rec.deliver_at_ms], MessageState.CANCELLED)
    elif isinstance(rec, formats.Deliver):
        deliveries.replay_deliver(rec)
        state.states.set(rec.seq, MessageState.DELIVERED)
        state.topics.delivered(rec.topic_id, [rec.deliver_at_ms])
    elif isinstance(rec, formats.Ack):
        deliveries.replay_ack(rec)
    elif isinstance(rec, formats.Handout):
        deliveries.replay_handout(rec)
    elif isinstance(rec, formats.PolicyDef):
        deliveries.replay_policy(rec)
    elif isinstance(rec, formats.Progress):  # a replica fires up to where its master did
        state.office.fire_limit = max(state.office.fire_limit or 0, rec.scan_from_slot)
    elif isinstance(rec, formats.Block):
        loading.added(state, rec, pos)
    elif isinstance(rec, formats.Loaded):
        state.blocks.was_loaded(rec.start_ms)


def note_import(state: ShardState, pos: int, rec: formats.Message) -> None:
    """Index a SCHEDULE record at ``pos`` that a rebalance imported (``memory.importindex``).
    (Its key is filed by whoever reads it in: the open's ``keyrecovery`` after a
    replay, a replica's ``replicated.apply_chunk`` for its chunk.)"""
    if rec.headers and MOVED_FROM.encode() in rec.headers:
        state.imports.note(pos, rec.epoch, formats.decode_headers(rec.headers))


def _left(state: ShardState, seqs: Any, tids: Any, dues: Any, became: MessageState | int) -> None:
    state.left_pending(
        np.array(seqs, dtype=np.uint64),
        np.array(tids, dtype=np.int64),
        np.array(dues, dtype=np.int64),
        became,
    )


def _cut_after_valid(log: LogView) -> int:
    """Cut a scanned log after its last valid record (see ``cut_after``)."""
    return cut_after(log, log.valid_end)


def cut_after(log: LogView, at: int) -> int:
    """Cut a log at ``at``, keeping a kill's warm tail (zeros made ahead of the
    writer, never data) if the cut falls in one; return the bytes of data cut."""
    zeros = log.log.warm_tail(at)
    cut = max(0, log.end - at - zeros)
    log.truncate(at, zeros=zeros)
    return cut
