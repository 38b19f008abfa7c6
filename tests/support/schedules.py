"""Helpers for tests of recurring schedules: specs in one line, and what a
consumer got read back as the schedules' nominal times."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from delayq.engine import ReceivedMessage
from delayq.recurrence.spec import (
    SCHEDULE_HEADER,
    SCHEDULE_TIME_HEADER,
    MessageTemplate,
    ScheduleSpec,
)


def every(
    ms: int,
    *,
    topic: str = "t",
    body: bytes = b"x",
    headers: Mapping[str, str] | None = None,
    **over: Any,
) -> ScheduleSpec:
    """An interval schedule firing into ``topic``."""
    return ScheduleSpec(MessageTemplate(topic, body, dict(headers or {})), every_ms=ms, **over)


def fired_times(got: Sequence[ReceivedMessage]) -> list[int]:
    """The nominal times of the firings received, in the order received."""
    return [int(m.headers[SCHEDULE_TIME_HEADER]) for m in got]


def by_schedule(got: Sequence[ReceivedMessage]) -> dict[str, list[int]]:
    """Schedule name -> the nominal times of its firings received, sorted (a
    time fired twice is there twice)."""
    out: dict[str, list[int]] = {}
    for m in got:
        out.setdefault(m.headers[SCHEDULE_HEADER], []).append(int(m.headers[SCHEDULE_TIME_HEADER]))
    return {name: sorted(ts) for name, ts in out.items()}
