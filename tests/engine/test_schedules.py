"""Recurring schedules on the engine (real files, a fake clock): the calls
(create, get, list by pages, update, pause, resume, delete, next firings) and
their errors naming the field; firings at each nominal time as ordinary
messages (key, headers, due with a deterministic jitter); nothing fires after a
pause, a delete or an update of what it replaced; each catch-up policy after the
engine was closed for a while."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench.compaction import compact

from delayq import Engine, FakeClock, InvalidArgument, NotFound
from delayq.engine import ImportRow, ReleaseOutcome, ScheduleRequest
from delayq.errors import AlreadyExists
from delayq.recurrence.plans import jitter_of
from delayq.recurrence.spec import CatchUp, MessageTemplate, ScheduleSpec
from delayq.recurrence.states import lead_of
from delayq.timers.stages import release
from tests.support.engines import START_MS, Make, drain, ids, req, run_until, small_settings
from tests.support.schedules import by_schedule, every, fired_times

SECOND = 1000
HOUR = 3_600_000
DAY = 86_400_000


def test_create_get_and_next_firings(make_engine: Make, clock: FakeClock) -> None:
    e = make_engine()
    now = clock.now_ms()
    made = e.create_schedule("tick", every(10 * SECOND))
    assert made.name == "tick" and made.spec == every(10 * SECOND)
    assert made.state.next_fire_ms == now + 10 * SECOND
    assert (made.state.fired, made.state.missed, made.state.paused) == (0, 0, False)
    assert e.get_schedule("tick") == made
    assert e.next_firings("tick", 3) == [now + k * 10 * SECOND for k in (1, 2, 3)]
    assert e.observing.schedules() == 1


def test_a_taken_name_is_already_exists_and_an_unknown_one_not_found(make_engine: Make) -> None:
    e = make_engine()
    made = e.create_schedule("tick", every(10 * SECOND))
    with pytest.raises(AlreadyExists) as taken:
        e.create_schedule("tick", every(5 * SECOND))
    assert taken.value.field == "name" and taken.value.id == made.id
    assert e.get_schedule("tick").spec == every(10 * SECOND)
    for call in (
        lambda: e.get_schedule("nope"),
        lambda: e.delete_schedule("nope"),
        lambda: e.pause_schedule("nope"),
        lambda: e.resume_schedule("nope"),
        lambda: e.update_schedule("nope", every(SECOND)),
        lambda: e.next_firings("nope"),
    ):
        with pytest.raises(NotFound) as missing:
            call()
        assert missing.value.field == "name"


@pytest.mark.parametrize(
    ("name", "spec", "field"),
    [
        ("bad name", every(SECOND), "name"),
        ("_schedules", every(SECOND), "name"),
        ("ok", ScheduleSpec(MessageTemplate("t", b"x"), cron="61 * * * *"), "spec.cron"),
        (
            "ok",
            ScheduleSpec(MessageTemplate("t", b"x"), cron="* * * * *", every_ms=1000),
            "spec.cron",
        ),
        ("ok", ScheduleSpec(MessageTemplate("t", b"x"), every_ms=10), "spec.every_ms"),
        (
            "ok",
            ScheduleSpec(MessageTemplate("t", b"x"), cron="0 * * * *", time_zone="Mars/Base"),
            "spec.time_zone",
        ),
        (
            "ok",
            ScheduleSpec(MessageTemplate("_schedules", b"x"), every_ms=1000),
            "spec.template.topic",
        ),
        (
            "ok",
            ScheduleSpec(MessageTemplate("t", b"x", {"delayq-schedule": "x"}), every_ms=1000),
            "spec.template.headers",
        ),
    ],
)
def test_bad_specs_are_refused_naming_the_field(
    make_engine: Make, name: str, spec: ScheduleSpec, field: str
) -> None:
    e = make_engine()
    with pytest.raises(InvalidArgument) as bad:
        e.create_schedule(name, spec)
    assert bad.value.field == field
    assert e.list_schedules().schedules == []


@pytest.mark.parametrize("header", ["delayq-schedule", "delayq-schedule-time"])
def test_a_client_may_not_set_the_firing_headers(make_engine: Make, header: str) -> None:
    e = make_engine()
    [out] = e.schedule([req(10, headers={header: "x"})])
    assert isinstance(out.error, InvalidArgument) and out.error.field == "headers"
    assert header in str(out.error)


def test_the_plans_topic_is_refused_to_clients(make_engine: Make) -> None:
    e = make_engine()
    e.create_schedule("tick", every(10 * SECOND))
    [out] = e.schedule([ScheduleRequest(topic="_schedules", body=b"x")])
    assert isinstance(out.error, InvalidArgument) and out.error.field == "topic"
    with pytest.raises(InvalidArgument):
        e.receive("_schedules", "g")
    with pytest.raises(InvalidArgument):
        e.lookup_key("_schedules", "tick")


def test_list_pages_by_name_and_shows_only_schedules(make_engine: Make) -> None:
    e = make_engine()
    names = [f"s{i:02d}" for i in range(25)]
    for name in reversed(names):
        e.create_schedule(name, every(60 * SECOND))
    ids(e.schedule([req(5000, key="s05"), req(5000, topic="other", key="x")]))  # keyed others
    seen: list[str] = []
    after = ""
    pages = 0
    while True:
        page = e.list_schedules(limit=10, after=after)
        seen += [s.name for s in page.schedules]
        pages += 1
        if not page.next_after:
            break
        after = page.next_after
    assert seen == names and pages == 3
    assert e.list_schedules(limit=100).schedules == [e.get_schedule(n) for n in names]
    with pytest.raises(InvalidArgument) as bad:
        e.list_schedules(limit=0)
    assert bad.value.field == "limit"


def test_each_nominal_time_fires_once_as_a_message(make_engine: Make, clock: FakeClock) -> None:
    e = make_engine()
    start = clock.now_ms()
    spec = every(10 * SECOND, headers={"h": "v"}, body=b"ping")
    e.create_schedule("tick", spec)
    run_until(e, clock, start + 60 * SECOND + 1, step_ms=50)
    got = drain(e)
    nominal = [start + k * 10 * SECOND for k in range(1, 7)]
    assert fired_times(got) == nominal
    for m, t in zip(got, nominal, strict=True):
        assert (m.topic, m.key, m.body, m.deliver_at_ms) == ("t", "tick", b"ping", t)
        assert m.headers["h"] == "v" and m.headers["delayq-schedule"] == "tick"
        assert m.headers["delayq-schedule-time"] == str(t)
    state = e.get_schedule("tick").state
    assert (state.fired, state.missed, state.last_fire_ms) == (6, 0, nominal[-1])
    assert state.next_fire_ms == nominal[-1] + 10 * SECOND
    assert e.observing.counters["schedule_firings"] == 6
    assert e.observing.counters["early"] == 0
    assert e.observing.schedule_lateness_snapshot().percentile(0.99) == 0  # written ahead


def test_a_firing_s_due_is_its_nominal_time_plus_a_fixed_jitter(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine()
    start = clock.now_ms()
    e.create_schedule("jit", every(10 * SECOND, jitter_ms=5 * SECOND))
    run_until(e, clock, start + 70 * SECOND, step_ms=50)
    got = drain(e)
    nominal = [start + k * 10 * SECOND for k in range(1, 7)]
    assert fired_times(got) == nominal
    dues = [m.deliver_at_ms for m in got]
    assert dues == [t + jitter_of("jit", t, 5 * SECOND) for t in nominal]
    assert len(set(d - t for d, t in zip(dues, nominal, strict=True))) > 1  # not all alike


def test_a_cron_schedule_fires_at_its_local_times(make_engine: Make, clock: FakeClock) -> None:
    e = make_engine()
    spec = ScheduleSpec(MessageTemplate("t", b"x"), cron="*/20 * * * * *")  # seconds 0, 20, 40
    made = e.create_schedule("cron", spec)
    first = made.state.next_fire_ms
    assert first % (20 * SECOND) == 0
    run_until(e, clock, first + 40 * SECOND + 1, step_ms=50)
    assert fired_times(drain(e)) == [first, first + 20 * SECOND, first + 40 * SECOND]


def test_an_empty_body_fires(make_engine: Make, clock: FakeClock) -> None:
    e = make_engine()
    start = clock.now_ms()
    e.create_schedule("empty", every(10 * SECOND, body=b""))
    run_until(e, clock, start + 10 * SECOND + 1, step_ms=50)
    [m] = drain(e)
    assert m.body == b"" and m.deliver_at_ms == start + 10 * SECOND


def test_pause_cancels_what_was_written_ahead_and_resume_catches_up(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine()
    start = clock.now_ms()
    e.create_schedule("tick", every(10 * SECOND, catch_up=CatchUp.LATEST))
    run_until(e, clock, start + 10 * SECOND - 200, step_ms=50)  # its firing is written
    paused = e.pause_schedule("tick")
    assert paused.state.paused and e.next_firings("tick") == []
    run_until(e, clock, start + 65 * SECOND, step_ms=100)
    assert drain(e) == []
    resumed = e.resume_schedule("tick")
    assert not resumed.state.paused
    run_until(e, clock, clock.now_ms() + 100, step_ms=50)
    # the latest missed one (60 s) at once, then on time again
    assert fired_times(drain(e)) == [start + 60 * SECOND]
    run_until(e, clock, start + 70 * SECOND + 1, step_ms=50)
    assert fired_times(drain(e)) == [start + 70 * SECOND]
    state = e.get_schedule("tick").state
    # 10 s was written and cancelled by the pause: not fired; 10..50 missed
    assert state.fired == 2 and state.missed == 5


def test_delete_fires_nothing_after_and_frees_the_name(make_engine: Make, clock: FakeClock) -> None:
    e = make_engine()
    start = clock.now_ms()
    e.create_schedule("tick", every(10 * SECOND))
    run_until(e, clock, start + 20 * SECOND - 300, step_ms=50)  # 10 fired, 20 written ahead
    e.delete_schedule("tick")
    with pytest.raises(NotFound):
        e.get_schedule("tick")
    run_until(e, clock, start + 60 * SECOND, step_ms=100)
    assert fired_times(drain(e)) == [start + 10 * SECOND]
    assert e.list_schedules().schedules == [] and e.observing.schedules() == 0
    e.create_schedule("tick", every(10 * SECOND))  # the name is free again
    assert e.get_schedule("tick").state.fired == 0


def test_update_recomputes_the_next_firing_and_drops_what_the_old_spec_wrote(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine()
    start = clock.now_ms()
    e.create_schedule("tick", every(10 * SECOND))
    run_until(e, clock, start + 10 * SECOND - 300, step_ms=50)  # 10 s written ahead
    moved = e.update_schedule("tick", every(10 * SECOND, topic="u", body=b"new"))
    at = clock.now_ms()
    assert moved.state.next_fire_ms == start + 10 * SECOND  # the anchor is kept
    assert moved.spec.template.topic == "u" and moved.state.created_ms == start
    run_until(e, clock, start + 20 * SECOND + 1, step_ms=50)
    assert drain(e, "t") == []  # the old spec's firing was cancelled
    assert fired_times(drain(e, "u")) == [start + 10 * SECOND, start + 20 * SECOND]
    assert moved.state.updated_ms == at
    cron = e.update_schedule("tick", ScheduleSpec(MessageTemplate("u", b"c"), cron="0 0 * * *"))
    assert cron.state.next_fire_ms % 86_400_000 == 0


@pytest.mark.parametrize(
    ("policy", "fired"),
    [(CatchUp.NONE, []), (CatchUp.LATEST, [60]), (CatchUp.ALL, [30, 40, 50, 60])],
)
def test_catch_up_after_the_engine_was_closed(
    make_engine: Make, clock: FakeClock, policy: CatchUp, fired: list[int]
) -> None:
    """Closed from 25 s to 65 s: 30..60 were missed; the window (36 s) reaches
    back to 30 s. (A schedule whose lead is under 5 s: none of them was written
    ahead before the close; see the next test for one that was.)"""
    assert lead_of("daily") < 5 * SECOND
    e = make_engine()
    start = clock.now_ms()
    e.create_schedule("daily", every(10 * SECOND, catch_up=policy, catch_up_window_ms=36 * SECOND))
    run_until(e, clock, start + 25 * SECOND, step_ms=50)
    before = fired_times(drain(e))
    assert before == [start + 10 * SECOND, start + 20 * SECOND]
    e.close()
    clock.advance(40 * SECOND)
    e = make_engine()
    run_until(e, clock, clock.now_ms() + 200, step_ms=50)
    assert fired_times(drain(e)) == [start + s * SECOND for s in fired]
    state = e.get_schedule("daily").state
    assert state.fired == 2 + len(fired) and state.missed == 4 - len(fired)
    assert e.observing.counters["schedule_missed"] == 4 - len(fired)
    run_until(e, clock, start + 70 * SECOND + 1, step_ms=50)
    assert fired_times(drain(e)) == [start + 70 * SECOND]


def test_firings_written_ahead_of_an_outage_are_delivered_after_it(
    make_engine: Make, clock: FakeClock
) -> None:
    """A schedule's lead (here 9.4 s) writes its firings ahead: those written
    before the engine closed are ordinary pending messages, delivered after it
    opens again, whatever the catch-up policy; the others were missed."""
    assert lead_of("tick") == 9400
    e = make_engine()
    start = clock.now_ms()
    e.create_schedule("tick", every(10 * SECOND, catch_up=CatchUp.NONE))
    run_until(e, clock, start + 25 * SECOND, step_ms=50)  # 30 s written ahead
    assert fired_times(drain(e)) == [start + 10 * SECOND, start + 20 * SECOND]
    e.close()
    clock.advance(40 * SECOND)
    e = make_engine()
    run_until(e, clock, clock.now_ms() + 200, step_ms=50)
    assert fired_times(drain(e)) == [start + 30 * SECOND]
    state = e.get_schedule("tick").state
    assert (state.fired, state.missed) == (3 + 1, 3)  # 40..60 missed; 70 written ahead


def test_plans_survive_a_restart_and_a_crash(make_engine: Make, clock: FakeClock) -> None:
    e = make_engine()
    start = clock.now_ms()
    for i in range(20):
        e.create_schedule(f"s{i}", every(2 * SECOND))
    e.create_schedule("paused", every(2 * SECOND))
    e.pause_schedule("paused")
    got = []
    for k in range(6):
        run_until(e, clock, start + (k + 1) * 5 * SECOND + 313 * k, step_ms=37)
        got += drain(e)
        if k % 2:
            e.close()
        else:
            e.abandon()
        e = make_engine()
    run_until(e, clock, start + 40 * SECOND + 1, step_ms=37)
    got += drain(e)
    assert by_schedule(got) == {
        f"s{i}": [start + k * 2 * SECOND for k in range(1, 21)] for i in range(20)
    }
    assert len({m.id for m in got}) == len(got)
    assert e.get_schedule("paused").state.paused
    assert len(e.list_schedules(limit=100).schedules) == 21


def test_a_paused_plan_parked_in_a_compaction_block_resumes(tmp_path: Path) -> None:
    """A paused plan waits a year ahead: it rolls, compaction puts it in a block,
    and it is found, kept across a restart and resumed from there."""
    clock = FakeClock(START_MS)
    settings = small_settings(
        tmp_path / "data", precision_ms=600_000, window_ms=2 * DAY, flush_interval_ms=HOUR
    )
    e = Engine(settings, clock, background=False).start()
    try:
        e.create_schedule("hourly", every(HOUR))
        run_until(e, clock, START_MS + 3 * HOUR + 1, step_ms=60_000)
        assert fired_times(drain(e)) == [START_MS + k * HOUR for k in (1, 2, 3)]
        e.pause_schedule("hourly")
        run_until(e, clock, START_MS + 5 * DAY, step_ms=600_000)  # it rolled
        assert compact(e, beyond_ms=7 * DAY, block_ms=DAY).get("blocked", 0) == 1
        e.close()
        e = Engine(settings, clock, background=False).start()
        assert e.get_schedule("hourly").state.paused
        resumed = e.resume_schedule("hourly")
        assert not resumed.state.paused
        at = clock.now_ms()
        run_until(e, clock, at + HOUR + 1, step_ms=60_000)
        # the latest missed hour at once, then the next one on time
        assert fired_times(drain(e)) == [START_MS + 5 * DAY, START_MS + 5 * DAY + HOUR]
        assert drain(e) == [] and e.observing.counters["early"] == 0
    finally:
        e.close()


def test_a_firing_rescheduled_by_key_keeps_its_marks(make_engine: Make, clock: FakeClock) -> None:
    e = make_engine()
    start = clock.now_ms()
    e.create_schedule("tick", every(10 * SECOND))
    run_until(e, clock, start + 10 * SECOND - 300, step_ms=50)  # 10 s written ahead
    [moved] = e.reschedule_key("t", "tick", delay_ms=5 * SECOND)
    assert moved.error is None
    run_until(e, clock, clock.now_ms() + 5 * SECOND + 1, step_ms=50)
    [m] = drain(e)
    assert m.id == moved.id and fired_times([m]) == [start + 10 * SECOND]


def test_a_rebalance_moves_a_plan_and_its_firings_and_they_fire_once(
    tmp_path: Path, clock: FakeClock
) -> None:
    """The plan and the firing written ahead, released by shard 0 and imported
    by shard 1 (the Spark job's steps): shard 1 fires on, each time once."""
    src = Engine(small_settings(tmp_path / "s0", shard=0), clock, background=False).start()
    dst = Engine(small_settings(tmp_path / "s1", shard=1), clock, background=False).start()
    try:
        start = clock.now_ms()
        src.create_schedule("tick", every(10 * SECOND))
        run_until(src, clock, start + 20 * SECOND - 300, step_ms=50)  # 20 s written ahead
        got = drain(src)
        moving = [src.get_schedule("tick").id] + [r.id for r in src.lookup_key("t", "tick")]
        rows = []
        for mid in moving:
            m = src.lookup(mid)
            rows.append(ImportRow(mid, m.topic, m.body, m.deliver_at_ms, m.key, m.headers))
        assert src.moving.release(moving, target=1) == [ReleaseOutcome.RELEASED] * 2
        copies = dst.moving.import_messages(rows)
        assert all(isinstance(c, str) for c in copies), copies
        while clock.now_ms() < start + 40 * SECOND + 1:
            clock.advance(50)
            src.pump()
            dst.pump()
        assert drain(src) == []
        got += drain(dst)
        assert fired_times(got) == [start + s * SECOND for s in (10, 20, 30, 40)]
        assert dst.get_schedule("tick").state.fired == 4
    finally:
        src.close()
        dst.close()


def test_plans_due_at_once_are_fired_a_batch_a_step_each_once(
    make_engine: Make, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(release, "FIRE_BATCH", 3)  # 10 plans: four steps
    e = make_engine()
    spec = ScheduleSpec(MessageTemplate("t", b"x"), cron="*/10 * * * * *")
    made = [e.create_schedule(f"s{i}", spec) for i in range(10)]
    first = made[0].state.next_fire_ms
    assert {s.state.next_fire_ms for s in made} == {first}
    run_until(e, clock, first + 10 * SECOND + 1, step_ms=50)
    got = drain(e)
    assert by_schedule(got) == {f"s{i}": [first, first + 10 * SECOND] for i in range(10)}
    assert {m.deliver_at_ms for m in got} == {first, first + 10 * SECOND}  # none late
