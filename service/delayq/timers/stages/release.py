"""The release stage: deliver each message at its exact millisecond.

Each step pops what is due from the release buffer, drops messages cancelled
meanwhile and second copies of one message, appends one DELIVER record per
message (referring to the body, no copy) and hands the messages to the
delivery side (``ports.Deliveries.deliver``), which indexes them in their
topics' ready queues. Then the state map marks them delivered and receivers
are woken. A step that fails puts everything it popped back and marks none of
it delivered: the retry delivers all of it. What can fail comes before the
DELIVER records (a full disk, a topic's first ready-queue file), so the retry
writes them once; a failure after them (out of memory while indexing) gives the
retry's second copies: at-least-once, never lost.

Rows of one topic, the firer's (``Firer.topic``: the recurring schedules'
plans, ``engine.firing``), are never delivered: the step hands them to the
firer, with the lock held, before it delivers the others, at most
``FIRE_BATCH`` a step (the others, and those the firer leaves, back in the
buffer, for the next steps: those it leaves due when it says); a
firer that raises fails the step as a failed delivery does (everything popped
goes back).

Only a master that may deliver (``Office.delivering``) releases (and fires); a
replica only prunes its buffer of what its master's records say is gone (see
``scan``), plans included, which it keeps like any pending message.

Not thread-safe: ``step`` runs with the shard's lock held.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Protocol

import numpy as np

from ... import formats
from ...batchops import take_rows
from ...clock import Clock
from ...formats.messagestate import MessageState
from ...role import Role
from ...store.commitlog import CommitLog
from ...store.statemap import StateMap
from ..deliveries import Deliveries
from ..memory.lateness import LatenessHistogram
from ..memory.releasebuffer import ReleaseBuffer
from ..memory.topics import TopicBook
from ..office import Office
from ..tuning import (
    FIRE_BATCH,
    RELEASE_BATCH,
    RELEASE_GATHER_AT,
    RELEASE_GATHER_S,
    REPLICA_PRUNE_MS,
)
from ..wakeups import Wakeups

__all__ = ["Firer", "ReleaseState", "Releaser"]


class ReleaseState(Protocol):
    """What the release stage uses of the shard's state."""

    clock: Clock
    counters: collections.Counter[str]
    lateness: LatenessHistogram
    office: Office
    release: ReleaseBuffer
    topics: TopicBook
    wakeups: Wakeups

    @property
    def cl(self) -> CommitLog: ...

    @property
    def states(self) -> StateMap: ...

    def pending(self, seqs: np.ndarray) -> np.ndarray: ...


class Firer(Protocol):
    """What takes the due rows of one topic instead of delivery (``engine.firing``)."""

    topic: str
    """The topic whose rows it takes (never delivered)."""

    def fire(self, rows: np.ndarray, now: int) -> np.ndarray:
        """Act on these due, pending rows (release-buffer rows, by due time), lock
        held; return those it left (back in the buffer, due at their
        ``deliver_at_ms``: at once, or later when it must wait); raise to have them
        all (and the step's others) back."""


class Releaser:
    def __init__(
        self,
        state: ReleaseState,
        deliveries: Deliveries,
        on_released: Callable[[], None],
        firer: Firer | None = None,
    ) -> None:
        self._state = state
        self._deliveries = deliveries
        self._on_released = on_released
        self._firer = firer
        self._released_last = 0  # messages the last step delivered

    def next_ms(self) -> int | None:
        """When the next message is due (None: nothing buffered)."""
        st = self._state
        if not st.office.delivering():
            st.wakeups.release_wake_ms = None
            if st.office.role is Role.REPLICA and len(st.release):
                return st.clock.now_ms() + REPLICA_PRUNE_MS
            return None  # woken by a promotion or a renewed lease
        st.wakeups.release_wake_ms = due = st.release.next_due_ms()
        return due

    def gather_s(self) -> float:
        """The pause after a step: in a burst (a big step) gather a millisecond."""
        return RELEASE_GATHER_S if self._released_last >= RELEASE_GATHER_AT else 0.0

    def is_due(self) -> bool:
        """Whether the release stage is past its wake-up time (it is waiting for the
        GIL or the lock). Read without the lock: a stale answer costs one nap or one
        forced switch, nothing else."""
        wake = self._state.wakeups.release_wake_ms
        return wake is not None and wake <= self._state.clock.now_ms()

    def step(self) -> bool:
        """Deliver everything due now. False when nothing was due."""
        st = self._state
        now = st.clock.now_ms()
        if not st.office.delivering():
            if st.office.role is Role.REPLICA:
                self._prune(now)
            return False
        due = st.release.pop_due(now, RELEASE_BATCH)
        if not len(due):
            return False
        if st.wakeups.scan_blocked:  # room now; only then: a wake-up per step costs the GIL
            st.wakeups.scan.notify()
        live = take_rows(due, st.pending(due["seq"]))
        # cancelled while waiting, or another copy was (or is being) delivered. Copies
        # of one message share its due time, and pop_due sorts by (due, seq): they
        # are neighbours, so one comparison finds them and the due order is kept.
        seq = live["seq"]
        repeat = seq[1:] == seq[:-1]
        if repeat.any():
            live = take_rows(live, np.concatenate(([True], ~repeat)))
        self._released_last = len(live)
        if not len(live):
            return True

        try:
            live = self._fire(live, now)
            if not len(live):
                return True
            staged = self._deliveries.stage(live, now)
            st.cl.append(formats.encode_delivers(live, now), now)
            by_topic = staged.index()
        except BaseException:
            st.release.push_run(due)  # none is marked delivered: all of it again on the retry
            raise
        for tid, rows in by_topic:
            st.topics.delivered(tid, rows["deliver_at_ms"])
        st.states.set_many(live["seq"], MessageState.DELIVERED)
        if early := st.lateness.add(now - live["deliver_at_ms"]):
            st.counters["early"] += early  # must never happen; counted so tests see it
        st.counters["delivered"] += len(live)
        self._on_released()
        return True

    def _fire(self, live: np.ndarray, now: int) -> np.ndarray:
        """Hand the firer's rows to it; the others, to deliver."""
        firer = self._firer
        if firer is None:
            return live
        tid = self._state.topics.ids.get(firer.topic)
        if tid is None:
            return live
        mine = live["topic_id"] == tid
        if not mine.any():
            return live
        rows = take_rows(live, mine)
        left = firer.fire(rows[:FIRE_BATCH], now)
        self._state.release.push_run(left)  # next steps: the lock let go
        self._state.release.push_run(rows[FIRE_BATCH:], True)
        return take_rows(live, ~mine)

    def _prune(self, now: int) -> None:
        """A replica's release buffer: drop what its master delivered or a cancel
        took (their records came in), keep the rest for a promotion."""
        st = self._state
        due = st.release.pop_due(now, len(st.release))
        keep = take_rows(due, st.pending(due["seq"]))
        if len(keep):
            st.release.push_run(keep, True)
