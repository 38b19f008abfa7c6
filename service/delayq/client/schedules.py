"""The client's calls about recurring schedules (pure: the shells send them) and
what they answer: ``Schedule`` (a stored schedule and where it stands) and
``SchedulePage`` (a page of a list over every shard).

A schedule belongs to the shard its name hashes to, as a message key does, so
each call about one schedule is routed by its name (``Fanout`` by key: a wrong
shard refetches the map and sends again); a preview of a spec goes to any node.
A list asks every shard for a page after the same name and merges them
(``merged``): the first ``page_size`` names of all, and for a token the last name
taken, a position every shard shares, so a list resumes right after a rebalance
moved schedules between shards (a name answered by two shards meanwhile is
listed once).

Invariants: specs travel as ``delayq.ScheduleSpec`` (``recurrence.spec``: times
in epoch ms, durations in ms); the client does not check them, the owning shard
does (INVALID_ARGUMENT naming the field, raised as ``InvalidArgument``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..recurrence.spec import ScheduleSpec
from ..recurrence.wire import spec_of_wire, spec_wire
from ..v1 import delayq_pb2 as pb
from .core import Call

__all__ = [
    "Schedule",
    "SchedulePage",
    "create",
    "delete",
    "get",
    "listing",
    "merged",
    "next_firings",
    "pause",
    "update",
]


@dataclass(frozen=True, slots=True)
class Schedule:
    """A recurring schedule as its shard stores it: ``spec``, whether it is
    ``paused`` or ``ended`` (past its end), the next nominal firing time
    (``next_fire_ms``, 0 while it fires nothing) and the last fired (0: none yet),
    how many firings it wrote and how many nominal times its catch-up policy
    skipped, when it was created and last changed (epoch ms), and ``id``, that of
    the message holding it (a new one at each firing)."""

    name: str
    spec: ScheduleSpec
    paused: bool
    ended: bool
    next_fire_ms: int
    last_fire_ms: int
    fired: int
    missed: int
    created_ms: int
    updated_ms: int
    id: str


@dataclass(frozen=True, slots=True)
class SchedulePage:
    """Schedules by name, and the token of the next page ("" once this is the last)."""

    schedules: tuple[Schedule, ...]
    next_page_token: str


def _schedule(p: Any) -> Schedule:
    return Schedule(
        name=p.name,
        spec=spec_of_wire(p.spec),
        paused=p.paused,
        ended=p.ended,
        next_fire_ms=p.next_fire_ms,
        last_fire_ms=p.last_fire_ms,
        fired=p.fired,
        missed=p.missed,
        created_ms=p.created_ms,
        updated_ms=p.updated_ms,
        id=p.id,
    )


def create(name: str, spec: ScheduleSpec, paused: bool, timeout_s: float) -> Call[Schedule]:
    req = pb.CreateScheduleRequest(name=name, spec=spec_wire(spec), paused=paused)
    return Call("CreateSchedule", req, timeout_s, _schedule)


def update(name: str, spec: ScheduleSpec, timeout_s: float) -> Call[Schedule]:
    req = pb.UpdateScheduleRequest(name=name, spec=spec_wire(spec))
    return Call("UpdateSchedule", req, timeout_s, _schedule)


def get(name: str, timeout_s: float) -> Call[Schedule]:
    return Call("GetSchedule", pb.ScheduleName(name=name), timeout_s, _schedule)


def pause(name: str, paused: bool, timeout_s: float) -> Call[Schedule]:
    method = "PauseSchedule" if paused else "ResumeSchedule"
    return Call(method, pb.ScheduleName(name=name), timeout_s, _schedule)


def delete(name: str, timeout_s: float) -> Call[None]:
    return Call("DeleteSchedule", pb.ScheduleName(name=name), timeout_s, lambda _: None)


def next_firings(
    name: str | None, spec: ScheduleSpec | None, count: int, timeout_s: float
) -> Call[list[int]]:
    """The next ``count`` nominal times of the schedule ``name``, or of ``spec``
    (a preview; exactly one of the two)."""
    if (name is None) == (spec is None):
        raise TypeError("next_firings: give a name or a spec, not both")
    req = pb.NextFiringsRequest(count=count)
    if spec is not None:
        req.spec.CopyFrom(spec_wire(spec))
    elif name is not None:
        req.name = name
    return Call("NextFirings", req, timeout_s, lambda r: list(r.times_ms))


def listing(page_size: int, after: str, timeout_s: float) -> Call[SchedulePage]:
    """One shard's page: ``page_size`` schedules named after ``after``."""

    def parse(r: Any) -> SchedulePage:
        return SchedulePage(tuple(map(_schedule, r.schedules)), r.next_page_token)

    req = pb.ListSchedulesRequest(page_size=page_size, page_token=after)
    return Call("ListSchedules", req, timeout_s, parse)


def merged(pages: Sequence[SchedulePage | None], page_size: int) -> SchedulePage:
    """Every shard's page after one name (``listing``) as one: the first
    ``page_size`` names of all, each once; the token is the last name given when a
    shard has more (it held more than were taken, or said so). A shard gone from
    the map meanwhile (None) is left out."""
    by_name: dict[str, Schedule] = {}
    more = False
    for page in pages:
        if page is None:
            continue
        more = more or bool(page.next_page_token)
        for s in page.schedules:
            by_name.setdefault(s.name, s)
    names = sorted(by_name)
    taken = names[:page_size]
    more = more or len(names) > page_size
    token = taken[-1] if more and taken else ""
    return SchedulePage(tuple(by_name[n] for n in taken), token)
