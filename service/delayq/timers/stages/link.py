"""The link stage: queued messages into the wheel.

For each batch from the enqueue queue: write TimerLog records, then point
wheel slots at them (records first, so a crash never leaves a slot pointing at
nothing). Vectorised: the batch is grouped by slot and each group chained onto
its slot's current head. Messages of slots about to fire are also kept in
memory (the *near rows*), so firing such a slot needs no chain walk; messages
linked into a slot that already fired go straight to the release buffer.

An entry leaves the queue only after its link was written, so a failed link
retries exactly what failed. Not thread-safe: the shard's lock is held.
"""

from __future__ import annotations

import collections
import logging
from typing import Protocol

import numpy as np

from ...batchops import join_rows, take_rows
from ...clock import Clock
from ...formats.timer import RECORD_DTYPE as TIMER_DTYPE
from ...formats.timer import TIMER_RECORD_SIZE
from ...formats.timer import encode_many as encode_timers
from ...role import Role
from ...settings import EngineSettings
from ...store.timerlog import TimerLog
from ...store.wheel import TimerWheel
from ..memory.enqueue import PENDING_DTYPE, EnqueueQueue
from ..memory.releasebuffer import ReleaseBuffer, due_run, slot_run
from ..office import Office
from ..timingwheel import group_by_slot, kinds, plan
from ..tuning import ENQUEUE_BATCH, NEAR_SLOTS
from ..wakeups import Wakeups

__all__ = ["LinkState", "Linker", "NearRows"]

log = logging.getLogger("delayq.engine")


class LinkState(Protocol):
    """What the link stage uses of the shard's state."""

    clock: Clock
    counters: collections.Counter[str]
    enqueue_q: EnqueueQueue
    fill_bound: int
    office: Office
    release: ReleaseBuffer
    scan_cursor: int
    settings: EngineSettings
    wakeups: Wakeups

    @property
    def tl(self) -> TimerLog: ...

    @property
    def wheel(self) -> TimerWheel: ...

    def pending(self, seqs: np.ndarray) -> np.ndarray: ...


