"""Recurring schedules moved by a rebalance (``timers.rebalance.transfer``): an
import copies what delayq wrote itself as it is, though a client's schedule may
not have it: a plan message of the reserved topic ``_schedules``, a firing with
an empty body and the firing headers (``timers.columns.prepare_copy``); a client
still may not schedule either (real files, a fake clock; a schedule moved and
firing on: ``tests/engine/test_schedules.py``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from delayq import Engine, FakeClock, InvalidArgument, Unavailable
from delayq.engine import ImportRow
from delayq.formats.headers import encode_headers
from delayq.formats.imports import MOVED_FROM
from delayq.recurrence import SCHEDULE_HEADER, SCHEDULE_TIME_HEADER
from delayq.recurrence.spec import CatchUp
from delayq.recurrence.states import MAX_LEAD_MS
from delayq.timers.columns import Columns, Prepared
from tests.support.engines import START_MS, drain, req, run_until, small_settings
from tests.support.schedules import every, fired_times

PLANS = "_schedules"
FIRING = {"h": "v", SCHEDULE_HEADER: "daily", SCHEDULE_TIME_HEADER: str(START_MS + 60_000)}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START_MS)


def shard(tmp: Path, clock: FakeClock, n: int) -> Engine:
    return Engine(small_settings(tmp / f"s{n}", shard=n), clock, background=False).start()


def written_by_delayq(e: Engine, topic: str, headers: dict[str, str], body: bytes) -> str:
    """A message as the firer writes one: straight to the accept stage."""
    now = e.clock.now_ms()
    row = Prepared(topic, now + 60_000, b"daily", encode_headers(headers), body)
    with e._life.held() as sh:
        [mid], _, _, _ = sh.accept.accept(Columns.of([row]), now)
    assert mid is not None
    return mid


def test_an_import_copies_a_plan_and_a_firing_as_delayq_wrote_them(
    tmp_path: Path, clock: FakeClock
) -> None:
    src, dst = shard(tmp_path, clock, 0), shard(tmp_path, clock, 1)
    try:
        plan = written_by_delayq(src, PLANS, {}, b'{"v": 1}')
        firing = written_by_delayq(src, "ticks", FIRING, b"")
        rows = []
        for mid in (plan, firing):
            m = src.lookup(mid)
            rows.append(ImportRow(mid, m.topic, m.body, m.deliver_at_ms, m.key, m.headers))
        copies = dst.moving.import_messages(rows)
        assert all(isinstance(c, str) for c in copies), copies
        moved_plan, moved_firing = (dst.lookup(str(c)) for c in copies)
        assert (moved_plan.topic, moved_plan.key, moved_plan.body) == (PLANS, "daily", b'{"v": 1}')
        assert (moved_firing.topic, moved_firing.body) == ("ticks", b"")
        assert moved_firing.headers == {**FIRING, MOVED_FROM: firing}
        assert moved_firing.deliver_at_ms == START_MS + 60_000
        again = dst.reschedule(str(copies[1]), delay_ms=90_000)  # a copy again: kept
        assert dst.lookup(again.id).headers == FIRING
        for bad, field in (
            (req(1000, b"x", topic=PLANS), "topic"),
            (req(1000, b"x", topic="ticks", headers=FIRING), "headers"),
            (req(1000, b"", topic="ticks"), "body"),
        ):
            [out] = dst.schedule([bad])
            assert isinstance(out.error, InvalidArgument) and out.error.field == field, out
    finally:
        src.close()
        dst.close()


def test_a_schedule_handed_over_is_unavailable_not_gone(tmp_path: Path, clock: FakeClock) -> None:
    """A rebalance's pass released the plan to shard 1 before the map switches:
    every call on the name at the old shard is "try again" (Unavailable), never
    NotFound (an operator would take the schedule as gone) nor AlreadyExists."""
    src, dst = shard(tmp_path, clock, 0), shard(tmp_path, clock, 1)
    try:
        src.create_schedule("tick", every(10_000))
        pid = src.get_schedule("tick").id
        m = src.lookup(pid)
        src.moving.release([pid], target=1)
        [copy] = dst.moving.import_messages(
            [ImportRow(pid, m.topic, m.body, m.deliver_at_ms, m.key, m.headers)]
        )
        assert isinstance(copy, str)
        calls: list[Callable[[], object]] = [
            lambda: src.get_schedule("tick"),
            lambda: src.pause_schedule("tick"),
            lambda: src.resume_schedule("tick"),
            lambda: src.update_schedule("tick", every(5_000)),
            lambda: src.delete_schedule("tick"),
            lambda: src.next_firings("tick"),
            lambda: src.create_schedule("tick", every(10_000)),
        ]
        for call in calls:
            with pytest.raises(Unavailable, match="moving to shard 1"):
                call()
        assert dst.get_schedule("tick").spec == every(10_000)
    finally:
        src.close()
        dst.close()


@pytest.mark.parametrize("gap_s", [5, 120])
def test_an_imported_plan_misses_the_times_of_a_long_gap_before_its_import(
    tmp_path: Path, clock: FakeClock, gap_s: int
) -> None:
    """A plan released by its old shard and imported ``gap_s`` later (a job
    killed between the two and run again): the times of the gap up to the
    longest lead before the import were missed (no shard could fire them:
    ``none`` skips them), those after fire late; a prompt import fires them all."""
    src, dst = shard(tmp_path, clock, 0), shard(tmp_path, clock, 1)
    try:
        made = src.create_schedule("tick", every(1_000, catch_up=CatchUp.NONE))
        first = made.state.next_fire_ms
        m = src.lookup(made.id)
        src.moving.release([made.id], target=1)
        clock.advance(gap_s * 1_000)
        imported = clock.now_ms()
        rows = [ImportRow(made.id, m.topic, m.body, m.deliver_at_ms, m.key, m.headers)]
        assert all(isinstance(c, str) for c in dst.moving.import_messages(rows))
        run_until(dst, clock, imported + 200, step_ms=50)
        got = fired_times(drain(dst))
        since = max(first, imported - MAX_LEAD_MS)
        assert got == list(range(since, imported + 1, 1_000))
        assert dst.get_schedule("tick").state.missed == (since - first) // 1_000
        counters = dst.observing.counters
        assert (counters["imported"], counters["scheduled"]) == (1, 0)
    finally:
        src.close()
        dst.close()
