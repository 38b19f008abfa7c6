"""Recurring schedules on an engine whose stages run on their threads (the real
clock): pauses, resumes and updates from other threads, against the firer,
never fire a nominal time twice, nothing of a paused schedule fires while it
stays paused, and a deleted one fires nothing after its delete returns."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

from delayq import Engine
from delayq.recurrence.spec import CatchUp, MessageTemplate, ScheduleSpec
from tests.support.engines import drain, small_settings
from tests.support.schedules import by_schedule

SPEC = ScheduleSpec(MessageTemplate("t", b"x"), cron="* * * * * *", catch_up=CatchUp.ALL)
NAMES = [f"s{i}" for i in range(8)]


def test_calls_from_other_threads_against_the_firer_fire_no_time_twice(tmp_path: Path) -> None:
    e = Engine(small_settings(tmp_path / "data", precision_ms=50)).start()
    try:
        for name in NAMES:
            e.create_schedule(name, SPEC)
        failures: list[BaseException] = []
        stop = threading.Event()

        def churn(seed: int) -> None:
            rng = random.Random(seed)
            try:
                while not stop.is_set():
                    name = rng.choice(NAMES)
                    call = rng.choice(("pause", "resume", "update"))
                    if call == "pause":
                        e.pause_schedule(name)
                    elif call == "resume":
                        e.resume_schedule(name)
                    else:
                        e.update_schedule(name, SPEC)
                    time.sleep(rng.uniform(0, 0.05))
            except BaseException as exc:  # reported by the test, in its thread
                failures.append(exc)

        threads = [threading.Thread(target=churn, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        time.sleep(4)
        stop.set()
        for t in threads:
            t.join()
        assert not failures, failures
        e.pause_schedule(NAMES[0])
        e.delete_schedule(NAMES[1])
        got = drain(e)
        time.sleep(2.5)  # more firings of the others; none of these two
        later = drain(e)
        assert not any(m.key in NAMES[:2] for m in later)
        times = by_schedule(got + later)
        assert all(len(ts) == len(set(ts)) for ts in times.values()), "a time fired twice"
        assert set(times) == set(NAMES)
        assert e.observing.counters["early"] == 0
    finally:
        e.close()
