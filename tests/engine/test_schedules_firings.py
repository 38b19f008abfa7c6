"""What a schedule's firings are and are not (real files, a fake clock): a
client's message never stands for a firing; what a pause, update or delete
cancels; a firing dead-lettered whatever its body."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from delayq import FakeClock, InvalidArgument
from delayq.deadletters import dead_letter_topic
from delayq.engine import ScheduleRequest, firing
from delayq.recurrence.spec import CatchUp, MessageTemplate, ScheduleSpec
from delayq.recurrence.states import lead_of
from delayq.settings import AttemptLimits
from tests.support.engines import Make, drain, ids, req, run_until
from tests.support.schedules import by_schedule, every, fired_times

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


@pytest.mark.parametrize("call", ["pause", "update", "delete"])
def test_a_call_leaves_firings_whose_time_came_and_cancels_those_ahead(
    make_engine: Make, clock: FakeClock, call: str
) -> None:
    """With a minute of jitter, the nominal times already come are pending for
    their jitter when the call comes: they were fired and are delivered (each
    once); those written ahead (nominal times after the call, within the
    schedule's lead) are cancelled."""
    e = make_engine()
    spec = ScheduleSpec(MessageTemplate("t", b"x"), cron="*/10 * * * * *", jitter_ms=60 * SECOND)
    first = e.create_schedule("j", spec).state.next_fire_ms
    run_until(e, clock, first + 69 * SECOND + 500, step_ms=50)  # first .. +70 s written
    came = [first + k * 10 * SECOND for k in range(7)]
    early = fired_times(drain(e))
    now = clock.now_ms()
    ahead = range(first + 70 * SECOND, now + lead_of("j") + 1, 10 * SECOND)  # written ahead
    assert len(ahead) >= 1 and e.get_schedule("j").state.fired == 7 + len(ahead)
    if call == "pause":
        assert e.pause_schedule("j").state.fired == 7
    elif call == "update":
        assert e.update_schedule("j", dataclasses.replace(spec, jitter_ms=0)).state.fired == 7
    else:
        e.delete_schedule("j")
    run_until(e, clock, first + 130 * SECOND, step_ms=100)
    got = sorted(early + fired_times(drain(e)))
    assert [t for t in got if t < first + 70 * SECOND] == came  # each delivered once
    later = [t for t in got if t >= first + 70 * SECOND]
    # +70 s on were cancelled: an update fires them again by its new spec, once
    assert later[:1] == ([first + 70 * SECOND] if call == "update" else [])
    assert len(later) == len(set(later))


def test_scheduled_counts_clients_messages_only(make_engine: Make, clock: FakeClock) -> None:
    """``scheduled`` (``delayq_scheduled_total``) is the new messages clients sent;
    the plans' copies and the firings delayq writes have their own counters, as
    a reschedule's copy has (``rescheduled``); a deleted schedule's plan is no
    message cancelled, its firings written ahead are."""
    e = make_engine()
    start = clock.now_ms()
    e.create_schedule("tick", every(10 * SECOND))
    ids = [o.id for o in e.schedule([ScheduleRequest(topic="t", body=b"c", delay_ms=60_000)] * 2)]
    run_until(e, clock, start + 30 * SECOND + 1, step_ms=50)
    e.pause_schedule("tick")
    e.resume_schedule("tick")
    assert ids[0] is not None
    e.reschedule(ids[0], delay_ms=90_000)
    counters = e.observing.counters
    assert counters["scheduled"] == 2 and counters["rescheduled"] == 1
    assert counters["schedule_firings"] == 3
    assert counters["schedule_plans"] == 1 + 3 + 2  # create, a copy per step, pause, resume
    assert lead_of("tick") > 5 * SECOND  # so the firing of +40 s is written ahead at +35 s
    run_until(e, clock, start + 35 * SECOND, step_ms=50)
    cancelled = counters["cancelled"]
    e.delete_schedule("tick")
    assert counters["cancelled"] - cancelled == 1  # the firing ahead, not the plan


@pytest.mark.parametrize("body", [b"", b"job"])
def test_a_firing_is_dead_lettered_whatever_its_body(
    make_engine: Make, clock: FakeClock, body: bytes
) -> None:
    """A firing is an ordinary message, and an empty template body is allowed (a
    firing is a message delayq stores): past its group's last attempt the firing
    goes to the group's dead-letter topic with its body as delayq wrote it, empty or
    not, keyed by its schedule (a new message there: no firing marks, no dedup hold)."""
    e = make_engine(delivery_attempts=AttemptLimits(1, ()))
    start = clock.now_ms()
    e.create_schedule("tick", every(10 * SECOND, body=body))
    run_until(e, clock, start + 10 * SECOND + 1, step_ms=50)
    (got,) = e.receive("t", "g", invisible_ms=1000)
    clock.advance(1001)
    assert e.receive("t", "g") == [], "no second attempt"
    run_until(e, clock, clock.now_ms() + 20)
    (dead,) = e.receive(dead_letter_topic("g"), "ops")
    assert (dead.body, dead.key) == (body, "tick")
    assert dead.headers == {
        "dlq.topic": "t",
        "dlq.id": got.id,
        "dlq.group": "g",
        "dlq.attempts": "1",
    }
    assert fired_times([got]) == [start + 10 * SECOND]
    counters = e.observing.counters
    assert (counters["dead_lettered"], counters["scheduled"]) == (1, 0)


def test_a_template_body_over_the_shards_limit_is_refused(make_engine: Make) -> None:
    e = make_engine(max_body_bytes=1024)
    e.create_schedule("fits", every(10 * SECOND, body=b"x" * 1024))
    for call in (e.create_schedule, e.update_schedule):
        with pytest.raises(InvalidArgument, match="at most 1024") as got:
            call(
                "fits" if call == e.update_schedule else "big", every(10 * SECOND, body=b"x" * 1025)
            )
        assert got.value.field == "spec.template.body"


@pytest.mark.parametrize("policy", list(CatchUp))
def test_a_busy_firer_fires_late_and_misses_nothing(
    make_engine: Make, clock: FakeClock, policy: CatchUp
) -> None:
    """The engine's steps 3 s apart (a firer busy or a slow disk): the nominal
    times that came meanwhile came while this master could fire, so they fire,
    late, under every policy, and none is counted missed."""
    e = make_engine()
    start = clock.now_ms()
    e.create_schedule("tick", every(SECOND, catch_up=policy))
    run_until(e, clock, start + 20 * SECOND, step_ms=3 * SECOND)
    got = [t for t in fired_times(drain(e)) if t <= start + 18 * SECOND]
    assert got == [start + k * SECOND for k in range(1, 19)]
    state = e.get_schedule("tick").state
    assert state.missed == 0 and e.observing.counters["schedule_missed"] == 0


def test_one_release_step_shares_its_budget_among_its_plans(
    make_engine: Make, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten cron plans each 600 times behind (the shard down 10 min; ``all`` in an
    hour's window): with a step's budget of 100 nominal times, one release step
    steps one plan, not ten of up to 10,000 each; the others wait in the buffer,
    due at once, and every missed time still fires once."""
    monkeypatch.setattr(firing, "STEP_BUDGET", 100)
    e = make_engine()
    spec = ScheduleSpec(MessageTemplate("t", b"x"), cron="* * * * * *", catch_up=CatchUp.ALL)
    made = [e.create_schedule(f"s{i}", spec) for i in range(10)]
    first = made[0].state.next_fire_ms
    e.close()
    clock.advance(600 * SECOND)
    e = make_engine()
    now = clock.now_ms()
    with e._life.held() as sh:
        while sh.stages.link.step() | sh.stages.scan.step():
            pass
        before = e.observing.counters["schedule_plans"]
        sh.stages.release.step()
        assert e.observing.counters["schedule_plans"] - before == 1
        assert e.observing.counters["schedule_firings"] == 100
    run_until(e, clock, now + 200, step_ms=50)
    got = by_schedule(drain(e))
    want = [first + k * SECOND for k in range((now - first) // SECOND + 1)]  # delivered by now
    assert got == {f"s{i}": want for i in range(10)}
    assert e.observing.counters["schedule_missed"] == 0


def test_a_herds_plans_come_due_spread_over_their_leads(
    make_engine: Make, clock: FakeClock
) -> None:
    """100 schedules on the minute: each plan is due its own lead before the
    minute (``lead_of``), so the herd's plans are written over ~20 s, and each
    firing still comes at its nominal time."""
    e = make_engine()
    spec = ScheduleSpec(MessageTemplate("t", b"x"), cron="* * * * *")
    made = [e.create_schedule(f"s{i}", spec) for i in range(100)]
    minute = made[0].state.next_fire_ms
    dues = {s.name: e.lookup(s.id).deliver_at_ms for s in made}
    assert dues == {s.name: minute - lead_of(s.name) for s in made}
    assert max(dues.values()) - min(dues.values()) > 15 * SECOND
    run_until(e, clock, minute + 1, step_ms=100)
    got = drain(e)
    assert by_schedule(got) == {s.name: [minute] for s in made}
    assert {m.deliver_at_ms for m in got} == {minute}


def test_a_catch_up_bigger_than_the_queue_fires_in_chunks_it_takes(
    make_engine: Make, clock: FakeClock
) -> None:
    """A 500-message enqueue queue and 1,000 missed times to catch up (``all``):
    the firer's appends fit the queue (each plan's step bounded to a chunk),
    every missed time fires once, and a client's message due meanwhile is
    delivered on time."""
    e = make_engine(enqueue_queue_messages=500)
    made = e.create_schedule("tick", every(SECOND, catch_up=CatchUp.ALL))
    first = made.state.next_fire_ms
    e.close()
    clock.advance(1000 * SECOND)
    e = make_engine(enqueue_queue_messages=500)
    now = clock.now_ms()
    ids(e.schedule([req(300, b"client")]))
    run_until(e, clock, now + 2 * SECOND, step_ms=100)
    got = drain(e)
    client = [m for m in got if m.body == b"client"]
    assert len(client) == 1 and client[0].deliver_at_ms == now + 300
    times = [t for t in fired_times([m for m in got if m.body == b"x"]) if t < now]
    assert sorted(times) == list(range(first, now, SECOND))
    assert e.observing.counters["schedule_missed"] == 0


def test_a_firing_the_queue_refuses_waits_and_delivery_goes_on(
    make_engine: Make, clock: FakeClock
) -> None:
    """The enqueue queue full when a plan comes due (``Congested``): the release
    step still delivers the client's message due with it; the plan waits for
    the refusal's retry, and then fires its time once."""
    e = make_engine(enqueue_queue_messages=40)
    nominal = e.create_schedule("tick", every(10 * SECOND)).state.next_fire_ms
    ids(e.schedule([req(nominal - lead_of("tick") - clock.now_ms(), b"due")]))
    clock.advance(nominal - lead_of("tick") - clock.now_ms())
    with e._life.held() as sh:
        while sh.stages.link.step() | sh.stages.scan.step():
            pass
        ids(e.schedule([req(60 * SECOND) for _ in range(39)]))  # not linked: queue 39/40
        assert sh.stages.release.step()
        assert e.observing.counters["delivered"] == 1
        assert e.observing.counters["schedule_firings"] == 0
        assert sh.state.release.next_due_ms() > clock.now_ms()  # the plan waits
    run_until(e, clock, nominal + 1, step_ms=50)
    got = [m for m in drain(e) if m.body != b"y"]
    assert sorted(m.body for m in got) == [b"due", b"x"]
    assert fired_times([m for m in got if m.body == b"x"]) == [nominal]


def test_an_update_fires_the_new_specs_times_before_a_firing_it_cancelled(
    make_engine: Make, clock: FakeClock
) -> None:
    """On the minute, then updated to every 5 s while the next minute's firing
    is written ahead: that firing is cancelled, the state's last firing is the
    minute before (a real nominal time), and the new spec's times from now on
    fire, the ones before that minute included."""
    e = make_engine()
    minute = e.create_schedule("tick", ScheduleSpec(MessageTemplate("t", b"x"), cron="0 * * * * *"))
    m1 = minute.state.next_fire_ms
    m2 = m1 + 60 * SECOND
    assert lead_of("tick") > 7 * SECOND  # so m2's firing is written ahead at m2 - 7 s
    run_until(e, clock, m2 - 7 * SECOND, step_ms=100)
    spec = ScheduleSpec(MessageTemplate("t", b"x"), cron="*/5 * * * * *")
    updated = e.update_schedule("tick", spec)
    assert (updated.state.last_fire_ms, updated.state.fired) == (m1, 1)
    assert updated.state.next_fire_ms == m2 - 5 * SECOND
    run_until(e, clock, m2 + 1, step_ms=100)
    assert fired_times(drain(e)) == [m1, m2 - 5 * SECOND, m2]


def test_a_time_is_counted_missed_once_through_pauses_and_resumes(
    make_engine: Make, clock: FakeClock
) -> None:
    """Made paused, resumed 95 s later (9 times missed under ``none``), paused
    again with firings written ahead (cancelled: not fired), resumed 100 s
    later: every nominal time up to then was decided once, 19 missed in all
    (10 s to 190 s)."""
    e = make_engine()
    start = clock.now_ms()
    e.create_schedule("tick", every(10 * SECOND, catch_up=CatchUp.NONE), paused=True)
    clock.advance(95 * SECOND)
    e.resume_schedule("tick")
    run_until(e, clock, clock.now_ms() + 500, step_ms=50)
    assert e.get_schedule("tick").state.missed == 9
    paused = e.pause_schedule("tick").state
    assert (paused.fired, paused.next_fire_ms) == (0, start + 100 * SECOND)
    clock.advance(100 * SECOND)
    e.resume_schedule("tick")
    run_until(e, clock, clock.now_ms() + 500, step_ms=50)
    state = e.get_schedule("tick").state
    assert (state.missed, state.fired) == (19, 1)  # +200 s written ahead
    assert drain(e) == []


def test_two_copies_of_a_due_plan_fire_it_once(make_engine: Make, clock: FakeClock) -> None:
    """The firer handed one plan's row twice (a failed release step pushes its
    rows back beside those the firer deferred): one firing, one plan copy."""
    e = make_engine()
    made = e.create_schedule("tick", every(10 * SECOND))
    clock.advance(made.state.next_fire_ms - lead_of("tick") - clock.now_ms())
    with e._life.held() as sh:
        while sh.stages.link.step() | sh.stages.scan.step():
            pass
        rows = sh.state.release.pop_due(clock.now_ms(), 10)
        assert len(rows) == 1
        firer = sh.stages.release._firer
        assert firer is not None
        left = firer.fire(np.concatenate([rows, rows]), clock.now_ms())
    assert len(left) == 0
    counters = e.observing.counters
    assert (counters["schedule_firings"], counters["schedule_plans"]) == (1, 2)
