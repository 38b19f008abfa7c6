"""A schedule's spec on ``delayq.v1``'s wire and back (pure): ``ScheduleSpec``
and ``MessageTemplate`` as the protobuf's, for the server and the client alike
(each side converts once, with this module; the server then checks what came in,
``spec.check_spec``).

Invariants: a field left 0 or empty on the wire reads as the spec's default
(``time_zone`` UTC, the catch-up policy LATEST and its window); a catch-up value
unknown here is refused ``InvalidArgument`` naming ``<field>.catch_up``, never
read as the default; a spec written names its policy explicitly.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidArgument
from ..v1 import delayq_pb2 as pb
from .spec import CatchUp, MessageTemplate, ScheduleSpec

__all__ = ["spec_of_wire", "spec_wire"]

_CATCH_UP: dict[CatchUp, int] = {
    CatchUp.NONE: pb.CATCH_UP_NONE,
    CatchUp.LATEST: pb.CATCH_UP_LATEST,
    CatchUp.ALL: pb.CATCH_UP_ALL,
}
_CATCH_UP_IN = {v: k for k, v in _CATCH_UP.items()} | {pb.CATCH_UP_UNSPECIFIED: CatchUp.LATEST}


def spec_of_wire(p: Any, field: str = "spec") -> ScheduleSpec:
    """A wire ``ScheduleSpec`` as the value (not checked: ``check_spec``)."""
    catch_up = _CATCH_UP_IN.get(p.catch_up)
    if catch_up is None:
        raise InvalidArgument(f"{field}.catch_up", f"is {p.catch_up}; one of 0, 1, 2, 3")
    given: dict[str, Any] = {}
    if p.time_zone:
        given["time_zone"] = p.time_zone
    if p.catch_up_window_ms:
        given["catch_up_window_ms"] = p.catch_up_window_ms
    t = p.template
    return ScheduleSpec(
        template=MessageTemplate(topic=t.topic, body=t.body, headers=dict(t.headers)),
        cron=p.cron,
        every_ms=p.every_ms,
        start_ms=p.start_ms,
        end_ms=p.end_ms,
        jitter_ms=p.jitter_ms,
        catch_up=catch_up,
        **given,
    )


def spec_wire(spec: ScheduleSpec, into: Any = None) -> Any:
    """``spec`` as a wire ``ScheduleSpec`` (filled in ``into`` when given)."""
    out = pb.ScheduleSpec() if into is None else into
    out.cron = spec.cron
    out.every_ms = spec.every_ms
    out.time_zone = spec.time_zone
    out.start_ms = spec.start_ms
    out.end_ms = spec.end_ms
    out.jitter_ms = spec.jitter_ms
    out.catch_up = _CATCH_UP[spec.catch_up]
    out.catch_up_window_ms = spec.catch_up_window_ms
    t = spec.template
    out.template.topic = t.topic
    out.template.body = t.body
    out.template.headers.update(t.headers)
    return out
