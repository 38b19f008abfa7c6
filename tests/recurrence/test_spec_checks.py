"""A schedule's spec and name checked (``recurrence.spec``): every bad field is
refused with ``InvalidArgument`` naming it under the caller's prefix; good specs
pass, their cron spaces normalised; the template is a frozen copy."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delayq.errors import InvalidArgument
from delayq.recurrence.calendar import firings
from delayq.recurrence.spec import (
    MAX_TEMPLATE_BODY_BYTES,
    MAX_TEMPLATE_HEADERS,
    CatchUp,
    MessageTemplate,
    ScheduleSpec,
    check_schedule_name,
    check_spec,
)
from tests.recurrence.strategies import expressions
from tests.support.sizes import size

GOOD = ScheduleSpec(MessageTemplate("orders", b"tick", {"k": "v"}), cron="*/5 * * * *")


def spec(**changes: Any) -> ScheduleSpec:
    return dataclasses.replace(GOOD, **changes)


def template(**changes: Any) -> ScheduleSpec:
    return spec(template=dataclasses.replace(GOOD.template, **changes))


BAD = [
    pytest.param(spec(cron=""), "spec.cron", "exactly one", id="neither-cron-nor-every"),
    pytest.param(spec(every_ms=60_000), "spec.cron", "exactly one", id="both"),
    pytest.param(spec(cron="* * * *"), "spec.cron", "4 fields", id="four-fields"),
    pytest.param(spec(cron="* * * * * * *"), "spec.cron", "7 fields", id="seven-fields"),
    pytest.param(spec(cron="60 * * * *"), "spec.cron", "minute field '60'", id="minute"),
    pytest.param(spec(cron="0 24 * * *"), "spec.cron", "hour field '24'", id="hour"),
    pytest.param(spec(cron="0 0 32 * *"), "spec.cron", "day-of-month field '32'", id="dom"),
    pytest.param(spec(cron="0 0 * 13 *"), "spec.cron", "month field '13'", id="month"),
    pytest.param(spec(cron="0 0 * * 8"), "spec.cron", "day-of-week field '8'", id="dow"),
    pytest.param(spec(cron="61 0 0 * * *"), "spec.cron", "second field '61'", id="second"),
    pytest.param(spec(cron="0 0 30 2 *"), "spec.cron", "day-of-month", id="never"),
    pytest.param(spec(cron="5-1 * * * *"), "spec.cron", "minute", id="backwards-range"),
    pytest.param(spec(cron="*/0 * * * *"), "spec.cron", "minute", id="step-zero"),
    pytest.param(spec(cron="x" * 300), "spec.cron", "at most", id="long"),
    pytest.param(spec(cron="", every_ms=999), "spec.every_ms", "1000..", id="every-short"),
    pytest.param(spec(cron="", every_ms=400 * 86_400_000), "spec.every_ms", "..", id="every-long"),
    pytest.param(spec(time_zone="Mars/Olympus"), "spec.time_zone", "IANA", id="zone"),
    pytest.param(spec(time_zone="europe/london"), "spec.time_zone", "IANA", id="zone-case"),
    pytest.param(spec(time_zone="/etc/passwd"), "spec.time_zone", "IANA", id="zone-path"),
    pytest.param(spec(time_zone=""), "spec.time_zone", "IANA", id="zone-empty"),
    pytest.param(spec(start_ms=-1), "spec.start_ms", "0..", id="start"),
    pytest.param(spec(end_ms=-5), "spec.end_ms", "0..", id="end"),
    pytest.param(spec(start_ms=2000, end_ms=2000), "spec.end_ms", "after", id="end-not-after"),
    pytest.param(spec(jitter_ms=3_600_001), "spec.jitter_ms", "0..3600000", id="jitter"),
    pytest.param(spec(jitter_ms=-1), "spec.jitter_ms", "0..", id="jitter-negative"),
    pytest.param(
        spec(cron="", every_ms=10_000, jitter_ms=10_000), "spec.jitter_ms", "0..9999", id="jitter-p"
    ),
    pytest.param(spec(catch_up="all"), "spec.catch_up", "none, latest or all", id="catch-up"),
    pytest.param(spec(catch_up_window_ms=999), "spec.catch_up_window_ms", "1000..", id="window"),
    pytest.param(
        spec(catch_up_window_ms=8 * 86_400_000), "spec.catch_up_window_ms", "..", id="window-long"
    ),
    pytest.param(spec(every_ms=True, cron=""), "spec.every_ms", "", id="every-bool"),
    pytest.param(template(topic="_schedules"), "spec.template.topic", "letter", id="topic"),
    pytest.param(template(topic=""), "spec.template.topic", "non-empty", id="topic-empty"),
    pytest.param(
        template(body=b"x" * (MAX_TEMPLATE_BODY_BYTES + 1)),
        "spec.template.body",
        "at most",
        id="body",
    ),
    pytest.param(template(body="text"), "spec.template.body", "bytes", id="body-str"),
    pytest.param(
        template(headers={f"h{i}": "" for i in range(MAX_TEMPLATE_HEADERS + 1)}),
        "spec.template.headers",
        "entries",
        id="headers-count",
    ),
    pytest.param(
        template(headers={"big": "x" * (16 << 10)}),
        "spec.template.headers",
        "bytes",
        id="header-size",
    ),
    pytest.param(
        template(headers={"delayq-schedule": "x"}), "spec.template.headers", "delayq", id="reserved"
    ),
    pytest.param(
        template(headers={"Delayq-Dedup-Id": "x"}),
        "spec.template.headers",
        "delayq",
        id="reserved-c",
    ),
    pytest.param(
        template(headers={"": "x"}), "spec.template.headers", "non-empty", id="header-key"
    ),
    pytest.param(template(headers={"k": 1}), "spec.template.headers", "strings", id="header-value"),
    pytest.param(
        template(headers={"k": "\ud800"}), "spec.template.headers", "Unicode", id="header-surrogate"
    ),
]


@pytest.mark.parametrize(("bad", "field", "says"), BAD)
def test_a_bad_field_is_named(bad: ScheduleSpec, field: str, says: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        check_spec(bad)
    assert caught.value.field == field
    assert says in caught.value.message


def test_the_prefix_is_the_callers() -> None:
    with pytest.raises(InvalidArgument) as caught:
        check_spec(spec(cron="61 * * * *"), "schedule.spec")
    assert caught.value.field == "schedule.spec.cron"
    with pytest.raises(InvalidArgument) as caught:
        check_spec("every minute", "req")  # type: ignore[arg-type]
    assert caught.value.field == "req"


GOOD_SPECS = [
    GOOD,
    spec(cron="0 30 2 * * MON-FRI", time_zone="America/New_York"),
    spec(cron="0 12 L * *"),
    spec(cron="0 9 * * 5L"),
    spec(cron="0 9 * * MON#2"),
    spec(cron="0 0 29 2 *"),
    spec(cron="0 0 1 JAN,JUL *", time_zone="Australia/Lord_Howe"),
    spec(cron="", every_ms=1000),
    spec(cron="", every_ms=60_000, jitter_ms=59_999, start_ms=5, end_ms=6),
    spec(catch_up=CatchUp.ALL, catch_up_window_ms=7 * 86_400_000, jitter_ms=3_600_000),
    spec(catch_up=CatchUp.NONE, catch_up_window_ms=1000),
    template(headers={"delay": "x", "dlq.topic": "y"}, body=b""),
]


@pytest.mark.parametrize("good", GOOD_SPECS)
def test_a_good_spec_passes(good: ScheduleSpec) -> None:
    assert check_spec(good) == good


def test_cron_spaces_are_normalised() -> None:
    assert check_spec(spec(cron="  0   9\t* *  1 ")).cron == "0 9 * * 1"


def test_the_template_holds_a_frozen_copy_of_its_headers() -> None:
    given = {"a": "1"}
    t = MessageTemplate("t", headers=given)
    given["b"] = "2"
    assert dict(t.headers) == {"a": "1"}
    with pytest.raises(TypeError):
        t.headers["c"] = "3"  # type: ignore[index]
    assert t == MessageTemplate("t", headers={"a": "1"})


@pytest.mark.parametrize("name", ["nightly", "a", "Job-1.b_c", "9" * 128])
def test_a_good_schedule_name(name: str) -> None:
    assert check_schedule_name(name) == name


@pytest.mark.parametrize("name", ["", "_hidden", "-x", "a b", "a/b", "é", "x" * 129, None, 5])
def test_a_bad_schedule_name_is_named(name: object) -> None:
    with pytest.raises(InvalidArgument) as caught:
        check_schedule_name(name, "req.name")
    assert caught.value.field == "req.name"


CRON_CHARS = "0123456789*/-,#LW? MONTUEJANDCSF\t"


@settings(max_examples=size("DELAYQ_SPEC_FUZZ", 500, 5000), deadline=None)
@given(
    cron=st.one_of(st.text(alphabet=CRON_CHARS, max_size=40), expressions()),
    zone=st.one_of(st.sampled_from(["UTC", "Europe/London", "Asia/Kolkata"]), st.text(max_size=20)),
    every_ms=st.integers(-(2**40), 2**40),
    times=st.tuples(
        st.integers(-1, 2**41),  # start
        st.one_of(st.just(0), st.integers(-1, 2**41)),  # end
        st.integers(-1, 7_200_000),  # jitter
        st.integers(0, 8 * 86_400_000),  # catch-up window
    ),
)
def test_any_input_is_a_spec_or_an_invalid_argument(
    cron: str, zone: str, every_ms: int, times: tuple[int, int, int, int]
) -> None:
    """Whatever is sent, the check answers with a spec or InvalidArgument naming
    a field of it, never another error; a spec that passes has nominal times."""
    start, end, jitter, window = times
    given_spec = ScheduleSpec(
        MessageTemplate("t"),
        cron=cron,
        every_ms=every_ms if not cron.strip() else 0,
        time_zone=zone,
        start_ms=start,
        end_ms=end,
        jitter_ms=jitter,
        catch_up_window_ms=window,
    )
    try:
        checked = check_spec(given_spec)
    except InvalidArgument as exc:
        assert exc.field.startswith("spec.")
        return
    firings(checked, start, 3)  # (the walk takes what the check passed)
