"""``Engine.schedule_batch`` (columns) against ``Engine.schedule`` (one request per
message): the same ids, due times and errors, and whole-batch errors for a
malformed batch."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delayq import Congested, Engine, FakeClock, InvalidArgument
from delayq.engine import ScheduleBatch, ScheduleRequest
from tests.support.engines import START_MS, Make, small_settings


def test_a_batch_delivers_every_message_at_its_time(make_engine: Make, clock: FakeClock) -> None:
    e = make_engine()
    now = clock.now_ms()
    out = e.schedule_batch(
        ScheduleBatch(
            topic="t",
            bodies=[b"a", b"b", b"c"],
            deliver_at_ms=[now + 300, 0, 0],
            delay_ms=[0, 150, 0],
        )
    )
    assert out.errors == {}
    assert out.deliver_at_ms == [now + 300, now + 150, now]
    assert all(out.ids)
    got = []
    while clock.now_ms() < now + 400:
        e.pump()
        got += [
            (m.body, m.delivered_ms - m.deliver_at_ms) for m in e.receive("t", "g", auto_ack=True)
        ]
        clock.advance(10)
    assert sorted(got) == [(b"a", 0), (b"b", 0), (b"c", 0)]


def test_bodies_of_mixed_sizes_survive_delivery_and_a_restart(
    make_engine: Make, clock: FakeClock
) -> None:
    """Bodies of 10, 9 and 11 bytes: their records average to the first one's length,
    which once made the encoder cut them as one size and stamp wrong CRCs (the
    release stage quarantined two of three; recovery cut the log there)."""
    bodies = [b"a" * 10, b"b" * 9, b"c" * 11, b"d" * 10]
    e = make_engine()
    now = clock.now_ms()
    e.schedule_batch(ScheduleBatch(topic="t", bodies=bodies, delay_ms=[100] * 4))
    e.schedule_batch(ScheduleBatch(topic="t", bodies=bodies, delay_ms=[500] * 4))
    clock.advance(200)
    e.pump()
    assert sorted(m.body for m in e.receive("t", "g", auto_ack=True)) == sorted(bodies)
    assert e.observing.counters.get("quarantined", 0) == 0
    e.close()
    e = make_engine()  # recovery scans every record: none may be cut as torn
    clock.set(now + 600)
    e.pump()
    assert sorted(m.body for m in e.receive("t", "g", auto_ack=True)) == sorted(bodies)
    assert e.observing.counters.get("quarantined", 0) == 0


def test_bad_rows_are_refused_alone_naming_the_field(make_engine: Make) -> None:
    e = make_engine(max_body_bytes=8)
    out = e.schedule_batch(
        ScheduleBatch(
            topic=["t", "bad topic", "t", "t", "t"],
            bodies=[b"ok", b"x", b"", b"y" * 9, bytearray(b"z")],  # type: ignore[list-item]
            delay_ms=[10, 10, 10, 10, 10],
            keys=["", "", "", "", "k"],
        )
    )
    assert {i: e.field for i, e in out.errors.items()} == {1: "topic", 2: "body", 3: "body"}
    assert out.ids[0] and out.ids[4] and out.ids[1] is None
    assert e.lookup(out.ids[4]).key == "k"  # type: ignore[arg-type]
    assert e.lookup(out.ids[4]).body == b"z"  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("batch", "field"),
    [
        (ScheduleBatch(topic="bad topic", bodies=[b"x"]), "topic"),
        (ScheduleBatch(topic="t", bodies=[b"x", b"y"], delay_ms=[1]), "delay_ms"),
        (ScheduleBatch(topic="t", bodies=[b"x"], deliver_at_ms=[1, 2]), "deliver_at_ms"),
        (ScheduleBatch(topic="t", bodies=[b"x"], deliver_at_ms=["soon"]), "deliver_at_ms"),
        (ScheduleBatch(topic=["t"], bodies=[b"x", b"y"]), "topic"),
        (ScheduleBatch(topic="t", bodies=[b"x"], keys=["a", "b"]), "keys"),
    ],
)
def test_a_malformed_batch_is_refused_whole(
    make_engine: Make, batch: ScheduleBatch, field: str
) -> None:
    e = make_engine()
    end = e.observing.gauges()["commitlog_end"]
    with pytest.raises(InvalidArgument) as err:
        e.schedule_batch(batch)
    assert err.value.field == field
    assert e.observing.gauges()["commitlog_end"] == end


def test_full_slot_refusals_keep_their_index(make_engine: Make) -> None:
    e = make_engine(slot_limit=2)
    out = e.schedule_batch(
        ScheduleBatch(topic="t", bodies=[b"a", b"", b"c", b"d", b"e"], delay_ms=[500] * 5)
    )
    assert isinstance(out.errors[1], InvalidArgument)
    assert [i for i, x in out.errors.items() if isinstance(x, Congested)] == [3, 4]
    assert [i is not None for i in out.ids] == [True, False, True, False, False]


_request = st.builds(
    ScheduleRequest,
    topic=st.sampled_from(["t", "u", "", "bad topic"]),
    body=st.sampled_from([b"x", b"", b"y" * 40, b"z" * 70]),
    deliver_at_ms=st.one_of(
        st.none(), st.sampled_from([0, -1, START_MS - 5, START_MS + 250, START_MS + 10**10])
    ),
    delay_ms=st.one_of(st.none(), st.sampled_from([0, -3, 120, 10**10])),
    delay_level=st.one_of(st.none(), st.sampled_from([0, 1, 3, 18, 19, -2])),
    key=st.sampled_from(["", "k"]),
    headers=st.sampled_from([{}, {"h": "v"}, {"": "v"}]),
)


def _ambiguous_as_columns(r: ScheduleRequest) -> bool:
    """Level 0, or more than one way to say when with one of them 0: columns read 0
    as "not given"."""
    given = [w for w in (r.deliver_at_ms, r.delay_ms, r.delay_level) if w is not None]
    return r.delay_level == 0 or (len(given) > 1 and 0 in given)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(reqs=st.lists(_request, min_size=1, max_size=12))
def test_batch_and_requests_give_the_same_results(
    tmp_path: Path, reqs: list[ScheduleRequest]
) -> None:
    """Two fresh engines, same clock and input: one takes requests, one takes the
    same messages as columns (None as 0); ids, due times and errors must agree
    wherever the request means the same as columns."""
    reqs = [r for r in reqs if not _ambiguous_as_columns(r)]
    if not reqs:
        return
    results: list[Any] = []
    for call in (
        lambda e: e.schedule(reqs),
        lambda e: e.schedule_batch(
            ScheduleBatch(
                topic=[r.topic for r in reqs],
                bodies=[r.body for r in reqs],
                deliver_at_ms=[r.deliver_at_ms or 0 for r in reqs],
                delay_ms=[r.delay_ms or 0 for r in reqs],
                delay_level=[r.delay_level or 0 for r in reqs],
                keys=[r.key for r in reqs],
                headers=[r.headers for r in reqs],
            )
        ).outcomes(),
    ):
        with (
            tempfile.TemporaryDirectory(dir=tmp_path) as fresh,  # examples share tmp_path
            Engine(
                small_settings(Path(fresh), max_body_bytes=64),
                FakeClock(START_MS),
                background=False,
            ) as e,
        ):
            results.append(
                [
                    (o.id, o.deliver_at_ms if o.error is None else None, repr(o.error))
                    for o in call(e)
                ]
            )
    assert results[0] == results[1]


def test_receive_batch_is_receive_as_columns(make_engine: Make, clock: FakeClock) -> None:
    e = make_engine()
    e.schedule(
        [
            ScheduleRequest(topic="t", body=b"a", delay_ms=10, key="k", headers={"h": "v"}),
            ScheduleRequest(topic="t", body=b"b", delay_ms=10),
        ]
    )
    clock.advance(20)
    e.pump()
    batch = e.receive_batch("t", "g", max_messages=10)
    assert batch.bodies == [b"a", b"b"] and batch.keys == ["k", ""]
    assert batch.headers == [{"h": "v"}, {}] and all(batch.receipts)
    assert batch.attempts == [1, 1]
    assert [m.body for m in batch.messages()] == [b"a", b"b"]
    assert e.receive_batch("t", "g").ids == []  # in flight: nothing more to hand out
