"""The one lock over a shard's state and the signals its stages wait on
(``Wakeups``): every stage holds the lock for its in-memory work and one
batched write, and waits on its own condition, so an event wakes only the stage
that has new work."""

from __future__ import annotations

import threading

__all__ = ["Wakeups"]


class Wakeups:
    """The one lock over a shard's state and the signals its stages wait on.

    One lock guards all in-memory state and every write to the files: the GIL
    serialises Python anyway, stages hold the lock for in-memory work and one
    batched write, and fsync runs outside it (group commit). Two reads run
    without it: the scan walking a fired slot's chain (records that never change)
    and a receive decoding the bodies it took. One condition per waiting stage,
    all on the one lock, so each event wakes only the thread that has new work
    (notify_all on one condition woke every stage)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()  # one lock for all state: see the class docstring
        self.link = threading.Condition(self.lock)
        self.scan = threading.Condition(self.lock)
        self.release = threading.Condition(self.lock)
        self.flush_soon = threading.Event()  # wakes the flush stage before its interval
        self.warm_soon = threading.Event()  # a log has a new warm tail to read in
        self.stopped = False  # set (lock held) when the stages are told to end
        # what each stage waits for, so that others know when to wake it (lock held)
        self.link_idle = False  # the link stage sleeps with nothing queued
        self.scan_blocked = False  # the scan waits for room in the release buffer
        self.scan_awaits_checkpoint = False  # the scan is at its horizon (timingwheel)
        # when the release stage next wakes (None: idle); read without the lock by
        # the chain walk, to let release run first once it is due (see chainwalk)
        self.release_wake_ms: int | None = None

    def stop(self) -> None:
        """Tell every stage to end (their threads are joined by ``pipeline``)."""
        with self.lock:
            self.stopped = True
            for cv in (self.link, self.scan, self.release):
                cv.notify_all()
        self.flush_soon.set()
        self.warm_soon.set()
