"""Waking receivers on the event loop when the engine releases messages.

Long-polling Receive and Subscribe calls wait here, on the loop, instead of
each holding a pool thread inside the engine: any number of them can wait, and
a release reaches them in one hop (engine thread -> loop) instead of two
(engine thread -> pool thread -> loop).

Invariant (no lost wake-up): a waiter counts itself in ``waiting`` and takes
the current ``generation`` *before* it looks for messages; the engine fires
after it made messages receivable. So either the look finds them, or the fire
sees the count and ends that generation, waking the waiter.
"""

from __future__ import annotations

import asyncio

__all__ = ["ReadySignal"]


class ReadySignal:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._generation = asyncio.Event()
        self.waiting = 0  # coroutines inside a waiting receive, from before their first look

    def generation(self) -> asyncio.Event:
        """The event the next fire sets (take it before looking for messages)."""
        return self._generation

    def fire(self) -> None:
        """Wake every waiter; called from any thread (an engine hook)."""
        if self.waiting:  # nobody waits: no cross-thread call for each release step
            self._loop.call_soon_threadsafe(self._next_generation)

    def _next_generation(self) -> None:
        ended, self._generation = self._generation, asyncio.Event()
        ended.set()
