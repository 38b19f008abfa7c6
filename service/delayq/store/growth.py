"""``LogGrowth``: a log tells its readers when it grows (the replication stream
awaits it instead of looking for new records on a timer).

The writer calls ``notify`` after each append (in an engine thread, under the
shard's lock); a reader on an asyncio loop awaits ``wait(past, timeout_s)``, which
returns once the log's end passes ``past``, at any ``notify`` (anyone may call it
when something else a reader watches changed: a role, a shutdown), or at the
timeout. The hand-off to the reader's loop is ``loop.call_soon_threadsafe``
setting the reader's own ``asyncio.Event``.

Invariants: no wake-up is lost (a reader registers before it reads the end; the
writer moves the end before it looks for readers, so one of them sees the other);
a waiter is woken once per registration (``notify`` takes the whole set, so a
burst of appends costs one hand-off per waiting reader, not one per append); with
no reader waiting an append costs one truth test; a wait that ends in any way
(woken, timed out, cancelled) leaves no waiter behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable

__all__ = ["LogGrowth"]

_Waiter = tuple[asyncio.AbstractEventLoop, asyncio.Event]


class LogGrowth:
    def __init__(self, end: Callable[[], int]) -> None:
        """``end``: the log's end as readers see it (read without the writer's lock)."""
        self._end = end
        self._lock = threading.Lock()  # guards _waiters; never held while waking
        self._waiters: set[_Waiter] = set()

    @property
    def waiting(self) -> int:
        """Readers waiting now."""
        return len(self._waiters)

    def notify(self) -> None:
        """Wake every waiting reader (from any thread)."""
        if not self._waiters:  # no one listens: an append pays this test only
            return
        with self._lock:
            waiters, self._waiters = self._waiters, set()
        for loop, event in waiters:
            with contextlib.suppress(RuntimeError):  # its loop closed: nobody to wake
                loop.call_soon_threadsafe(event.set)

    async def wait(self, past: int, timeout_s: float) -> None:
        """Return once the log's end is past ``past``, at a ``notify``, or after
        ``timeout_s``, whichever comes first (the caller looks again either way)."""
        waiter = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            self._waiters.add(waiter)
        try:
            if self._end() > past:  # grew before this reader registered
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, timeout_s)):
                    await waiter[1].wait()
        finally:
            with self._lock:
                self._waiters.discard(waiter)
