"""A DelaySchedule's spec as the recurring schedule the operator keeps on its
DelayTopic's shards (pure: no cluster, no I/O).

``parse_schedule`` reads a DelaySchedule into a ``DeclaredSchedule``: the
schedule's name (the resource's ``metadata.name``), the DelayTopic whose shards
hold it (``spec.topicRef.name``), whether it is suspended, and its
``delayq.recurrence.spec.ScheduleSpec`` (the schedule API's own value, checked
by its own ``check_spec``), or raises ``spec.SpecError`` naming the CRD's field
(``spec.every``, ``spec.catchUp.window``...). The CRD's schema refuses most of
it at the API server already; what only the schedule API knows (a cron field
out of range, an unknown time zone) is refused here, before any call.

The CRD's words and the schedule API's: ``cron``; ``every`` (``1500ms``,
``30s``, ``5m``, ``24h``) is ``every_ms``; ``timeZone`` ``time_zone``;
``start``/``end`` (RFC 3339) ``start_ms``/``end_ms``; ``jitter``
``jitter_ms``; ``catchUp.policy``/``catchUp.window`` (``7d`` too)
``catch_up``/``catch_up_window_ms``; ``topic``, ``message.body`` (text, sent
as its UTF-8 bytes) and ``message.headers`` the ``template``; ``suspend`` is a
pause (``schedulestate``). ``crd_field`` names a schedule API field (an
``InvalidArgument``'s ``field``, the server's or ``check_spec``'s) in the CRD's
words.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from typing import Any

from delayq.errors import InvalidArgument
from delayq.recurrence.spec import (
    CatchUp,
    MessageTemplate,
    ScheduleSpec,
    check_schedule_name,
    check_spec,
)

from .spec import SpecError

__all__ = [
    "DEFAULT_WINDOW_MS",
    "DeclaredSchedule",
    "crd_field",
    "duration_ms",
    "instant_ms",
    "parse_schedule",
]

DEFAULT_WINDOW_MS = 3_600_000
"""``catchUp.window``'s default (the schedule API's ``catch_up_window_ms``'s)."""
_DURATION = re.compile(r"([0-9]{1,9})(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_FIELDS = {
    "spec.every_ms": "spec.every",
    "spec.time_zone": "spec.timeZone",
    "spec.start_ms": "spec.start",
    "spec.end_ms": "spec.end",
    "spec.jitter_ms": "spec.jitter",
    "spec.catch_up_window_ms": "spec.catchUp.window",
    "spec.catch_up": "spec.catchUp.policy",
    "spec.template.topic": "spec.topic",
    "spec.template.body": "spec.message.body",
    "spec.template.headers": "spec.message.headers",
    "spec.template": "spec.message",
}


@dataclass(frozen=True, kw_only=True)
class DeclaredSchedule:
    """A DelaySchedule as the operator keeps it."""

    name: str
    """The schedule's name on the shards: the resource's ``metadata.name``."""
    topic_ref: str
    """The DelayTopic (same namespace) whose shards hold it."""
    spec: ScheduleSpec
    suspend: bool = False
    """Paused (``spec.suspend``)."""


def crd_field(field: str) -> str:
    """A schedule API field (``spec.every_ms``, ``spec.template.headers.x``) in the
    CRD's words (``spec.every``, ``spec.message.headers.x``); others as they are."""
    for api, crd in _FIELDS.items():
        if field == api or field.startswith(api + "."):
            return crd + field[len(api) :]
    return field


def duration_ms(text: Any, path: str, *, days: bool = True) -> int:
    """``"1500ms"``, ``"30s"``, ``"5m"``, ``"1h"`` (and ``"7d"`` with ``days``) in ms."""
    m = _DURATION.fullmatch(text) if isinstance(text, str) else None
    if m is None or (m[2] == "d" and not days):
        units = "ms, s, m, h" + (" or d" if days else "")
        raise SpecError(path, f"must be a duration (a number and {units}), got {text!r}")
    return int(m[1]) * _UNIT_MS[m[2]]


