"""The scan stage: fire wheel slots as their time comes, and roll.

A slot fires ``scan_lead_ms`` before it starts (``timingwheel.fire_through``):
its messages are read (from the near rows when they are its whole chain, else
by walking its TimerLog chain), cancelled and delivered ones dropped (state
map), ROLL entries re-appended to the CommitLog and queued for the link stage
again (those of messages in a compaction block dropped: ``rolls_avoided``), and
the rest pushed into the release buffer in due order. A master's step also loads
the compaction block that has come within a window of the cursor, a record at a
time (``compaction.loading``). Firing early
is safe: release waits for each message's own ms, a message linked later into
a fired slot goes straight to release, and a cancel after the fire is honoured
by release's state check.

The scan waits when the release buffer is full, and never runs past its
horizon (a window ahead of the last checkpoint's cursor; see ``timingwheel``).
On a replica the scan fires only the slots its master's scan has passed (the
``fire_limit`` of its last PROGRESS record) and re-appends no ROLL entries (the
master's ROLL records arrive in the log): its release buffer then holds what the
master may not have delivered yet, pruned as the master's DELIVER records come
in, and a promotion resumes exactly there. A master that may not deliver
(fenced, lease lapsed) fires nothing.

Not thread-safe: ``step`` runs with the shard's lock held and lets go of it
only while reading chains (TimerLog records behind a fired slot never change).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from ... import formats
from ...batchops import take_rows
from ...errors import CorruptData
from ...formats.messagestate import BLOCKED, PENDING
from ...formats.timer import RECORD_DTYPE as TIMER_DTYPE
from ...formats.timer import TimerRecord
from ...role import Role
from ...store.timerlog import TimerLog
from ...store.wheel import TimerWheel
from ..compaction.loading import LoadingState, load_step
from ..memory.enqueue import pending_batch
from ..memory.releasebuffer import ReleaseBuffer, slot_run
from ..office import Office
from ..timingwheel import TimerKind, fire_through, fires_at, scan_horizon
from ..tuning import SCAN_LEAD_SLOTS
from .chainwalk import walk_chain
from .link import NearRows

__all__ = ["ScanState", "Scanner"]

Fired = tuple[np.ndarray, np.ndarray, list[tuple[int, str]]]
"""A fired slot's NORMAL entries as a release run in due order, its ROLL records,
and the problems to quarantine (position, why)."""

_ROLL = int(TimerKind.ROLL)


class ScanState(LoadingState, Protocol):
    """What the scan stage uses of the shard's state: loading's part (it loads
    due blocks) and its own."""

    durable_scan_from: int
    office: Office
    release: ReleaseBuffer

    @property
    def tl(self) -> TimerLog: ...

    @property
    def wheel(self) -> TimerWheel: ...

    def pending(self, seqs: np.ndarray) -> np.ndarray: ...


class Scanner:
    def __init__(self, state: ScanState, near: NearRows, release_is_due: Callable[[], bool]):
        self._state = state
        self._near = near
        self._release_is_due = release_is_due
        # lowest slot fired but not yet in the release buffer (its chain is read with
        # the lock let go): a checkpoint must not resume the scan past it
        self.reading_slot: int | None = None

    def next_ms(self) -> int | None:
        """When the scan has work next (None: when woken by release or a checkpoint)."""
        st = self._state
        if st.wakeups.scan_blocked or st.wakeups.scan_awaits_checkpoint:
            return None
        if st.office.role is Role.REPLICA:
            if st.office.fire_limit is None or st.scan_cursor >= st.office.fire_limit:
                return None  # woken when the master's next PROGRESS record is applied
        elif not st.office.delivering():
            return None  # woken by a promotion or a renewed lease
        return fires_at(st.scan_cursor, st.settings.precision_ms, st.settings.scan_lead_ms)

    def step(self) -> bool:
        """Fire every slot that starts within ``scan_lead_ms``. False when idle."""
        st = self._state
        s, wake = st.settings, st.wakeups
        now = st.clock.now_ms()
        through = fire_through(now, s.precision_ms, s.scan_lead_ms)
        replica = st.office.role is Role.REPLICA
        if replica:  # only as far as the master has fired (its PROGRESS records)
            through = min(through, (st.office.fire_limit or 0) - 1)
        elif not st.office.delivering():
            return False
        progressed = False
        limit = s.release_buffer_messages
        queued = len(st.release)
        fired: list[tuple[int, int, int, list[np.ndarray]]] = []
        wake.scan_blocked = wake.scan_awaits_checkpoint = False
        horizon = scan_horizon(st.durable_scan_from, s.window_slots, SCAN_LEAD_SLOTS)
        while st.scan_cursor <= through:
            slot = st.scan_cursor
            if slot >= horizon:  # a window ahead of the last checkpoint: wait for the next
                wake.scan_awaits_checkpoint = True
                wake.flush_soon.set()
                break
            entry = st.wheel.get(slot)
            if entry is not None and entry.num:
                if queued and queued + entry.num > limit:
                    wake.scan_blocked = True  # full: wait for release to drain it
                    break
                queued += entry.num
                fired.append((slot, entry.last, entry.num, self._near.take(slot)))
            # first: what links into a fired slot from now on goes straight to release
            st.scan_cursor = slot + 1
            progressed = True
        if fired:
            # The chains are read with the lock let go: a big slot (a burst) takes tens
            # of ms to walk, which would hold up the release of messages due meanwhile.
            self.reading_slot = fired[0][0]
            wake.lock.release()
            try:
                chains = [self.fired_rows(*f) for f in fired]
            finally:
                wake.lock.acquire()
                self.reading_slot = None  # the runs reach the release buffer before unlock
            for due, rolled, problems in chains:
                for pos, why in problems:
                    st.quarantine("timerlog", pos, why)
                st.release.push_run(take_rows(due, st.pending(due["seq"])), True)
                raw = st.states.raw_many(rolled["seq"])
                st.counters["rolls_avoided"] += int(np.count_nonzero(raw == BLOCKED))
                rolled = take_rows(rolled, raw == PENDING)
                if len(rolled) and not replica:  # a replica has the master's ROLL records
                    fields = list(TimerRecord._fields)
                    self._roll([TimerRecord(*r) for r in rolled[fields].tolist()], now)
        if not replica and load_step(st, now):  # a block come near: see ``compaction.loading``
            progressed = True
        if progressed:
            wake.release.notify()  # the release stage may have new, earlier deadlines
        return progressed

    def fired_rows(self, slot: int, last: int, num: int, near: list[np.ndarray]) -> Fired:
        """A fired slot's messages: from memory when its rows there are its whole
        chain (``num`` records), else from its chain."""
        run = NearRows.as_run(near, slot, num)
        if run is None:
            return self.read_chain(slot, last, num)
        return run, np.empty(0, dtype=TIMER_DTYPE), []

    def read_chain(self, slot: int, last: int, num: int) -> Fired:
        """Walk a fired slot's chain (see ``stages.chainwalk``; no lock needed)."""
        recs, problems = walk_chain(self._state.tl.log, slot, last, num, self._release_is_due)
        rolled = recs["kind"] == _ROLL
        if rolled.any():
            normal, parked = take_rows(recs, ~rolled), take_rows(recs, rolled)
        else:
            normal, parked = recs, recs[:0]
        return slot_run(normal, slot), parked, problems

    def _roll(self, due: list[TimerRecord], now: int) -> None:
        """Re-append parked messages (a fresh CommitLog copy each hop, so old
        segments can be retired) and queue them for linking at their next slot.
        One batched read and one batched encode for the whole fired slot."""
        st = self._state
        msgs: list[formats.Message] = []
        kept: list[TimerRecord] = []
        for rec, msg in zip(due, st.cl.read_many([r.cl_pos for r in due]), strict=True):
            if not isinstance(msg, formats.Message) or msg.seq != rec.seq:
                why = msg if isinstance(msg, CorruptData) else "not the timer's message"
                st.quarantine("commitlog", rec.cl_pos, f"roll of seq {rec.seq}: {why}")
                continue
            msgs.append(msg)
            kept.append(rec)
        if not msgs:
            return
        rolls = [min(m.roll_count + 1, 0xFFFF) for m in msgs]
        buf, offsets, sizes = formats.encode_messages(
            formats.RecordType.ROLL,
            [m.seq for m in msgs],
            [m.deliver_at_ms for m in msgs],
            [m.accepted_ms for m in msgs],
            [m.epoch for m in msgs],
            [m.topic_id for m in msgs],
            rolls,
            [m.key.encode() for m in msgs],
            [m.headers for m in msgs],
            [m.body for m in msgs],
            [m.replaces_seq for m in msgs],
            [
                m.origin_pos if m.type is formats.RecordType.ROLL else r.cl_pos
                for m, r in zip(msgs, kept, strict=True)
            ],
        )
        base = st.cl.append(buf, now)
        st.enqueue_q.put(  # linked by the link stage; a failed link retries them
            pending_batch(
                offsets + base,
                sizes,
                [m.seq for m in msgs],
                [m.topic_id for m in msgs],
                [m.deliver_at_ms for m in msgs],
                rolls,
            )
        )
        st.counters["rolled"] += len(msgs)
