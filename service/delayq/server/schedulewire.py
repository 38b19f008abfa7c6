"""The server's wire of recurring schedules (pure): ``delayq.v1``'s
``ScheduleSpec`` in, checked, and a stored ``Schedule`` (the engine's,
``types.Schedule``) out, with the bounds of a list's page and of a preview's
count. The spec's own conversion, shared with the client, is ``recurrence.wire``.

Invariants: a spec comes in checked (``check_spec``: a bad field refused
INVALID_ARGUMENT naming it, ``spec.cron``, ``spec.template.topic``; a field left
0 is the spec's default, an unknown catch-up value refused naming
``spec.catch_up``). An answer names every policy explicitly, and
``next_fire_ms`` is 0 while a schedule fires nothing (paused or ended). A page
token is the last name of the page before (a position every shard shares, so a
list merged over shards resumes anywhere).
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidArgument
from ..recurrence.spec import ScheduleSpec, check_schedule_name, check_spec
from ..recurrence.wire import spec_of_wire, spec_wire
from ..types import Schedule
from ..v1 import delayq_pb2 as pb

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
]

DEFAULT_PAGE = 100
MAX_PAGE = 1000
DEFAULT_COUNT = 10
MAX_COUNT = 1000


def spec_of(p: Any, field: str = "spec") -> ScheduleSpec:
    """A wire ``ScheduleSpec`` as the recurrence value, checked (``check_spec``,
    naming ``field``'s member)."""
    return check_spec(spec_of_wire(p, field), field)


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
