"""What a schedule's firings are and are not (real files, a fake clock): a
client's message never stands for a firing; what a pause, update or delete
cancels; a firing dead-lettered whatever its body."""

from __future__ import annotations

from delayq import FakeClock
from delayq.engine import ScheduleRequest
from tests.support.engines import Make, drain, run_until
from tests.support.schedules import every, fired_times

SECOND = 1000


def test_a_client_dedup_id_shaped_like_a_firing_does_not_suppress_it(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine()
    start = clock.now_ms()
    made = e.create_schedule("tick", every(10 * SECOND))
    t1 = made.state.next_fire_ms
    [out] = e.schedule(
        [
            ScheduleRequest(
                topic="t",
                body=b"client",
                delay_ms=60_000,
                dedup_id=f"tick@{t1}",
                dedup_window_ms=3_600_000,
            )
        ]
    )
    assert out.error is None, out
    run_until(e, clock, start + 30 * SECOND + 1, step_ms=50)
    got = [m for m in drain(e) if m.body != b"client"]
    assert fired_times(got) == [start + k * 10 * SECOND for k in (1, 2, 3)]
    assert e.get_schedule("tick").state.fired == 3
