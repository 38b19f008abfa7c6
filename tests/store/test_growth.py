"""``store.growth.LogGrowth``: a reader on an asyncio loop is woken by a writer's
``notify`` from another thread, never misses growth that came before it
registered, and leaves no waiter behind however its wait ends. Every wait here
has a long timeout (``LONG_S``) and the test a shorter bound: a wake-up that did
not come fails the test instead of passing at the timeout."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any

from delayq.store.growth import LogGrowth

LONG_S = 120.0  # a wait's own timeout: never reached when the wake-up comes
BOUND_S = 60.0  # the test's bound on a wait that a wake-up must end


class _Log:
    """A log end moved by a writer thread."""

    def __init__(self) -> None:
        self.end = 0
        self.growth = LogGrowth(lambda: self.end)

    def append_later(self, n: int = 1) -> threading.Thread:
        """Append ``n`` bytes from another thread once some reader waits."""

        def run() -> None:
            while not self.growth.waiting:
                threading.Event().wait(0.001)
            self.end += n
            self.growth.notify()

        t = threading.Thread(target=run)
        t.start()
        return t


def _bounded(work: Coroutine[Any, Any, None]) -> None:
    async def run() -> None:
        await asyncio.wait_for(work, BOUND_S)

    asyncio.run(run())


def test_an_append_in_another_thread_wakes_a_waiting_reader() -> None:
    log = _Log()

    async def read() -> None:
        t = log.append_later()
        await log.growth.wait(0, LONG_S)
        assert log.end == 1
        t.join()

    _bounded(read())
    assert log.growth.waiting == 0


def test_growth_before_the_wait_is_not_missed() -> None:
    log = _Log()
    log.end = 10  # appended (and notified) while no reader waited

    async def read() -> None:
        await log.growth.wait(5, LONG_S)

    _bounded(read())
    assert log.growth.waiting == 0


def test_a_notify_without_growth_wakes_the_reader_too() -> None:
    """(The node calls it when a role or a shutdown changes what a stream does.)"""
    log = _Log()

    async def read() -> None:
        waiter = asyncio.create_task(log.growth.wait(0, LONG_S))
        while not log.growth.waiting:
            await asyncio.sleep(0.001)
        log.growth.notify()
        await waiter

    _bounded(read())
    assert log.growth.waiting == 0 and log.end == 0


def test_one_append_wakes_every_reader_on_every_loop() -> None:
    log = _Log()
    loops, readers, woken = 3, 6, []
    ready = threading.Barrier(loops + 1)

    def reader() -> None:  # three loops in threads of their own, two readers each
        async def two() -> None:
            waits = [asyncio.create_task(log.growth.wait(0, LONG_S)) for _ in range(2)]
            await asyncio.sleep(0)  # both registered
            ready.wait()
            await asyncio.gather(*waits)
            woken.extend([1, 1])

        _bounded(two())

    threads = [threading.Thread(target=reader) for _ in range(loops)]
    for t in threads:
        t.start()
    ready.wait(timeout=BOUND_S)
    assert log.growth.waiting == readers
    log.end += 1
    log.growth.notify()
    for t in threads:
        t.join(BOUND_S)
    assert len(woken) == readers and log.growth.waiting == 0


def test_a_cancelled_wait_leaves_no_waiter_behind() -> None:
    log = _Log()

    async def read() -> None:
        waiter = asyncio.create_task(log.growth.wait(0, LONG_S))
        while not log.growth.waiting:
            await asyncio.sleep(0.001)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        assert waiter.cancelled()

    _bounded(read())
    assert log.growth.waiting == 0
    log.growth.notify()  # nobody to wake: nothing happens


def test_a_timed_out_wait_leaves_no_waiter_behind() -> None:
    log = _Log()

    async def read() -> None:
        await log.growth.wait(0, 0.01)

    _bounded(read())
    assert log.growth.waiting == 0 and log.end == 0


def test_a_notify_after_a_readers_loop_closed_is_harmless() -> None:
    """(A waiter left on a loop that closed under it: a stopped server's.)"""
    log = _Log()
    loop = asyncio.new_event_loop()
    stuck = loop.create_task(log.growth.wait(0, LONG_S))
    loop.run_until_complete(asyncio.sleep(0))  # registered, then its loop goes
    loop.close()
    assert log.growth.waiting == 1
    log.growth.notify()  # must not raise
    assert log.growth.waiting == 0  # taken by the notify
    del stuck
