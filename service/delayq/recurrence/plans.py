"""The body of a schedule's plan message (pure): its spec and state as versioned
JSON; and what makes each firing the plan writes one: its dedup id, dedup
window, headers and jitter.

A plan body is UTF-8 JSON, one object::

    {"v": 1,
     "spec": {"cron": str, "every_ms": int, "time_zone": str, "start_ms": int,
              "end_ms": int, "jitter_ms": int, "catch_up": "none"|"latest"|"all",
              "catch_up_window_ms": int,
              "template": {"topic": str, "body": base64 str, "headers": {str: str}}},
     "state": {"paused": bool, "ended": bool, "next_fire_ms": int,
               "last_fire_ms": int, "fired": int, "missed": int, "anchor_ms": int,
               "created_ms": int, "updated_ms": int, "resumed_ms": int}}
    (a plan written before ``resumed_ms`` was kept reads it as 0)

``encode_plan`` writes every field; ``decode_plan`` reads exactly these (a later
version adds a ``v``), raising ``CorruptData`` on anything else: a plan is
written by the engine from a checked spec, so a bad one is damage, not input.

A firing of schedule ``name`` at nominal time ``t`` has the dedup id
``name@t`` (``firing_id``), held for ``dedup_window_ms`` (longer than any
catch-up reaches back, plus the lead), so a refire of ``t`` after a crash, a
torn append or a failover finds it and writes nothing; its headers are the
template's plus ``delayq-schedule`` and ``delayq-schedule-time``
(``firing_headers``); its jitter is fixed by ``name`` and ``t`` (a hash), so a
refire has the same due time.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from typing import Any

from ..errors import CorruptData
from .spec import (
    SCHEDULE_HEADER,
    SCHEDULE_TIME_HEADER,
    CatchUp,
    MessageTemplate,
    ScheduleSpec,
    ScheduleState,
)
from .states import MAX_LEAD_MS

__all__ = [
    "MIN_DEDUP_WINDOW_MS",
    "PLAN_VERSION",
    "decode_plan",
    "dedup_window_ms",
    "encode_plan",
    "firing_headers",
    "firing_id",
    "jitter_of",
]

PLAN_VERSION = 1
MIN_DEDUP_WINDOW_MS = 3_600_000
"""The shortest a firing holds its dedup id: an hour, whatever the catch-up window."""
_SPEC_INTS = ("every_ms", "start_ms", "end_ms", "jitter_ms", "catch_up_window_ms")
_STATE_BOOLS = ("paused", "ended")
_STATE_INTS = (
    "next_fire_ms",
    "last_fire_ms",
    "fired",
    "missed",
    "anchor_ms",
    "created_ms",
    "updated_ms",
    "resumed_ms",
)


def encode_plan(spec: ScheduleSpec, state: ScheduleState) -> bytes:
    template = spec.template
    doc = {
        "v": PLAN_VERSION,
        "spec": {
            "cron": spec.cron,
            **{name: getattr(spec, name) for name in _SPEC_INTS},
            "time_zone": spec.time_zone,
            "catch_up": spec.catch_up.value,
            "template": {
                "topic": template.topic,
                "body": base64.b64encode(template.body).decode("ascii"),
                "headers": dict(template.headers),
            },
        },
        "state": {name: getattr(state, name) for name in (*_STATE_BOOLS, *_STATE_INTS)},
    }
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def decode_plan(data: bytes) -> tuple[ScheduleSpec, ScheduleState]:
    """The spec and state of a plan body; CorruptData when it is not one."""
    try:
        doc = json.loads(data)
        if not isinstance(doc, dict) or doc.get("v") != PLAN_VERSION:
            raise ValueError("not a version 1 plan")
        return _spec(_object(doc, "spec")), _state(_object(doc, "state"))
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise CorruptData(f"a schedule's plan body is damaged: {exc}") from None


def _spec(raw: dict[str, Any]) -> ScheduleSpec:
    template = _object(raw, "template")
    headers = _object(template, "headers")
    if not all(isinstance(v, str) for v in headers.values()):
        raise ValueError("a header's value is not a string")
    return ScheduleSpec(
        template=MessageTemplate(
            topic=_typed(template, "topic", str),
            body=base64.b64decode(_typed(template, "body", str), validate=True),
            headers=headers,
        ),
        cron=_typed(raw, "cron", str),
        time_zone=_typed(raw, "time_zone", str),
        catch_up=CatchUp(_typed(raw, "catch_up", str)),
        **{name: _int(raw, name) for name in _SPEC_INTS},
    )


def _state(raw: dict[str, Any]) -> ScheduleState:
    return ScheduleState(
        paused=_typed(raw, "paused", bool),
        ended=_typed(raw, "ended", bool),
        next_fire_ms=_int(raw, "next_fire_ms"),
        last_fire_ms=_int(raw, "last_fire_ms"),
        fired=_int(raw, "fired"),
        missed=_int(raw, "missed"),
        anchor_ms=_int(raw, "anchor_ms"),
        created_ms=_int(raw, "created_ms"),
        updated_ms=_int(raw, "updated_ms"),
        resumed_ms=_int(raw, "resumed_ms") if "resumed_ms" in raw else 0,  # (plans before it)
    )


def _object(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return _typed(doc, name, dict)  # type: ignore[no-any-return]


def _int(doc: dict[str, Any], name: str) -> int:
    value = _typed(doc, name, int)
    if isinstance(value, bool):
        raise ValueError(f"{name} is not an integer")
    return value  # type: ignore[no-any-return]


def _typed(doc: dict[str, Any], name: str, kind: type) -> Any:
    value = doc[name]
    if not isinstance(value, kind):
        raise ValueError(f"{name} is not a {kind.__name__}")
    return value


def jitter_of(name: str, t: int, jitter_ms: int) -> int:
    """The jitter of schedule ``name``'s firing at nominal time ``t``: in
    [0, ``jitter_ms``], the same every time it is asked."""
    if jitter_ms <= 0:
        return 0
    digest = hashlib.blake2b(f"{name}@{t}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % (jitter_ms + 1)


def firing_id(name: str, t: int) -> str:
    """The dedup id of schedule ``name``'s firing at nominal time ``t``."""
    return f"{name}@{t}"


def dedup_window_ms(spec: ScheduleSpec) -> int:
    """How long a firing of ``spec`` holds its dedup id: past any refire of it."""
    return max(spec.catch_up_window_ms, MIN_DEDUP_WINDOW_MS) + MAX_LEAD_MS


def firing_headers(spec: ScheduleSpec, name: str, t: int) -> dict[str, str]:
    """The headers of schedule ``name``'s firing at nominal time ``t``."""
    return {**spec.template.headers, SCHEDULE_HEADER: name, SCHEDULE_TIME_HEADER: str(t)}
