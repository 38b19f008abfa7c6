"""ReadySignal: a fire from another thread wakes every coroutine waiting on the
generation it took, and costs nothing when none waits."""

from __future__ import annotations

import asyncio
import threading

from delayq.server.readysignal import ReadySignal


def test_a_fire_from_another_thread_wakes_every_waiter_of_that_generation() -> None:
    async def main() -> None:
        sig = ReadySignal(asyncio.get_running_loop())
        before = sig.generation()
        sig.fire()  # nobody counted as waiting: nothing is scheduled
        await asyncio.sleep(0.01)
        assert sig.generation() is before and not before.is_set()

        sig.waiting = 2
        taken = [sig.generation(), sig.generation()]
        waiters = [asyncio.create_task(ev.wait()) for ev in taken]
        await asyncio.sleep(0)
        threading.Thread(target=sig.fire).start()  # as the engine's release thread does
        async with asyncio.timeout(5):
            await asyncio.gather(*waiters)
        assert sig.generation() is not taken[0], "a new generation for later waiters"
        assert not sig.generation().is_set()

    asyncio.run(main())
