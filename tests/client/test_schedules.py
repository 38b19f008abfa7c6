"""The typed client's recurring schedules against a real ``delayq serve``: a
schedule created fires its template into its topic, each nominal time once, keyed
by its name, with the headers naming the schedule and the time, never before that
time; get, pause (nothing fires after it returns), resume, update (the next times
from the new spec), delete (NOT_FOUND after); a name taken is ``AlreadyExists``;
the next firing times of a stored schedule and of a spec stored nowhere; bad
specs and names ``InvalidArgument`` naming the field; the async client alike."""

from __future__ import annotations

import asyncio
import itertools
import time
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

import delayq
from tests.cli.test_cli import Start

TOPIC = "ticks"


def every(seconds: float, **over: object) -> delayq.ScheduleSpec:
    template = delayq.MessageTemplate(topic=TOPIC, body=b"tick", headers={"tenant": "acme"})
    return delayq.ScheduleSpec(template=template, every_ms=round(seconds * 1000), **over)  # type: ignore[arg-type]


def to(topic: str, **over: object) -> delayq.ScheduleSpec:
    return delayq.ScheduleSpec(template=delayq.MessageTemplate(topic=topic), **over)  # type: ignore[arg-type]


def firings(c: delayq.Client, want: int, wait_s: float = 20.0) -> list[delayq.Received]:
    """At least ``want`` firings of ``TOPIC`` (acked), within ``wait_s``."""
    got: list[delayq.Received] = []
    until = time.monotonic() + wait_s
    while len(got) < want and time.monotonic() < until:
        batch = c.receive(TOPIC, "g", max_messages=100, wait_s=1.0)
        got += batch
        if batch:
            c.ack(TOPIC, "g", [m.receipt for m in batch])
    return got


def test_a_schedule_fires_each_time_once_with_its_headers(start_server: Start) -> None:
    srv = start_server()
    with delayq.Client(srv.address) as c:
        made = c.create_schedule("ticker", every(1))
        assert (made.name, made.spec, made.paused, made.ended) == ("ticker", every(1), False, False)
        assert made.next_fire_ms > 0 and made.id
        got = firings(c, 3)
        assert len(got) >= 3
        times = [int(m.headers["delayq-schedule-time"]) for m in got]
        assert len(set(times)) == len(times), "each nominal time once"
        assert times == sorted(times) and all(b - a == 1000 for a, b in itertools.pairwise(times))
        for m, t in zip(got, times, strict=True):
            assert (m.topic, m.key, m.body) == (TOPIC, "ticker", b"tick")
            assert m.headers["delayq-schedule"] == "ticker" and m.headers["tenant"] == "acme"
            assert m.delivered_at_ms >= t, "never before its nominal time"
        now = c.get_schedule("ticker")
        assert now.fired >= 3 and now.last_fire_ms >= times[-1]
        with pytest.raises(delayq.AlreadyExists):
            c.create_schedule("ticker", every(5))


def test_pause_resume_update_delete(start_server: Start) -> None:
    srv = start_server()
    with delayq.Client(srv.address) as c:
        c.create_schedule("ticker", every(1))
        assert firings(c, 1)
        paused = c.pause_schedule("ticker")
        stopped_ms = int(time.time() * 1000)
        assert paused.paused and paused.next_fire_ms == 0
        assert c.next_firings("ticker") == []
        late = firings(c, 1, wait_s=3.0)
        assert all(int(m.headers["delayq-schedule-time"]) <= stopped_ms for m in late)
        resumed = c.resume_schedule("ticker")
        assert not resumed.paused and resumed.next_fire_ms > 0
        assert firings(c, 1)

        updated = c.update_schedule("ticker", every(2))
        assert updated.spec.every_ms == 2000 and updated.created_ms == paused.created_ms
        nxt = c.next_firings("ticker", count=5)
        assert len(nxt) == 5 and {b - a for a, b in itertools.pairwise(nxt)} == {2000}

        c.delete_schedule("ticker")
        with pytest.raises(delayq.NotFound) as err:
            c.get_schedule("ticker")
        assert err.value.field == "name"
        with pytest.raises(delayq.NotFound):
            c.delete_schedule("ticker")
        assert c.list_schedules().schedules == ()


def test_a_preview_walks_the_zone_and_stores_nothing(start_server: Start) -> None:
    srv = start_server()
    london = ZoneInfo("Europe/London")
    spec = to(TOPIC, cron="0 9 * * *", time_zone="Europe/London")
    with delayq.Client(srv.address) as c:
        times = c.next_firings(spec=spec, count=400)
        assert len(times) == 400 and times == sorted(times)
        local = [datetime.fromtimestamp(t / 1000, london) for t in times]
        assert {(d.hour, d.minute, d.second) for d in local} == {(9, 0, 0)}, "09:00 in London"
        assert {d.utcoffset().total_seconds() for d in local} == {0, 3600}, "both sides of DST"  # type: ignore[union-attr]
        assert c.list_schedules().schedules == ()


@pytest.mark.parametrize(
    ("name", "spec", "field"),
    [
        ("bad name!", every(1), "name"),
        ("", every(1), "name"),
        ("x", every(0.5), "spec.every_ms"),
        ("x", every(1, cron="* * * * *"), "spec"),
        ("x", every(1, time_zone="Nowhere/Atlantis"), "spec.time_zone"),
        ("x", every(1, jitter_ms=2000), "spec.jitter_ms"),
        ("x", to("_schedules", every_ms=1000), "spec.template.topic"),
        ("x", to(TOPIC, cron="0 25 * * *"), "spec.cron"),
    ],
)
def test_bad_specs_and_names_are_refused_naming_the_field(
    start_server: Start, name: str, spec: delayq.ScheduleSpec, field: str
) -> None:
    srv = start_server()
    with delayq.Client(srv.address) as c:
        with pytest.raises(delayq.InvalidArgument) as err:
            c.create_schedule(name, spec)
        assert err.value.field == field or err.value.field.startswith(field + "."), err.value
        assert c.list_schedules().schedules == (), "nothing stored"
        c.create_schedule("fine", every(60))  # the check can pass


def test_the_async_client_alike(start_server: Start) -> None:
    srv = start_server()

    async def main() -> None:
        async with delayq.AsyncClient(srv.address) as c:
            made = await c.create_schedule("a1", every(60))
            assert (await c.get_schedule("a1")) == made
            assert [s.name for s in (await c.list_schedules()).schedules] == ["a1"]
            assert len(await c.next_firings("a1", count=3)) == 3
            await c.delete_schedule("a1")

    asyncio.run(main())


def test_a_schedule_made_paused_fires_nothing_until_resumed(start_server: Start) -> None:
    srv = start_server()
    with delayq.Client(srv.address) as c:
        made = c.create_schedule("ticker", every(1), paused=True)
        assert made.paused and made.next_fire_ms == 0
        assert firings(c, 1, wait_s=2.5) == []
        assert c.resume_schedule("ticker").next_fire_ms > 0
        assert firings(c, 1)
