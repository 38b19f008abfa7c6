"""The rows a recurring schedule writes (pure): its plan message and its firings,
as validated rows for the accept stage (``timers.columns.Prepared``); shared by
the schedule calls (``scheduling``) and the firer (``firing``).

A schedule is its **plan message**: a pending message of the reserved topic
``PLANS_TOPIC`` (``_schedules``: clients' topic names start with a letter or a
digit, ``argchecks``, so no client can name it), whose key is the schedule's
name and whose body the schedule (``recurrence.plans``), due its lead
(``recurrence.states.lead_of``: 1 to 20 s, by its name) before its next nominal
firing time, or parked ``PARK_MS`` ahead while paused or ended
(``recurrence.states``).

A **firing** is an ordinary message of the template's topic, keyed by the
schedule's name (so it lives on the plan's shard, and update, pause and delete
find it by key), with the template's headers and the firing headers
(``delayq-schedule``: the name, ``delayq-schedule-time``: the nominal time, epoch
ms; clients may not set them, ``validation``), and the dedup id
``<name>@<nominal ms>`` held for ``recurrence.plans.dedup_window_ms``: a refire
of one nominal time finds it.
"""

from __future__ import annotations

from ..formats.headers import encode_headers
from ..formats.keyheaders import dedup_headers
from ..recurrence.plans import (
    dedup_window_ms,
    encode_plan,
    firing_headers,
    firing_id,
    jitter_of,
)
from ..recurrence.spec import ScheduleSpec, ScheduleState
from ..recurrence.states import lead_of, plan_due_ms
from ..timers.columns import Prepared

__all__ = ["PLANS_TOPIC", "firing_row", "plan_row"]

PLANS_TOPIC = "_schedules"
"""The reserved topic of the plan messages (never delivered: the firer's)."""


def plan_row(name: str, spec: ScheduleSpec, state: ScheduleState, now: int) -> Prepared:
    """The plan message of schedule ``name`` in ``state``: due its lead
    (``recurrence.states.lead_of``) before its next nominal time (at once when
    that is past), or parked while paused or ended (``plan_due_ms``)."""
    due = max(now, plan_due_ms(state, now, lead_of(name)))
    return Prepared(PLANS_TOPIC, due, name.encode(), b"", encode_plan(spec, state))


def firing_row(name: str, spec: ScheduleSpec, nominal_ms: int, now: int) -> Prepared:
    """The firing of ``name`` at ``nominal_ms``: due then plus its jitter (at once
    when that is past: a catch-up)."""
    template = spec.template
    due = max(now, nominal_ms + jitter_of(name, nominal_ms, spec.jitter_ms))
    did = firing_id(name, nominal_ms)
    headers = encode_headers(firing_headers(spec, name, nominal_ms))
    headers += dedup_headers(now + dedup_window_ms(spec), did)
    return Prepared(template.topic, due, name.encode(), headers, template.body, 0, did.encode())
