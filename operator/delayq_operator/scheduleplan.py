"""What the operator calls to keep a DelaySchedule's schedule on its DelayTopic's
shards, and the status that follows (pure: no cluster, no I/O).

A round (``schedulekeeper``) reads the schedule as its shard holds it
(``Held``: the typed client's ``Schedule``, field for field), and ``plan``
says which calls to make, in order:

- none held (new, deleted by hand, or its DelayTopic made afresh): ``CREATE``
  (paused when suspended: made paused in the one call, so none fires);
- a held spec other than the declared one (the resource's spec changed, or the
  schedule was changed by other means, ``delayq schedules update``):
  ``UPDATE`` (the next firing recomputed from now, a pause kept);
- ``suspend`` and not paused: ``PAUSE``; not ``suspend`` and paused:
  ``RESUME`` (the times missed meanwhile follow ``catchUp``).

A schedule held as declared gets no call: the periodic round of an unchanged
resource never moves its next firing. ``schedule_status`` is the status after
a round: the held schedule's ``paused``, ``ended``, ``fired``, ``missed``,
``scheduleId``, ``lastFireTime`` and ``nextFireTime`` (RFC 3339, UTC; none while
paused or ended: null removes it in the merge patch), ``observedGeneration``
and the ``Ready`` condition (``ready_condition``: Scheduled, Suspended or
Ended; ``failed_condition``: why not, with the last held fields left as they
were).
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from delayq.recurrence.spec import ScheduleSpec

from .schedules import DeclaredSchedule
from .status import condition, merge_condition

__all__ = [
    "READY",
    "Call",
    "Held",
    "failed_condition",
    "plan",
    "ready_condition",
    "rfc3339",
    "schedule_status",
]

READY = "Ready"
"""The condition type: the schedule is on its shards as declared."""


class Call(enum.Enum):
    """A call of the schedule API, by the schedule's name."""

    CREATE = "create"
    UPDATE = "update"
    PAUSE = "pause"
    RESUME = "resume"


@dataclass(frozen=True, kw_only=True)
class Held:
    """A schedule as its shard holds it (``delayq.Schedule``'s fields the operator reads)."""

    spec: ScheduleSpec
    paused: bool = False
    ended: bool = False
    next_fire_ms: int = 0
    last_fire_ms: int = 0
    fired: int = 0
    missed: int = 0
    id: str = ""


def plan(declared: DeclaredSchedule, held: Held | None) -> list[Call]:
    """The calls that make the shards hold ``declared``, in order."""
    if held is None:
        return [Call.CREATE]  # (paused when suspended: one call)
    calls = [Call.UPDATE] if held.spec != declared.spec else []
    if declared.suspend and not held.paused:
        calls.append(Call.PAUSE)
    elif held.paused and not declared.suspend:
        calls.append(Call.RESUME)
    return calls


def rfc3339(ms: int) -> str:
    """Epoch ms as Kubernetes writes a time (UTC; milliseconds only when not 0)."""
    at = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    frac = f".{ms % 1000:03d}" if ms % 1000 else ""
    return at.strftime("%Y-%m-%dT%H:%M:%S") + frac + "Z"


def ready_condition(held: Held) -> dict[str, Any]:
    """``Ready`` True: the schedule is held as declared (Scheduled, Suspended or Ended)."""
    if held.ended:
        return condition(READY, True, "Ended", "no nominal time is left before spec.end")
    if held.paused:
        return condition(READY, True, "Suspended", "paused: nothing fires until resumed")
    return condition(READY, True, "Scheduled", f"next firing at {rfc3339(held.next_fire_ms)}")


def failed_condition(reason: str, message: str) -> dict[str, Any]:
    """``Ready`` False: why the schedule is not held as declared."""
    return condition(READY, False, reason, message)


def schedule_status(
    held: Held | None,
    *,
    generation: int,
    ready: dict[str, Any],
    conditions: Sequence[dict[str, Any]],
    now: str,
) -> dict[str, Any]:
    """The status fields to merge after a round: ``held`` as the round left it (None:
    not known, the fields stay as they were), ``ready`` the ``Ready`` condition
    merged into ``conditions`` (the resource's)."""
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "conditions": merge_condition(list(conditions), ready, now),
    }
    if held is not None:
        due = not held.paused and not held.ended and held.next_fire_ms > 0
        status.update(
            scheduleId=held.id,
            paused=held.paused,
            ended=held.ended,
            fired=held.fired,
            missed=held.missed,
            lastFireTime=rfc3339(held.last_fire_ms) if held.last_fire_ms else None,
            nextFireTime=rfc3339(held.next_fire_ms) if due else None,
        )
    return status
