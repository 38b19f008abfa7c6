"""Retention: which sealed log segments may be deleted (``deletable_count``,
pure: numbers in, a count out), and applying it after a checkpoint (``Retention``).

Segments are deleted oldest first, and never the newest (it is being written). A
segment may go once the segment after it is old enough and not past what must be
kept: every record in a segment was written before the next one was created, so
the next one's creation time bounds the whole segment's age.

- TimerLog: a record is read only until its wheel slot fires; the slot of a record
  written at time t lies at most a window (plus one slot) after t. So a segment goes
  once the scan fired past its successor's creation plus a window, and the
  checkpoint covers it.
- CommitLog: the same, because timers point into it; also every delivered message
  in it must be older than the retention period, and nothing in it may be left for
  a restart to replay.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from ...clock import Clock
from ...settings import EngineSettings
from ...store.checkpoint import Checkpoint
from ...store.commitlog import CommitLog
from ...store.segments import SegmentedLog
from ...store.statemap import StateMap
from ...store.timerlog import TimerLog
from ..deliveries import Deliveries
from ..timingwheel import fired_before_ms
from ..wakeups import Wakeups

__all__ = ["Retention", "RetentionState", "deletable_count"]


class RetentionState(Protocol):
    """What retention uses of the shard's state."""

    clock: Clock
    counters: collections.Counter[str]
    export_pins: int
    settings: EngineSettings
    wakeups: Wakeups

    @property
    def cl(self) -> CommitLog: ...

    @property
    def states(self) -> StateMap: ...

    @property
    def tl(self) -> TimerLog: ...

    def live(self, seqs: np.ndarray) -> np.ndarray: ...


def deletable_count(segments: Sequence[tuple[int, int]], created_before_ms: int, upto: int) -> int:
    """How many of ``segments`` ((base, created_ms), oldest first) may be deleted:
    the leading ones whose successor was created before ``created_before_ms`` and
    starts at or below ``upto``."""
    count = 0
    for base, created_ms in segments[1:]:  # each segment's successor
        if not (created_ms < created_before_ms and base <= upto):
            break
        count += 1
    return count


class Retention:
    """Applies retention after each checkpoint: deletes the segments nothing needs
    any more, keeps the records of deleted CommitLog segments' still-pending
    messages (see ``store.keptrecords``), gives back the blocks of expired ready
    entries, and retires state-map chunks whose messages are all done (see
    ``StateMap.sweep``). Runs on the checkpoint's thread, taking the shard's lock
    for each change; sealed segments are read without it."""

    def __init__(self, state: RetentionState, deliveries: Deliveries) -> None:
        self._state = state
        self._deliveries = deliveries
        # every SCHEDULE record of a seq below this is in a deleted CommitLog segment
        # (seqs ascend with positions); learnt from deletions, so 0 after a start
        self._schedules_gone_below = 0

    def apply(self, ckpt: Checkpoint) -> None:
        st = self._state
        s = st.settings
        now = st.clock.now_ms()
        fired_by = fired_before_ms(ckpt.scan_from_slot, s.precision_ms, s.window_slots)
        kept_by = now - s.window_ms - s.retention_ms

        def deletable(seglog: SegmentedLog, before: int, upto: int) -> list[int]:
            segs = seglog.segments
            done = deletable_count([(g.base, g.created_ms) for g in segs], before, upto)
            return [seg.base for seg in segs[:done]]

        with st.wakeups.lock:
            for base in deletable(st.tl.log, fired_by, ckpt.timerlog_end):
                st.tl.log.delete_segment(base)
                st.counters["timerlog_segments_deleted"] += 1
            self._deliveries.release_blocks()
            bases = deletable(st.cl.log, min(fired_by, kept_by), ckpt.replay_from)
            if st.export_pins:  # an export reads the files as they are (see exporting)
                return
        if bases:
            self._delete_commitlog(bases, now)
        self._retire_states(ckpt)

    def _delete_commitlog(self, bases: list[int], now: int) -> None:
        """Delete these CommitLog segments, keeping their pending messages' records;
        then drop the kept records no longer needed."""
        st = self._state
        kept = st.cl.kept
        count = kept.count
        for base in bases:  # sealed segments: read without the lock, which each check takes
            done, seq_end = st.cl.keep_pending(base, now, self._still_pending)
            with st.wakeups.lock:
                if st.export_pins:  # an export began meanwhile: the segment stays
                    kept.install(kept.write(base, now, [], []))
                    return
                kept.install(done)
                st.cl.log.delete_segment(base)
            self._schedules_gone_below = max(self._schedules_gone_below, seq_end)
            st.counters["commitlog_segments_deleted"] += 1
        st.counters["records_kept"] += kept.count - count
        # now and then (segments went): drop what no longer needs keeping
        count = kept.count
        rewritten = kept.retire(self._still_pending, now - st.settings.retention_ms, now)
        with st.wakeups.lock:
            for done in rewritten:
                kept.install(done)  # an export since begun reads none of these (see exporting)
        st.counters["kept_records_retired"] += count - kept.count

    def _retire_states(self, ckpt: Checkpoint) -> None:
        """Retire the state-map chunks of messages all done that no id can name any
        more: their SCHEDULE records are in deleted segments and not kept (this
        checkpoint's fsyncs are done)."""
        st = self._state
        below = min(ckpt.next_seq, self._schedules_gone_below)
        with st.wakeups.lock:
            retired = st.states.sweep(below, st.cl.kept.chunks)
        st.counters["state_chunks_retired"] += len(retired)

    def _still_pending(self, seqs: np.ndarray) -> np.ndarray:
        """Pending or in a compaction block: their records are kept."""
        with self._state.wakeups.lock:
            return self._state.live(seqs)
