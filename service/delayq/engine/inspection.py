"""A look inside a running engine, for tests and tools (``Engine.inspect()``).

Read-mostly: it hands out the shard's live objects (files, stages), so whoever
holds it may read them; anything it changes must be done with ``lock`` held,
and only a test should. Not part of the stable API: names follow the code.
"""

from __future__ import annotations

import threading

from ..store.commitlog import CommitLog
from ..store.statemap import StateMap
from ..store.timerlog import TimerLog
from ..store.wheel import TimerWheel
from ..timers.memory.topics import TopicBook
from ..timers.pipeline import Stages
from ..timers.stages.scan import Fired
from ..timers.state import ShardState
from ..timers.wakeups import Wakeups

__all__ = ["Inspection"]


class Inspection:
    def __init__(self, state: ShardState, stages: Stages) -> None:
        self._state = state
        self._stages = stages

    @property
    def lock(self) -> threading.RLock:
        return self._state.wakeups.lock

    @property
    def wakeups(self) -> Wakeups:
        """What each stage waits for (``scan_blocked``, ``release_wake_ms``, ...)."""
        return self._state.wakeups

    @property
    def commitlog(self) -> CommitLog:
        return self._state.cl

    @property
    def timerlog(self) -> TimerLog:
        return self._state.tl

    @property
    def wheel(self) -> TimerWheel:
        return self._state.wheel

    @property
    def states(self) -> StateMap:
        return self._state.states

    @property
    def topics(self) -> TopicBook:
        """Topic names and ids, and per topic its counts."""
        return self._state.topics

    @property
    def next_seq(self) -> int:
        """The seq the next accepted message gets."""
        return self._state.next_seq

    @property
    def enqueue_queue_len(self) -> int:
        """Messages accepted and not yet linked into the wheel."""
        return len(self._state.enqueue_q)

    @property
    def threads(self) -> list[threading.Thread]:
        """The stages' threads (empty for an engine run with ``pump``)."""
        return self._stages.threads

    def read_chain(self, slot: int, last: int, num: int) -> Fired:
        """Walk a slot's chain as the scan does when the slot fires (no lock needed)."""
        return self._stages.scan.read_chain(slot, last, num)
