"""kopf handlers of DelaySchedules: each one's recurring schedule kept on its
DelayTopic's shards, its status, and the schedule deleted with it.

- create/resume/update(spec), and every ``SCHEDULES_EVERY_S`` (a timer): a
  round (``schedulekeeper.keep_schedule``): the schedule created, updated,
  paused or resumed as the spec says (``spec.suspend`` is the pause), or put
  right when changed or deleted by other means; the status patched from the
  schedule as its shard holds it (``lastFireTime``, ``nextFireTime``,
  ``paused``, ``fired``, ``missed``...) with the ``Ready`` condition. A call
  made is an event (``ScheduleCreated``, ``ScheduleUpdated``,
  ``SchedulePaused``, ``ScheduleResumed``); a round that fails leaves the last
  known fields, sets ``Ready`` False with the reason and posts a Warning event
  when the reason is new. The next round is the retry.
- delete: kopf holds its finalizer (``delayq.io/finalizer``) on every
  DelaySchedule while this handler is registered; on deletion the schedule is
  deleted from its shards (``schedulekeeper.drop_schedule``), retried every
  ``DELETE_RETRY_S`` while they cannot be reached, at most ``DELETE_RETRIES``
  times: then kopf takes the finalizer off all the same (a Warning event says
  the schedule may be left), so a DelayTopic gone for good never holds its
  schedules' resources.

The rounds of one DelaySchedule never overlap (the change handler and the timer
run in kopf's threads): they take its lock (``memo.TopicLocks``, keyed apart
from the topics').
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from .crd import GROUP, SCHEDULE_PLURAL, VERSION
from .memo import Memo
from .plain import as_plain
from .schedulekeeper import (
    DELETE_RETRY_S,
    SCHEDULES_EVERY_S,
    Retry,
    drop_schedule,
    keep_schedule,
)

__all__ = ["DELETE_RETRIES", "schedule_changed", "schedule_deleted", "schedule_round"]

DELETE_RETRIES = 30
"""How many times a deletion is tried while the shards cannot be reached (5 minutes)."""
_EVENTS = {
    "create": "ScheduleCreated",
    "update": "ScheduleUpdated",
    "pause": "SchedulePaused",
    "resume": "ScheduleResumed",
}


def _round(ours: Memo, body: kopf.Body, patch: kopf.Patch, logger: Any) -> None:
    plain = as_plain(body)
    meta = plain["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    if meta.get("deletionTimestamp"):
        return
    with ours.locks(namespace, f"{SCHEDULE_PLURAL}/{name}"):
        done = keep_schedule(ours, plain)
    for call in done.calls:
        kopf.info(body, reason=_EVENTS[call.value], message=_describe(done.status))
    before = {c.get("type"): c for c in (plain.get("status") or {}).get("conditions") or []}
    old = before.get(done.ready["type"]) or {}
    failed = done.ready["status"] != "True"
    if failed and (old.get("status"), old.get("reason")) != ("False", done.ready["reason"]):
        kopf.warn(body, reason=done.ready["reason"], message=done.ready["message"])
    for key, value in done.status.items():
        if (plain.get("status") or {}).get(key) != value:
            patch.status[key] = value
    if failed:
        logger.info("schedule %s/%s: %s", namespace, name, done.ready["message"])


def _describe(status: dict[str, Any]) -> str:
    if status.get("paused"):
        return "paused"
    if status.get("ended"):
        return "ended"
    return f"next firing at {status.get('nextFireTime')}"


@kopf.on.resume(GROUP, VERSION, SCHEDULE_PLURAL)
@kopf.on.create(GROUP, VERSION, SCHEDULE_PLURAL)
@kopf.on.update(GROUP, VERSION, SCHEDULE_PLURAL, field="spec")
def schedule_changed(
    *,
    body: kopf.Body,
    patch: kopf.Patch,
    memo: kopf.Memo,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    **_: Any,
) -> None:
    """The DelaySchedule is new, changed, or found at the operator's start: a round now."""
    _round(Memo.of(memo), body, patch, logger)


@kopf.timer(
    GROUP, VERSION, SCHEDULE_PLURAL, interval=SCHEDULES_EVERY_S, initial_delay=SCHEDULES_EVERY_S
)
def schedule_round(
    *,
    body: kopf.Body,
    patch: kopf.Patch,
    memo: kopf.Memo,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    **_: Any,
) -> None:
    """Every ``SCHEDULES_EVERY_S``: a round (status refreshed, drift put right, a
    failed round tried again)."""
    _round(Memo.of(memo), body, patch, logger)


@kopf.on.delete(GROUP, VERSION, SCHEDULE_PLURAL, retries=DELETE_RETRIES)
def schedule_deleted(
    *,
    body: kopf.Body,
    memo: kopf.Memo,
    retry: int,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    **_: Any,
) -> None:
    """The DelaySchedule is being deleted: its schedule goes from the shards."""
    ours = Memo.of(memo)
    plain = as_plain(body)
    namespace, name = plain["metadata"]["namespace"], plain["metadata"]["name"]
    try:
        with ours.locks(namespace, f"{SCHEDULE_PLURAL}/{name}"):
            dropped = drop_schedule(ours, plain)
    except Retry as e:
        if retry + 1 >= DELETE_RETRIES:
            why = f"{e}; giving up after {DELETE_RETRIES} tries: the schedule may be left"
            kopf.warn(body, reason="ScheduleNotDeleted", message=why)
            raise kopf.PermanentError(why) from e
        raise kopf.TemporaryError(f"{e}; trying again", delay=DELETE_RETRY_S) from e
    logger.info("schedule %s/%s %s", namespace, name, "deleted" if dropped else "was not held")
