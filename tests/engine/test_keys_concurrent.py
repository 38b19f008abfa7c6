"""64 threads schedule one key at once, under each ``if_exists`` mode, on an
engine with its stage threads (real clock, messages due in an hour): a sampler
sees at most one pending message of the key at every look, and every caller is
told the id that stands (REJECT, KEEP) or, under REPLACE, exactly one caller's
message is left and every other was replaced."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from delayq import Engine, NotFound, SystemClock
from delayq.errors import AlreadyExists
from delayq.types import IfExists, KeyOutcome, ScheduleOutcome, ScheduleRequest
from tests.support.engines import small_settings

PRODUCERS = 64
HOUR = 3_600_000


@pytest.mark.parametrize("mode", [IfExists.REJECT, IfExists.KEEP, IfExists.REPLACE])
def test_concurrent_producers_of_one_key_leave_one_pending(tmp_path: Path, mode: IfExists) -> None:
    engine = Engine(small_settings(tmp_path / "data"), SystemClock()).start()
    try:
        start = threading.Barrier(PRODUCERS + 1)
        done = threading.Event()
        answers: list[ScheduleOutcome | None] = [None] * PRODUCERS
        samples: list[int] = []

        def produce(i: int) -> None:
            start.wait()
            req = ScheduleRequest(
                topic="t", body=b"p%d" % i, delay_ms=HOUR, key="order-42", if_exists=mode
            )
            [answers[i]] = engine.schedule([req])

        def sample() -> None:
            start.wait()
            while not done.is_set():
                try:
                    samples.append(len(engine.lookup_key("t", "order-42")))
                except NotFound:
                    samples.append(0)

        threads = [threading.Thread(target=produce, args=(i,)) for i in range(PRODUCERS)]
        sampler = threading.Thread(target=sample)
        for t in (*threads, sampler):
            t.start()
        for t in threads:
            t.join()
        done.set()
        sampler.join()
        assert samples and max(samples) <= 1, "two pending messages of one key at once"
        [standing] = [r.id for r in engine.lookup_key("t", "order-42")]
        got = [a for a in answers if a is not None]
        assert len(got) == PRODUCERS
        outcomes = [a.key_outcome for a in got]
        assert outcomes.count(KeyOutcome.NEW) == 1
        if mode is IfExists.REPLACE:
            assert outcomes.count(KeyOutcome.REPLACED) == PRODUCERS - 1
            assert len({a.id for a in got}) == PRODUCERS and standing in {a.id for a in got}
            assert engine.stats("t")[0].pending == 1
        else:
            assert {a.id for a in got} == {standing}, "every caller told the id that stands"
            if mode is IfExists.REJECT:
                assert outcomes.count(KeyOutcome.EXISTS) == PRODUCERS - 1
                assert all(isinstance(a.error, AlreadyExists) for a in got if a.key_outcome)
            else:
                assert outcomes.count(KeyOutcome.KEPT) == PRODUCERS - 1
    finally:
        engine.close()
