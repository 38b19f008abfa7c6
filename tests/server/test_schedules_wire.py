"""Recurring schedules on delayq's wire (``recurrence.wire``, ``server.schedulewire``):
every field of a spec goes out and comes back as it was, every catch-up policy
included; a field left 0 reads as the spec's default; a bad spec is refused
``InvalidArgument`` naming its field (an unknown catch-up value too, never read as
the default); a stored schedule goes out with its state (no next firing while it
fires nothing); a page's size, a preview's count and a page token are bounded."""

from __future__ import annotations

import pytest

from delayq.errors import InvalidArgument
from delayq.recurrence.spec import CatchUp, MessageTemplate, ScheduleSpec, ScheduleState
from delayq.recurrence.wire import spec_of_wire, spec_wire
from delayq.server.schedulewire import (
    DEFAULT_COUNT,
    DEFAULT_PAGE,
    count_of,
    page_size_of,
    page_token_of,
    schedule_wire,
    spec_of,
)
from delayq.types import Schedule
from delayq.v1 import delayq_pb2 as pb

TEMPLATE = MessageTemplate(topic="reports", body=b"\x00run\xff", headers={"tenant": "acme"})


def across(spec: ScheduleSpec) -> pb.ScheduleSpec:
    """``spec`` written, serialised and parsed back."""
    return pb.ScheduleSpec.FromString(spec_wire(spec).SerializeToString())


@pytest.mark.parametrize("catch_up", list(CatchUp))
def test_every_field_comes_back(catch_up: CatchUp) -> None:
    spec = ScheduleSpec(
        template=TEMPLATE,
        cron="30 2 * * *",
        time_zone="America/New_York",
        start_ms=1_800_000_000_000,
        end_ms=1_900_000_000_000,
        jitter_ms=5000,
        catch_up=catch_up,
        catch_up_window_ms=600_000,
    )
    assert spec_of(across(spec)) == spec
    every = ScheduleSpec(template=TEMPLATE, every_ms=30_000, catch_up=catch_up)
    assert spec_of(across(every)) == every


def test_fields_left_out_are_the_defaults() -> None:
    p = pb.ScheduleSpec(every_ms=1000, template=pb.MessageTemplate(topic="t"))
    got = spec_of(p)
    assert got == ScheduleSpec(template=MessageTemplate(topic="t"), every_ms=1000)
    assert (got.time_zone, got.catch_up) == ("UTC", CatchUp.LATEST)
    assert across(got).catch_up == pb.CATCH_UP_LATEST, "an answer names the policy"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"cron": "61 * * * *"}, "spec.cron"),
        ({"cron": "* * * * *", "every_ms": 5000}, "spec"),
        ({"every_ms": 999}, "spec.every_ms"),
        ({"time_zone": "Mars/Olympus"}, "spec.time_zone"),
        ({"catch_up": 7}, "spec.catch_up"),
        ({"catch_up_window_ms": 10}, "spec.catch_up_window_ms"),
        ({"jitter_ms": -1}, "spec.jitter_ms"),
        ({"start_ms": 2000, "end_ms": 1000}, "spec.end_ms"),
        ({"template": pb.MessageTemplate(topic="_schedules")}, "spec.template.topic"),
        ({"template": pb.MessageTemplate(topic="")}, "spec.template.topic"),
        (
            {"template": pb.MessageTemplate(topic="t", headers={"delayq-schedule": "x"})},
            "spec.template.headers",
        ),
    ],
)
def test_a_bad_spec_is_refused_naming_its_field(change: dict[str, object], field: str) -> None:
    p = pb.ScheduleSpec(every_ms=60_000, template=pb.MessageTemplate(topic="t"))
    for name, value in change.items():
        if name == "template":
            p.template.CopyFrom(value)  # type: ignore[arg-type]
        else:
            setattr(p, name, value)
    with pytest.raises(InvalidArgument) as err:
        spec_of(p)
    assert err.value.field == field or err.value.field.startswith(field + "."), err.value
    # the check can pass: the same spec without the change is taken
    spec_of(pb.ScheduleSpec(every_ms=60_000, template=pb.MessageTemplate(topic="t")))


def test_an_unknown_catch_up_is_refused_not_read_as_the_default() -> None:
    with pytest.raises(InvalidArgument, match=r"^spec\.catch_up: is 9"):
        spec_of_wire(pb.ScheduleSpec(catch_up=9))


def test_a_schedule_goes_out_with_its_state() -> None:
    spec = ScheduleSpec(template=TEMPLATE, every_ms=10_000)
    state = ScheduleState(
        next_fire_ms=50_000, last_fire_ms=40_000, fired=4, missed=1, created_ms=1, updated_ms=2
    )
    s = schedule_wire(Schedule("nightly", spec, state, "id-1"))
    assert (s.name, s.id, s.next_fire_ms, s.last_fire_ms) == ("nightly", "id-1", 50_000, 40_000)
    assert (s.fired, s.missed, s.created_ms, s.updated_ms) == (4, 1, 1, 2)
    assert spec_of(s.spec) == spec and not s.paused and not s.ended
    for st in (ScheduleState(paused=True, next_fire_ms=9), ScheduleState(ended=True)):
        out = schedule_wire(Schedule("n", spec, st, "i"))
        assert out.next_fire_ms == 0 and (out.paused, out.ended) == (st.paused, st.ended)


def test_page_size_count_and_token_are_bounded() -> None:
    assert (page_size_of(0), page_size_of(7), page_size_of(1000)) == (DEFAULT_PAGE, 7, 1000)
    assert (count_of(0), count_of(1), count_of(1000)) == (DEFAULT_COUNT, 1, 1000)
    for bad, call, field in ((1001, page_size_of, "page_size"), (-1, page_size_of, "page_size"),
                             (1001, count_of, "count"), (-5, count_of, "count")):  # fmt: skip
        with pytest.raises(InvalidArgument) as err:
            call(bad)
        assert err.value.field == field
    assert page_token_of("") == "" and page_token_of("daily.report") == "daily.report"
    with pytest.raises(InvalidArgument) as err:
        page_token_of("../etc")
    assert err.value.field == "page_token"
