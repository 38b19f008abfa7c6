"""The plan body codec (``recurrence.plans``): every spec and state round-trips,
the bytes of a known plan are fixed (golden), damaged bodies raise
``CorruptData``; a firing's id, dedup window, headers and jitter."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delayq.errors import CorruptData
from delayq.recurrence.plans import (
    MIN_DEDUP_WINDOW_MS,
    decode_plan,
    dedup_window_ms,
    encode_plan,
    firing_headers,
    firing_id,
    jitter_of,
)
from delayq.recurrence.spec import CatchUp, MessageTemplate, ScheduleSpec, ScheduleState
from delayq.recurrence.states import MAX_LEAD_MS

texts = st.text(max_size=20)
times = st.integers(0, 2**53)
specs = st.builds(
    ScheduleSpec,
    template=st.builds(
        MessageTemplate,
        topic=texts,
        body=st.binary(max_size=64),
        headers=st.dictionaries(texts, texts, max_size=4),
    ),
    cron=texts,
    every_ms=times,
    time_zone=texts,
    start_ms=times,
    end_ms=times,
    jitter_ms=times,
    catch_up=st.sampled_from(list(CatchUp)),
    catch_up_window_ms=times,
)
states = st.builds(
    ScheduleState,
    paused=st.booleans(),
    ended=st.booleans(),
    next_fire_ms=times,
    last_fire_ms=times,
    fired=times,
    missed=times,
    anchor_ms=times,
    created_ms=times,
    updated_ms=times,
    resumed_ms=times,
)


@settings(max_examples=300)
@given(spec=specs, state=states)
def test_every_plan_round_trips(spec: ScheduleSpec, state: ScheduleState) -> None:
    assert decode_plan(encode_plan(spec, state)) == (spec, state)


SPEC = ScheduleSpec(
    MessageTemplate("orders", b"\x00tick", {"k": "v"}),
    cron="0 9 * * MON-FRI",
    time_zone="Europe/London",
    jitter_ms=5000,
    catch_up=CatchUp.ALL,
)
STATE = ScheduleState(next_fire_ms=1_767_258_000_000, fired=3, anchor_ms=7, created_ms=7)
GOLDEN = (
    b'{"v":1,"spec":{"cron":"0 9 * * MON-FRI","every_ms":0,"start_ms":0,"end_ms":0,'
    b'"jitter_ms":5000,"catch_up_window_ms":3600000,"time_zone":"Europe/London",'
    b'"catch_up":"all","template":{"topic":"orders","body":"AHRpY2s=","headers":{"k":"v"}}},'
    b'"state":{"paused":false,"ended":false,"next_fire_ms":1767258000000,"last_fire_ms":0,'
    b'"fired":3,"missed":0,"anchor_ms":7,"created_ms":7,"updated_ms":0,"resumed_ms":0}}'
)


def test_the_bytes_of_a_known_plan() -> None:
    assert encode_plan(SPEC, STATE) == GOLDEN
    assert decode_plan(GOLDEN) == (SPEC, STATE)


def test_a_plan_written_before_resumed_ms_reads_it_as_0() -> None:
    older = GOLDEN.replace(b',"resumed_ms":0', b"")
    assert decode_plan(older) == (SPEC, STATE)


def _edited(path: tuple[str, ...], value: object) -> bytes:
    doc = json.loads(GOLDEN)
    node = doc
    for name in path[:-1]:
        node = node[name]
    if value is _DROP:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return json.dumps(doc).encode()


_DROP = object()
DAMAGED = [
    pytest.param(b"", id="empty"),
    pytest.param(b"\xff\xfe", id="not-utf8"),
    pytest.param(GOLDEN[:-1], id="torn"),
    pytest.param(b"[1]", id="not-an-object"),
    pytest.param(_edited(("v",), 2), id="version"),
    pytest.param(_edited(("v",), _DROP), id="no-version"),
    pytest.param(_edited(("spec",), _DROP), id="no-spec"),
    pytest.param(_edited(("state", "fired"), _DROP), id="no-field"),
    pytest.param(_edited(("state", "fired"), "3"), id="string-for-int"),
    pytest.param(_edited(("state", "fired"), True), id="bool-for-int"),
    pytest.param(_edited(("state", "paused"), 0), id="int-for-bool"),
    pytest.param(_edited(("spec", "catch_up"), "some"), id="policy"),
    pytest.param(_edited(("spec", "template", "body"), "not base64!"), id="body"),
    pytest.param(_edited(("spec", "template", "headers"), {"k": 1}), id="header"),
    pytest.param(_edited(("spec", "template", "headers"), ["k"]), id="headers"),
    pytest.param(_edited(("spec", "cron"), None), id="cron"),
]


@pytest.mark.parametrize("body", DAMAGED)
def test_a_damaged_body_is_corrupt_data(body: bytes) -> None:
    with pytest.raises(CorruptData, match="plan"):
        decode_plan(body)


def test_a_firing_is_named_by_its_schedule_and_nominal_time() -> None:
    assert firing_id("nightly", 1_767_258_000_000) == "nightly@1767258000000"
    assert firing_headers(SPEC, "nightly", 42) == {
        "k": "v",
        "delayq-schedule": "nightly",
        "delayq-schedule-time": "42",
    }


def test_a_firing_holds_its_dedup_id_past_any_refire() -> None:
    assert dedup_window_ms(SPEC) == MIN_DEDUP_WINDOW_MS + MAX_LEAD_MS
    week = ScheduleSpec(MessageTemplate("t"), every_ms=1000, catch_up_window_ms=7 * 86_400_000)
    assert dedup_window_ms(week) == 7 * 86_400_000 + MAX_LEAD_MS


def test_jitter_is_fixed_by_name_and_time_and_spread_within_its_bound() -> None:
    got = [jitter_of("nightly", t, 999) for t in range(2000)]
    assert got == [jitter_of("nightly", t, 999) for t in range(2000)]
    assert min(got) >= 0 and max(got) <= 999
    assert len(set(got)) > 500  # spread, not one value
    assert [jitter_of("other", t, 999) for t in range(2000)] != got
    assert jitter_of("nightly", 5, 0) == 0
    assert {jitter_of("n", t, 1) for t in range(100)} == {0, 1}  # the bound is reached
