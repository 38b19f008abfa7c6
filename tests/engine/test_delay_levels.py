"""RocketMQ 4's delay levels in the engine: the setting
(``EngineSettings.delay_levels_ms``: RocketMQ's 18 by default, refused when no
message could use it); level L is a delay of the L-th of the setting from now,
in both ways in (requests and columns); a level out of range, or a level beside
a time or a delay, is refused naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from delayq import FakeClock, InvalidArgument
from delayq.durations import DEFAULT_DELAY_LEVELS, parse_delay_levels
from delayq.engine import ScheduleBatch, ScheduleRequest
from delayq.settings import EngineSettings
from tests.support.engines import Make, drain, run_until


def test_the_default_setting_is_rocketmqs_levels() -> None:
    levels = parse_delay_levels(DEFAULT_DELAY_LEVELS)
    assert EngineSettings(data_dir=Path("d")).delay_levels_ms == levels


@pytest.mark.parametrize(
    ("levels", "message"),
    [
        ((), "give at least one level"),
        ((1000, 0), "level 2 is 0 ms"),
        ((1000, 2 * 86_400_000), r"level 2 is 172800000 ms; .* max_delay_ms \(86400000\)"),
    ],
)
def test_the_engine_setting_refuses_what_no_message_could_use(
    levels: tuple[int, ...], message: str
) -> None:
    with pytest.raises(ValueError, match=f"^delay_levels_ms: {message}"):
        EngineSettings(data_dir=Path("d"), delay_levels_ms=levels, max_delay_ms=86_400_000)


def test_level_3_of_the_default_levels_is_ten_seconds_from_now(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine()
    now = clock.now_ms()
    (one,) = e.schedule([ScheduleRequest(topic="t", body=b"r", delay_level=3)])
    batch = e.schedule_batch(ScheduleBatch(topic="t", bodies=[b"c"], delay_level=[3]))
    assert one.error is None and batch.errors == {}
    assert one.deliver_at_ms == batch.deliver_at_ms[0] == now + 10_000
    run_until(e, clock, now + 9_999)
    assert drain(e) == [], "not a millisecond early"
    run_until(e, clock, now + 10_000)
    got = drain(e)
    assert sorted(m.body for m in got) == [b"c", b"r"]
    assert {m.deliver_at_ms for m in got} == {now + 10_000}


def test_levels_follow_the_setting_and_mix_with_other_rows(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine(delay_levels_ms=(100, 250))
    now = clock.now_ms()
    out = e.schedule_batch(
        ScheduleBatch(
            topic="t",
            bodies=[b"a", b"b", b"c", b"d", b"e"],
            deliver_at_ms=[0, 0, now + 50, 0, 0],
            delay_ms=[0, 0, 0, 70, 0],
            delay_level=[2, 1, 0, 0, 3],
        )
    )
    assert out.deliver_at_ms[:4] == [now + 250, now + 100, now + 50, now + 70]
    assert list(out.errors) == [4] and out.ids[4] is None
    assert str(out.errors[4]) == "delay_level: must be 1..2 (the server's --delay-levels), got 3"


@pytest.mark.parametrize("level", [19, 25, -1])
def test_a_level_out_of_range_names_the_field_and_the_range(make_engine: Make, level: int) -> None:
    e = make_engine()
    (one,) = e.schedule([ScheduleRequest(topic="t", body=b"x", delay_level=level)])
    col = e.schedule_batch(ScheduleBatch(topic="t", bodies=[b"ok", b"x"], delay_level=[1, level]))
    assert col.ids[0] is not None and list(col.errors) == [1]
    for err in (one.error, col.errors[1]):
        assert isinstance(err, InvalidArgument)
        assert err.field == "delay_level"
        assert err.message == f"must be 1..18 (the server's --delay-levels), got {level}"


def test_level_0_is_refused_in_a_request_and_means_not_given_in_columns(
    make_engine: Make, clock: FakeClock
) -> None:
    """As with the other time columns, 0 in a column is "not given" (a protobuf
    oneof left unset reads 0); a request says None for that."""
    e = make_engine()
    out = e.schedule(
        [
            ScheduleRequest(topic="t", body=b"x", delay_ms=5),
            ScheduleRequest(topic="t", body=b"x", delay_level=0),
        ]
    )
    assert out[0].error is None
    assert isinstance(out[1].error, InvalidArgument) and out[1].error.field == "delay_level"
    col = e.schedule_batch(ScheduleBatch(topic="t", bodies=[b"x"], delay_level=[0]))
    assert col.errors == {} and col.deliver_at_ms == [clock.now_ms()]


@pytest.mark.parametrize(
    ("when", "field", "got"),
    [
        ({"deliver_at_ms": 1, "delay_level": 2}, "deliver_at_ms", "deliver_at_ms and delay_level"),
        ({"delay_ms": 5, "delay_level": 2}, "delay_ms", "delay_ms and delay_level"),
        ({"deliver_at_ms": 1, "delay_ms": 5}, "deliver_at_ms", "deliver_at_ms and delay_ms"),
        (
            {"deliver_at_ms": 1, "delay_ms": 5, "delay_level": 2},
            "deliver_at_ms",
            "deliver_at_ms and delay_ms and delay_level",
        ),
    ],
)
def test_two_ways_to_say_when_are_refused_naming_the_field(
    make_engine: Make, when: dict[str, int], field: str, got: str
) -> None:
    e = make_engine()
    (one,) = e.schedule([ScheduleRequest(topic="t", body=b"x", **when)])  # type: ignore[arg-type]
    columns = {name: [0, value] for name, value in when.items()}
    col = e.schedule_batch(ScheduleBatch(topic="t", bodies=[b"ok", b"x"], **columns))  # type: ignore[arg-type]
    assert col.ids[0] is not None and list(col.errors) == [1]
    for err in (one.error, col.errors[1]):
        assert isinstance(err, InvalidArgument)
        assert err.field == field
        assert err.message == (f"give only one of deliver_at_ms, delay_ms, delay_level; got {got}")


def test_a_level_column_of_the_wrong_length_is_refused_whole(make_engine: Make) -> None:
    e = make_engine()
    with pytest.raises(InvalidArgument) as err:
        e.schedule_batch(ScheduleBatch(topic="t", bodies=[b"x", b"y"], delay_level=[1]))
    assert err.value.field == "delay_level"