class NearRows:
    """Slot -> the pending rows linked into it, for slots within ``NEAR_SLOTS``
    of the scan; at most ``limit`` rows in all. Volatile: a slot whose rows here
    are not all of its chain (linked before a restart, before it came near, while
    memory was full, or holding a parked ROLL) is walked instead."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._slots: dict[int, list[np.ndarray]] = {}
        self.count = 0

    def keep(
        self,
        todo: np.ndarray,
        inside: np.ndarray,
        groups: tuple[np.ndarray, np.ndarray, np.ndarray],
        cursor: int,
    ) -> None:
        """Keep the rows of messages just linked into slots that fire soon (``todo``
        ordered by slot; ``groups``: its distinct slots, ascending, with where each
        one's rows start and how many there are)."""
        uniq, starts, counts = groups
        first, end = np.searchsorted(uniq, (cursor, cursor + NEAR_SLOTS)).tolist()
        if first == end:
            return
        lo, hi = int(starts[first]), int(starts[end - 1] + counts[end - 1])
        if self.count + hi - lo > self._limit:
            return
        rows = todo[lo:hi].copy()  # not a view: the far rows of the batch are not kept
        whole = bool(inside[lo:hi].all())  # else a ROLL shares a slot: keep only the others
        spans = (uniq[first:end].tolist(), starts[first:end].tolist(), counts[first:end].tolist())
        for slot, start, count in zip(*spans, strict=True):
            part = rows[start - lo : start - lo + count]
            if not whole and not inside[start : start + count].all():
                continue
            self._slots.setdefault(slot, []).append(part)
            self.count += count

    def take(self, slot: int) -> list[np.ndarray]:
        """Remove and return a slot's rows (see ``as_run``)."""
        rows = self._slots.pop(slot, [])
        self.count -= sum(map(len, rows))
        return rows

    @staticmethod
    def as_run(rows: list[np.ndarray], slot: int, num: int) -> np.ndarray | None:
        """A slot's taken rows as a release run if they are its whole chain of
        ``num`` records, else None (the chain must be walked). Needs no lock."""
        if sum(map(len, rows)) != num:
            return None
        return slot_run(join_rows(rows, PENDING_DTYPE), slot)


class Linker:
    def __init__(self, state: LinkState) -> None:
        self._state = state
        self.near = NearRows(state.settings.release_buffer_messages)

    def step(self) -> bool:
        """Link up to one batch of queued entries into the wheel. False when idle."""
        st = self._state
        batch = st.enqueue_q.peek(ENQUEUE_BATCH)
        if batch is None:
            return False
        if st.office.index_limit is not None:  # sync replication: only what the in-sync set holds
            batch = batch[: int(np.searchsorted(batch["cl_pos"], st.office.index_limit))]
            if not len(batch):
                return False
        self._link(batch, st.clock.now_ms())  # raises before changing anything if it fails
        st.enqueue_q.drop(len(batch))  # only now: a retry redoes nothing that succeeded
        return True

    def help(self) -> None:
        """Link a batch on a scheduling caller's thread: locks are not fair, so a
        busy producer could starve the link thread. The caller's messages are
        accepted by then, so a failure must not fail its call: the batch stays
        queued and the link stage retries (and logs) it."""
        try:
            self.step()
        except Exception:
            log.debug("linking on a caller's thread failed; the link stage retries", exc_info=True)

    def _link(self, batch: np.ndarray, now: int) -> None:
        st = self._state
        s = st.settings
        pending = st.pending(batch["seq"])
        todo = batch if pending.all() else take_rows(batch, pending)  # read only below
        n = len(todo)
        if not n:
            return
        cursor = planned_from = st.scan_cursor
        if st.office.role is Role.REPLICA:
            # its scan trails (it fires only up to its master's last PROGRESS): planned
            # from there, a message its master linked in a slot would be parked as a
            # ROLL that only the master writes, and be lost on promotion. Plan from now,
            # as the master did, as far as the wheel's two windows allow.
            planned_from = max(cursor, min(now // s.precision_ms, cursor + s.window_slots))
        slots, inside, ref = plan(
            todo["deliver_at_ms"], now, planned_from, s.precision_ms, s.window_slots
        )
        order, uniq, starts, counts = group_by_slot(slots, ref)
        todo, slots, inside = take_rows(todo, order), slots[order], inside[order]
        first0, last0, num0 = st.wheel.read_many(uniq)
        pos0 = st.tl.log.reserve(n * TIMER_RECORD_SIZE, now)
        pos = pos0 + TIMER_RECORD_SIZE * np.arange(n, dtype=np.int64)
        recs = np.empty(n, dtype=TIMER_DTYPE)
        prev = np.empty(n, dtype=np.int64)
        prev[1:] = pos[:-1]
        prev[starts] = last0  # each group hangs off its slot's current head
        recs["prev"] = prev
        recs["slot"] = slots
        recs["cl_pos"] = todo["cl_pos"]
        recs["cl_size"] = todo["cl_size"]
        recs["topic_id"] = todo["topic_id"]
        recs["deliver_at_ms"] = todo["deliver_at_ms"]
        recs["seq"] = todo["seq"]
        rank = np.arange(n) - np.repeat(starts, counts)
        recs["chain_index"] = np.repeat(num0, counts) + rank
        recs["roll_count"] = todo["roll_count"]
        recs["kind"] = kinds(inside)
        st.tl.append(encode_timers(recs), now)  # records first, then the slots pointing at them
        nums = num0 + counts
        st.wheel.update_many(
            uniq, np.where(first0 >= 0, first0, pos[starts]), pos[starts + counts - 1], nums
        )
        st.fill_bound = max(st.fill_bound, int(nums.max()))
        self.near.keep(todo, inside, (uniq, starts, counts), cursor)
        late = slots < cursor  # slots that already fired: straight to release
        if late.any():
            st.release.push_run(due_run(take_rows(todo, late), slots[late]))
            st.wakeups.release.notify()
        st.counters["linked"] += n
