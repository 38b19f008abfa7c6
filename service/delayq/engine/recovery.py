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
   deliveries into the ready index, acks, sequence numbers, pending counts);
   message records not yet linked are queued again, never twice; the torn tail
   is cut. (After a kill both logs also end in a warm tail of zeros, which the
   scans read as the end: it stays as the tail and is not counted as cut.)
4. The scan resumes at the first slot that was not fully released; messages
   already delivered are skipped by the state map (at-least-once).

A friend of ``Engine``: it fills the engine's private state.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import formats
from ..delivery.groups import GroupState
from ..errors import FailedPrecondition
from ..formats.ready import ReadyEntry
from ..formats.state import MessageState
from ..formats.timer import TimerRecord
from ..store.checkpoint import Checkpoint
from ..store.segments import LogView
from .pending import pending_batch

if TYPE_CHECKING:
    from .engine import Engine

__all__ = ["recover"]


def recover(engine: Engine) -> dict[str, Any]:
    started = time.perf_counter()
    s = engine.settings
    now = engine.clock.now_ms()
    ckpt = Checkpoint.load(engine._dir / "checkpoint.json")
    report: dict[str, Any] = {"checkpoint": ckpt is not None}
    if ckpt is None:
        ckpt = Checkpoint(shard=s.shard, epoch=s.epoch, scan_from_slot=-1)
    if ckpt.shard != s.shard:
        raise FailedPrecondition(
            f"data directory holds shard {ckpt.shard}; this engine is shard {s.shard}"
        )
    if s.epoch < ckpt.epoch:
        raise FailedPrecondition(f"epoch {s.epoch} is older than the data's epoch {ckpt.epoch}")

    # -- state as of the checkpoint
    engine.topics.load_from(ckpt)
    engine._next_seq = ckpt.next_seq
    for tid_text, groups in ckpt.groups.items():
        for name, g in groups.items():
            engine.consumers.groups.setdefault(int(tid_text), {})[name] = GroupState(
                g.committed, g.acked
            )
    for path in (engine._dir / "ready").glob("*.idx"):
        tid = int(path.stem)
        ready = engine.consumers.ready_index(tid, now)
        ready.truncate(ckpt.ready_len.get(str(tid), 0))
        ready.floor = ckpt.ready_floor.get(str(tid), 0)

    # -- 1. re-link TimerLog records written after the checkpoint
    wheel, tl = engine._wheel, engine._tl
    tail_cl: set[int] = set()
    low_slot: int | None = None
    relinked = 0
    for pos, rec in tl.scan(ckpt.timerlog_end):
        _relink(wheel, pos, rec)
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
                _relink(wheel, pos, rec)
                low_slot = rec.slot if low_slot is None else min(low_slot, rec.slot)

    # -- 3. re-apply CommitLog records written after the checkpoint
    cl = engine._cl
    replayed = 0
    requeue: list[tuple[int, int, int, int, int, int]] = []
    for pos, fact, size in cl.scan(min(ckpt.replay_from, ckpt.applied_end)):
        if pos >= ckpt.applied_end:
            _apply(engine, fact)
            replayed += 1
        if isinstance(fact, formats.Message) and pos >= ckpt.replay_from and pos not in tail_cl:
            requeue.append(
                (pos, size, fact.seq, fact.topic_id, fact.deliver_at_ms, fact.roll_count)
            )
    report["commitlog_replayed"] = replayed
    report["commitlog_bytes_cut"] = _cut_after_valid(cl)
    if requeue:
        engine._enqueue_q.put(pending_batch(*(list(col) for col in zip(*requeue, strict=True))))
    report["requeued"] = len(requeue)

    # -- 4. where the scan resumes
    now_slot = now // s.precision_ms
    cursor = ckpt.scan_from_slot if ckpt.scan_from_slot >= 0 else now_slot
    if low_slot is not None:
        cursor = min(cursor, low_slot)
    engine._scan_cursor = cursor
    report["scan_behind_slots"] = max(0, now_slot - cursor)
    report["seconds"] = round(time.perf_counter() - started, 4)
    return report


def _relink(wheel: Any, pos: int, rec: TimerRecord) -> None:
    existing = wheel.get(rec.slot)
    first = pos if rec.prev < 0 or existing is None else existing.first
    wheel.put(rec.slot, first, pos, rec.chain_index + 1)


def _apply(engine: Engine, rec: formats.Record) -> None:
    """Re-apply one CommitLog fact to the derived state (checkpoint replay)."""
    if isinstance(rec, formats.TopicDef):
        engine.topics.define(rec.topic_id, rec.name)
    elif isinstance(rec, formats.Message):
        engine._next_seq = max(engine._next_seq, rec.seq + 1)
        if rec.type is formats.RecordType.SCHEDULE:
            engine.topics.accepted(rec.topic_id, np.array([rec.deliver_at_ms]), rec.accepted_ms)
            if rec.replaces_seq:
                old, _ = engine._cl.read(rec.origin_pos, payload=False)
                assert isinstance(old, formats.Message)
                engine._left_pending_one(
                    old.seq, old.topic_id, old.deliver_at_ms, MessageState.RESCHEDULED
                )
    elif isinstance(rec, formats.Cancels):
        engine._left_pending(
            np.array(rec.seq, dtype=np.uint64),
            np.array(rec.topic_id, dtype=np.int64),
            np.array(rec.deliver_at_ms, dtype=np.int64),
            MessageState.CANCELLED,
        )
    elif isinstance(rec, formats.Cancel):  # as written before CANCELS
        engine._left_pending_one(rec.seq, rec.topic_id, rec.deliver_at_ms, MessageState.CANCELLED)
    elif isinstance(rec, formats.Deliver):
        engine.consumers.ready_index(rec.topic_id).append(
            [ReadyEntry(rec.seq, rec.body_pos, rec.body_size, rec.deliver_at_ms, rec.delivered_ms)]
        )
        engine._states.set(rec.seq, MessageState.DELIVERED)
        engine.topics.delivered(rec.topic_id, [rec.deliver_at_ms])
    elif isinstance(rec, formats.Ack):
        group = engine.consumers.group(rec.topic_id, rec.group)
        for off in rec.offsets:
            group.mark_acked(off)


def _cut_after_valid(log: LogView) -> int:
    """Cut a scanned log after its last valid record, keeping a kill's warm tail
    (zeros made ahead of the writer, never data); return the bytes of data cut."""
    zeros = log.log.warm_tail(log.valid_end)
    cut = max(0, log.end - log.valid_end - zeros)
    log.truncate(log.valid_end, zeros=zeros)
    return cut
