"""A replica's copy of its master's log: ``apply_chunk`` writes a chunk of the
master's CommitLog at the same position and applies its records to the shard's
state the way recovery replays a log tail (``recovery.apply_record``), so the
replica holds the master's pending set, cancels, deliveries, acks, hand-outs (each
message's attempt), groups' delivery policies and topics, its key indexes
(``keyfiling``), and its wheel, without a rescan when it is promoted.

Invariants: a chunk is whole records, checked (CRC) before anything is written;
it lands exactly at the replica's log end (or one segment header past it: see
``SegmentedLog.append_at``), so both logs hold the same records at the same
positions and every id resolves on both. The master's epoch history is adopted
(fsynced) before the first record of a new epoch is written. Messages are queued
for the link stage as accepted ones are; PROGRESS records move ``fire_limit``.
Runs with the shard's lock held.
"""

from __future__ import annotations

import numpy as np

from ... import formats
from ...epochs import EpochHistory
from ...errors import FailedPrecondition
from ...formats.commitlog import decode_all
from ...formats.fileheader import HEADER_SIZE
from ...store.epochfile import EPOCHS_FILE, save_epochs
from ..deliveries import Deliveries
from ..keyfiling import HEADS, file_heads
from ..memory.enqueue import pending_batch
from ..state import ShardState
from .recovery import apply_record, note_import

__all__ = ["adopt_epochs", "apply_chunk"]

_SCHEDULE = formats.RecordType.SCHEDULE


def adopt_epochs(state: ShardState, master: EpochHistory, upto: int) -> None:
    """Take the master's epochs above this node's last one that begin at or before
    ``upto`` (where the next write lands); saved (fsynced) before that write."""
    history = state.office.epochs
    for epoch, start in master.entries:
        if epoch > history.last and start <= upto:
            history = history.begin(epoch, start)
    if history != state.office.epochs:
        save_epochs(state.files.dir / EPOCHS_FILE, history)
        state.office.epochs = history
        state.office.epoch = max(state.office.epoch, history.last)


def apply_chunk(
    state: ShardState, deliveries: Deliveries, pos: int, data: bytes, master: EpochHistory
) -> int:
    """Write the master's records ``data`` at ``pos`` and apply them; return how
    many records there were. ``CorruptData`` (nothing written) for damaged bytes,
    ``FailedPrecondition`` for a position that is not this log's end."""
    records = decode_all(data)
    end = state.cl.end
    if pos not in (end, end + HEADER_SIZE):
        raise FailedPrecondition(f"a chunk at {pos} does not continue this log (it ends at {end})")
    adopt_epochs(state, master, pos)
    now = state.clock.now_ms()
    state.cl.log.append_at(pos, data, now)
    queued: list[tuple[int, int, int, int, int, int]] = []
    plain: list[formats.Message] = []

    def account() -> None:  # the plain SCHEDULE records gathered so far, as one batch
        if plain:
            state.next_seq = max(state.next_seq, max(m.seq for m in plain) + 1)
            tids = np.fromiter((m.topic_id for m in plain), np.int64, len(plain))
            dues = np.fromiter((m.deliver_at_ms for m in plain), np.int64, len(plain))
            state.topics.accepted(tids, dues, now)
            plain.clear()

    keyed: list[tuple[int, formats.Message]] = []  # SCHEDULE records with a key or headers
    for off, rec, length in records:
        if isinstance(rec, formats.Message):
            queued.append(
                (pos + off, length, rec.seq, rec.topic_id, rec.deliver_at_ms, rec.roll_count)
            )
            if rec.type is _SCHEDULE and (rec.key or rec.headers):
                keyed.append((pos + off, rec))
            if rec.type is _SCHEDULE and not rec.replaces_seq:
                plain.append(rec)
                note_import(state, pos + off, rec)
                continue
        account()
        apply_record(state, deliveries, rec, pos + off)
    account()
    if keyed:  # into the key indexes, as accepted ones are (one batch a chunk)
        recs = [r for _, r in keyed]
        heads = np.array([(r.topic_id, r.seq) for r in recs], dtype=HEADS)
        at = np.fromiter((p for p, _ in keyed), np.int64, len(recs))
        file_heads(state, heads, [r.key for r in recs], [r.headers for r in recs], at)
    if queued:
        state.enqueue_q.put(pending_batch(*(list(col) for col in zip(*queued, strict=True))))
        state.wakeups.link.notify()
    if state.office.fire_limit is not None and state.scan_cursor < state.office.fire_limit:
        state.wakeups.scan.notify()
    return len(records)
