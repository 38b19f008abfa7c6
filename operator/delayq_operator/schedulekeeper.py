"""A DelaySchedule's recurring schedule kept on its DelayTopic's shards (I/O: the
typed client over the topic's public port; run by kopf handlers,
``schedulehandlers``).

``keep_schedule`` is a round: it parses the resource (``schedules``), reads its
DelayTopic and finds where to call it (``topicaddress.public_target``), reads
the schedule as its shard holds it (``Client.get_schedule``: the client routes
by the schedule's name to the shard owning it), makes the calls
``scheduleplan.plan`` says (create, update, pause, resume: each durable and
replicated when it returns) and says what the status becomes (``Outcome``).
What it cannot do is an ``Outcome`` too, with the ``Ready`` condition False and
its reason: ``InvalidSpec`` (the resource's spec, or the schedule API's
``InvalidArgument`` naming the field in the CRD's words), ``TopicNotFound``,
``TopicInvalid``, ``TopicNotServing``, ``Unavailable``; the next round (every
``SCHEDULES_EVERY_S``) tries again.

``drop_schedule`` deletes the schedule from its DelayTopic's shards (the
resource's finalizer: it is deleted): nothing to do when the topic is gone or
being deleted (its shards with it), or the schedule is; ``Retry`` while no
shard serves or the call fails.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from delayq.client import Client, ClientError, InvalidArgument, NotFound, Schedule

from .kube import now
from .memo import Memo
from .scheduleplan import (
    Call,
    Held,
    failed_condition,
    plan,
    ready_condition,
    schedule_status,
)
from .schedules import DeclaredSchedule, crd_field, parse_schedule
from .spec import DelayTopicSpec, SpecError, parse_spec
from .topicaddress import Target, public_target

__all__ = [
    "DELETE_RETRY_S",
    "SCHEDULES_EVERY_S",
    "Outcome",
    "Retry",
    "drop_schedule",
    "held_of",
    "keep",
    "keep_schedule",
]

TIMEOUT_S = 5.0
"""Each call's deadline (a round runs in a kopf handler thread)."""
SCHEDULES_EVERY_S = 10.0
"""How often a DelaySchedule's round runs (status refreshed, drift put right)."""
DELETE_RETRY_S = 10.0
"""How soon a deletion that could not reach the shards is retried."""


class Retry(Exception):
    """The shards cannot be reached now; try again (kopf's TemporaryError)."""


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What a round did and the status fields it leaves."""

    status: dict[str, Any]
    calls: tuple[Call, ...] = ()
    """The calls made (none when the round failed)."""
    ready: dict[str, Any] = field(default_factory=dict)
    """The ``Ready`` condition, as merged into ``status``."""


def held_of(s: Schedule) -> Held:
    """The client's ``Schedule`` as the plan reads it."""
    return Held(
        spec=s.spec,
        paused=s.paused,
        ended=s.ended,
        next_fire_ms=s.next_fire_ms,
        last_fire_ms=s.last_fire_ms,
        fired=s.fired,
        missed=s.missed,
        id=s.id,
    )


def keep(target: Target, declared: DeclaredSchedule) -> tuple[list[Call], Held]:
    """One round on the shards at ``target``: the calls made and the schedule as
    they left it. Raises ``ClientError``."""
    name, spec = declared.name, declared.spec
    with Client(target.address, tls=target.tls, timeout_s=TIMEOUT_S) as client:
        try:
            held: Held | None = held_of(client.get_schedule(name))
        except NotFound:
            held = None
        calls = plan(declared, held)
        for call in calls:
            if call is Call.CREATE:
                held = held_of(client.create_schedule(name, spec, paused=declared.suspend))
            elif call is Call.UPDATE:
                held = held_of(client.update_schedule(name, spec))
            elif call is Call.PAUSE:
                held = held_of(client.pause_schedule(name))
            else:
                held = held_of(client.resume_schedule(name))
    assert held is not None  # (none held: CREATE made it)
    return calls, held


class _NotThere(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _topic(ours: Memo, namespace: str, ref: str) -> tuple[dict[str, Any], DelayTopicSpec]:
    """The DelayTopic ``ref`` and its spec; ``_NotThere`` says why not."""
    topic = ours.cluster.get_topic(namespace, ref)
    if topic is None or topic["metadata"].get("deletionTimestamp"):
        raise _NotThere("TopicNotFound", f"no DelayTopic {ref} in {namespace}")
    try:
        return topic, parse_spec(topic, ours.settings.topic_defaults)
    except SpecError as e:
        raise _NotThere("TopicInvalid", f"DelayTopic {ref}: {e}") from e


def keep_schedule(ours: Memo, plain: dict[str, Any]) -> Outcome:
    """A round for the DelaySchedule ``plain`` (plain values): its status after it."""
    meta = plain["metadata"]
    current = plain.get("status") or {}
    generation = int(meta.get("generation", 0))

    def outcome(held: Held | None, ready: dict[str, Any], **kw: Any) -> Outcome:
        status = schedule_status(
            held,
            generation=generation,
            ready=ready,
            conditions=current.get("conditions") or [],
            now=now(),
        )
        return Outcome(status=status, ready=ready, **kw)

    try:
        declared = parse_schedule(plain)
    except SpecError as e:
        return outcome(None, failed_condition("InvalidSpec", str(e)))
    try:
        topic, topic_spec = _topic(ours, meta["namespace"], declared.topic_ref)
    except _NotThere as e:
        return outcome(None, failed_condition(e.reason, str(e)))
    target = public_target(ours, topic, topic_spec)
    if target is None:
        why = f"DelayTopic {declared.topic_ref}: no shard serves yet"
        return outcome(None, failed_condition("TopicNotServing", why))
    try:
        calls, held = keep(target, declared)
    except InvalidArgument as e:
        why = f"{crd_field(e.field)}: {str(e).removeprefix(f'{e.field}: ')}"
        return outcome(None, failed_condition("InvalidSpec", why))
    except ClientError as e:
        why = f"DelayTopic {declared.topic_ref}: {e}"
        return outcome(None, failed_condition("Unavailable", why))
    return outcome(held, ready_condition(held), calls=tuple(calls))


def drop_schedule(ours: Memo, plain: dict[str, Any]) -> bool:
    """Delete the DelaySchedule ``plain``'s schedule from its shards: True when it
    was there. Raises ``Retry`` while they cannot be reached."""
    meta = plain["metadata"]
    ref = ((plain.get("spec") or {}).get("topicRef") or {}).get("name")
    if not isinstance(ref, str) or not ref:
        return False
    try:
        topic, topic_spec = _topic(ours, meta["namespace"], ref)
    except _NotThere:
        return False  # (its shards go with it)
    target = public_target(ours, topic, topic_spec)
    if target is None:
        raise Retry(f"DelayTopic {ref}: no shard serves yet")
    try:
        with Client(target.address, tls=target.tls, timeout_s=TIMEOUT_S) as client:
            client.delete_schedule(str(meta["name"]))
    except NotFound:
        return False
    except ClientError as e:
        raise Retry(f"DelayTopic {ref}: {e}") from e
    return True
