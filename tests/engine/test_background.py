"""The engine with its stage threads on the real clock: a burst whose slot is
walked without the engine lock while cancels and a consumer run beside it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from delayq import Engine, SystemClock
from delayq.engine import CancelOutcome, ScheduleBatch
from tests.support.engines import small_settings


def test_a_burst_with_racing_cancels_delivers_exactly_the_rest_never_early(
    tmp_path: Path,
) -> None:
    engine = Engine(small_settings(tmp_path / "data"), SystemClock()).start()
    try:
        at = time.time_ns() // 1_000_000 + 1500
        dues = [at + i % 300 for i in range(30_000)]  # ~100 per ms across three slots
        ids: list[str] = []
        for i in range(0, len(dues), 1000):
            out = engine.schedule_batch(
                ScheduleBatch(topic="t", bodies=[b"x"] * 1000, deliver_at_ms=dues[i : i + 1000])
            )
            ids += [m for m in out.ids if m is not None]
        assert len(ids) == len(dues)
        got: dict[str, int] = {}
        early: list[str] = []

        def consume() -> None:  # until everything is due and a receive comes back empty
            done = (max(dues) + 500) / 1000
            while True:
                batch = engine.receive_batch(
                    "t", "g", max_messages=1000, wait_ms=100, auto_ack=True
                )
                if not batch.ids and time.time() > done:
                    return
                now = time.time_ns() // 1_000_000
                for mid, due in zip(batch.ids, batch.deliver_at_ms, strict=True):
                    got[mid] = due
                    if due > now:
                        early.append(mid)

        consumer = threading.Thread(target=consume)
        consumer.start()
        # cancel every other message while the first slot is fired and released
        time.sleep(max(0.0, (at - 40) / 1000 - time.time()))
        victims = ids[::2]
        outcomes = []
        for i in range(0, len(victims), 500):
            outcomes += engine.cancel(victims[i : i + 500])
        consumer.join()
        cancelled = {
            v for v, o in zip(victims, outcomes, strict=True) if o is CancelOutcome.CANCELLED
        }
        # a cancel that lost the race is reported as delivered, never silently dropped
        late = {
            v
            for v, o in zip(victims, outcomes, strict=True)
            if o is CancelOutcome.ALREADY_DELIVERED
        }
        assert cancelled | late == set(victims)
        assert not early
        assert set(got) == (set(ids) - cancelled), "exactly the messages not cancelled"
        assert engine.observing.counters["early"] == 0
    finally:
        engine.close()
