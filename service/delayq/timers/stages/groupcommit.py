"""Group commit: many callers waiting for durability share one fsync.

The first caller that finds its position not yet durable becomes the leader:
it asks ``prepare`` (under the engine's lock) for the current end and the
files to sync, fsyncs them without holding any lock, publishes the new durable
position and wakes everyone; callers already covered return, the rest elect the
next leader. No thread of its own.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

__all__ = ["GroupCommit"]


class GroupCommit:
    def __init__(self, prepare: Callable[[], tuple[int, list[int]]], durable: int) -> None:
        self._prepare = prepare
        self._cv = threading.Condition()  # guards _durable/_leader; never held during fsync
        self._durable = durable
        self._leader = False
        self.fsyncs = 0
        self.fsync_seconds = 0.0

    @property
    def durable(self) -> int:
        return self._durable

    def wait_durable(self, end: int) -> None:
        with self._cv:
            while self._durable < end:
                if self._leader:
                    self._cv.wait()
                    continue
                self._leader = True
                self._cv.release()
                try:
                    target = self._sync()
                finally:
                    self._cv.acquire()
                    self._leader = False
                self._durable = max(self._durable, target)
                self._cv.notify_all()

    def _sync(self) -> int:
        target, fds = self._prepare()
        start = time.perf_counter()  # real time (not the Clock's): fsync_seconds measures the disk
        for fd in fds:
            os.fsync(fd)
        self.fsync_seconds += time.perf_counter() - start
        self.fsyncs += 1
        return target
