"""Recurring schedules' pure core: a schedule's spec and state (``spec``), its
nominal times in a time zone (``calendar``, over ``cronexpr`` and ``zones``),
its life (``states``), one step of its plan with the catch-up policy
(``catchup``) and the plan message's body (``plans``). No I/O but reading the
zone database; no numpy: the client imports it (its spec is the typed client's).
The engine stores a schedule as a plan message and fires it (docs/schedules.md).
"""

from __future__ import annotations

from .calendar import firings, next_after
from .catchup import MAX_FIRINGS_PER_STEP, Step, step
from .plans import decode_plan, encode_plan, jitter_of
from .spec import (
    SCHEDULE_HEADER,
    SCHEDULE_TIME_HEADER,
    CatchUp,
    MessageTemplate,
    ScheduleSpec,
    ScheduleState,
    check_schedule_name,
    check_spec,
)
from .states import LEAD_MS, LEAD_SPREAD_MS, MAX_LEAD_MS, PARK_MS, lead_of, plan_due_ms

__all__ = [
    "LEAD_MS",
    "LEAD_SPREAD_MS",
    "MAX_FIRINGS_PER_STEP",
    "MAX_LEAD_MS",
    "PARK_MS",
    "SCHEDULE_HEADER",
    "SCHEDULE_TIME_HEADER",
    "CatchUp",
    "MessageTemplate",
    "ScheduleSpec",
    "ScheduleState",
    "Step",
    "check_schedule_name",
    "check_spec",
    "decode_plan",
    "encode_plan",
    "firings",
    "jitter_of",
    "lead_of",
    "next_after",
    "plan_due_ms",
    "step",
]
