"""The wire of recurring schedules (pure): ``delayq.v1``'s ``ScheduleSpec`` into
the recurrence values (``recurrence.spec``) and a stored ``Schedule`` (the
engine's, ``types.Schedule``) back, with the bounds of a list's page and of a
preview's count.

Invariants: a spec comes in checked (``check_spec``: a bad field refused
INVALID_ARGUMENT naming it, ``spec.cron``, ``spec.template.topic``); a field
left 0 or empty on the wire is the spec's default (``time_zone`` UTC, the catch-up
policy LATEST and its window); a catch-up value this server does not know is
refused naming ``spec.catch_up``, never read as the default. An answer names
every policy explicitly, and ``next_fire_ms`` is 0 while a schedule fires
nothing (paused or ended). A page token is the last name of the page before (a
position every shard shares, so a list merged over shards resumes anywhere).
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidArgument
from ..recurrence.spec import (
    CatchUp,
    MessageTemplate,
    ScheduleSpec,
    check_schedule_name,
    check_spec,
)
from ..types import Schedule
from ..v1 import delayq_pb2 as pb
from .convert import known_enum

__all__ = [
    "DEFAULT_COUNT",
    "DEFAULT_PAGE",
    "MAX_COUNT",
    "MAX_PAGE",
    "count_of",
    "page_size_of",
    "page_token_of",
    "schedule_wire",
    "spec_of",
    "spec_wire",
]

DEFAULT_PAGE = 100
MAX_PAGE = 1000
DEFAULT_COUNT = 10
MAX_COUNT = 1000

_CATCH_UP: dict[CatchUp, int] = {
    CatchUp.NONE: pb.CATCH_UP_NONE,
    CatchUp.LATEST: pb.CATCH_UP_LATEST,
    CatchUp.ALL: pb.CATCH_UP_ALL,
}
_CATCH_UP_IN = {v: k for k, v in _CATCH_UP.items()} | {pb.CATCH_UP_UNSPECIFIED: CatchUp.LATEST}


def spec_of(p: Any, field: str = "spec") -> ScheduleSpec:
    """A wire ``ScheduleSpec`` as the recurrence value, checked (``check_spec``,
    naming ``field``'s member)."""
    given: dict[str, Any] = {}
    if p.time_zone:
        given["time_zone"] = p.time_zone
    if p.catch_up_window_ms:
        given["catch_up_window_ms"] = p.catch_up_window_ms
    t = p.template
    spec = ScheduleSpec(
        template=MessageTemplate(topic=t.topic, body=t.body, headers=dict(t.headers)),
        cron=p.cron,
        every_ms=p.every_ms,
        start_ms=p.start_ms,
        end_ms=p.end_ms,
        jitter_ms=p.jitter_ms,
        catch_up=known_enum(_CATCH_UP_IN, p.catch_up, f"{field}.catch_up"),
        **given,
    )
    return check_spec(spec, field)


def spec_wire(spec: ScheduleSpec, into: Any) -> None:
    """``spec`` into the wire ``ScheduleSpec`` ``into`` (in place)."""
    into.cron = spec.cron
    into.every_ms = spec.every_ms
    into.time_zone = spec.time_zone
    into.start_ms = spec.start_ms
    into.end_ms = spec.end_ms
    into.jitter_ms = spec.jitter_ms
    into.catch_up = _CATCH_UP[spec.catch_up]
    into.catch_up_window_ms = spec.catch_up_window_ms
    t = spec.template
    into.template.topic = t.topic
    into.template.body = t.body
    into.template.headers.update(t.headers)


def schedule_wire(s: Schedule, into: Any = None) -> Any:
    """A stored schedule as the wire's ``Schedule`` (filled in ``into`` when given)."""
    out = pb.Schedule() if into is None else into
    st = s.state
    out.name = s.name
    spec_wire(s.spec, out.spec)
    out.paused = st.paused
    out.ended = st.ended
    out.next_fire_ms = 0 if st.paused or st.ended else st.next_fire_ms
    out.last_fire_ms = st.last_fire_ms
    out.fired = st.fired
    out.missed = st.missed
    out.created_ms = st.created_ms
    out.updated_ms = st.updated_ms
    out.id = s.id
    return out


def _bounded(n: int, default: int, most: int, field: str) -> int:
    if n < 0 or n > most:
        raise InvalidArgument(field, f"is {n}; 0 (the default, {default}) to {most}")
    return n or default


def page_size_of(n: int) -> int:
    """A ListSchedules ``page_size``: 0 is ``DEFAULT_PAGE``, at most ``MAX_PAGE``."""
    return _bounded(n, DEFAULT_PAGE, MAX_PAGE, "page_size")


def count_of(n: int) -> int:
    """A NextFirings ``count``: 0 is ``DEFAULT_COUNT``, at most ``MAX_COUNT``."""
    return _bounded(n, DEFAULT_COUNT, MAX_COUNT, "count")


def page_token_of(token: str) -> str:
    """A ListSchedules ``page_token``: empty (from the first name) or a name."""
    return check_schedule_name(token, "page_token") if token else ""