def instant_ms(text: Any, path: str) -> int:
    """An RFC 3339 time (``2026-03-29T01:30:00Z``, ``...+02:00``) in epoch ms."""
    try:
        if not isinstance(text, str):
            raise ValueError(text)
        at = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise SpecError(path, f"must be an RFC 3339 time, got {text!r}") from None
    if at.tzinfo is None:
        raise SpecError(path, f"must give its offset (Z or +hh:mm), got {text!r}")
    return round(at.timestamp() * 1000)


def _object(doc: Any, path: str) -> dict[str, Any]:
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise SpecError(path, f"must be an object, got {doc!r}")
    return doc


def _template(spec: dict[str, Any]) -> MessageTemplate:
    message = _object(spec.get("message"), "spec.message")
    body = message.get("body", "")
    if not isinstance(body, str):
        raise SpecError("spec.message.body", f"must be text, got {body!r}")
    headers = _object(message.get("headers"), "spec.message.headers")
    for k, v in headers.items():
        if not isinstance(v, str):
            raise SpecError(f"spec.message.headers.{k}", f"must be text, got {v!r}")
    topic = spec.get("topic")
    if not isinstance(topic, str):
        raise SpecError("spec.topic", f"must be a topic name, got {topic!r}")
    return MessageTemplate(topic=topic, body=body.encode(), headers=dict(headers))


def _catch_up(spec: dict[str, Any]) -> tuple[CatchUp, int]:
    doc = _object(spec.get("catchUp"), "spec.catchUp")
    policy = doc.get("policy", CatchUp.LATEST.value)
    try:
        catch_up = CatchUp(policy)
    except ValueError:
        choices = ", ".join(c.value for c in CatchUp)
        why = f"must be one of {choices}, got {policy!r}"
        raise SpecError("spec.catchUp.policy", why) from None
    window = duration_ms(doc["window"], "spec.catchUp.window") if "window" in doc else None
    return catch_up, DEFAULT_WINDOW_MS if window is None else window


def parse_schedule(body: dict[str, Any]) -> DeclaredSchedule:
    """A DelaySchedule's ``metadata.name`` and ``spec`` as the schedule to keep;
    ``SpecError`` names the CRD's field of what is wrong."""
    spec = _object(body.get("spec"), "spec")
    ref = _object(spec.get("topicRef"), "spec.topicRef").get("name")
    if not isinstance(ref, str) or not ref:
        raise SpecError("spec.topicRef.name", f"must name a DelayTopic, got {ref!r}")
    if ("cron" in spec) == ("every" in spec):
        raise SpecError("spec", "set exactly one of cron and every")
    cron = spec.get("cron", "")
    if not isinstance(cron, str):
        raise SpecError("spec.cron", f"must be a cron expression, got {cron!r}")
    suspend = spec.get("suspend", False)
    if not isinstance(suspend, bool):
        raise SpecError("spec.suspend", f"must be true or false, got {suspend!r}")
    zone = spec.get("timeZone", "UTC")
    catch_up, window = _catch_up(spec)
    every = spec.get("every")
    every_ms = 0 if every is None else duration_ms(every, "spec.every", days=False)
    if every is not None and every_ms == 0:
        raise SpecError("spec.every", "must be at least 1s, got 0")
    jitter = spec.get("jitter")
    start, end = spec.get("start"), spec.get("end")
    try:
        name = check_schedule_name((body.get("metadata") or {}).get("name"), "metadata.name")
        checked = check_spec(
            ScheduleSpec(
                template=_template(spec),
                cron=cron,
                every_ms=every_ms,
                time_zone=zone if isinstance(zone, str) else repr(zone),
                start_ms=0 if start is None else instant_ms(start, "spec.start"),
                end_ms=0 if end is None else instant_ms(end, "spec.end"),
                jitter_ms=0 if jitter is None else duration_ms(jitter, "spec.jitter", days=False),
                catch_up=catch_up,
                catch_up_window_ms=window,
            )
        )
    except InvalidArgument as e:
        raise SpecError(crd_field(e.field), str(e).removeprefix(f"{e.field}: ")) from None
    return DeclaredSchedule(name=name, topic_ref=ref, spec=checked, suspend=suspend)
