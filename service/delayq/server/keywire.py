"""The wire of the calls by topic and key (pure): Lookup, Cancel and Reschedule
name their messages by id or by ``(topic, key)`` (``by_key`` says which, refusing
both, or a key without its topic), and their answers by key.

Invariants: a call by key acts on every pending message of the topic with that
key (a key's messages share its shard); a cancel by key answers one result per
key, in request order, with how many were cancelled (CANCELLED when some, else
NOT_FOUND); a lookup by key answers the oldest message's fields with how many
(exact), the ids of the oldest ``KEY_IDS_MAX`` and the fields of the next ones
while the answer stays within ``KEY_ANSWER_BYTES``, a reschedule by key the first new
message's with every new id (the engine raises ``NotFound`` when there are none).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..engine import LookupResult, ScheduleOutcome
from ..errors import DelayqError, InvalidArgument
from ..v1 import delayq_pb2 as pb
from .convert import lookup_response
from .statuscodes import PassedOn, item_error

__all__ = [
    "KEY_ANSWER_BYTES",
    "KEY_IDS_MAX",
    "by_key",
    "cancel_key_results",
    "lookup_key_response",
    "rescheduled_keys",
]

KEY_IDS_MAX = 1000
"""The most ids a Lookup by key answers (the oldest; ``key_matches`` counts all)."""
KEY_ANSWER_BYTES = 3 << 20
"""The size a Lookup by key's answer grows to at most with the messages after the
oldest (the oldest and the ids always come): under a gRPC client's default 4 MiB."""
_FRAMING = 8  # a repeated message field's tag and length, at most


def by_key(has_id: bool, topic: str, has_key: bool, id_field: str, key_field: str) -> bool:
    """Whether a Lookup, Cancel or Reschedule names its messages by topic and key
    (True) or by id (False); ``InvalidArgument`` naming the field when it gives both,
    or a key without its topic (or a topic without a key)."""
    if has_id and (topic or has_key):
        name = key_field if has_key else "topic"
        raise InvalidArgument(name, f"give {id_field}, or topic and {key_field}, not both")
    if has_id:
        return False
    if not has_key:
        if topic:
            raise InvalidArgument(key_field, "required with topic (or give id)")
        return False  # neither: by id, whose check names the missing id
    if not topic:
        raise InvalidArgument("topic", f"required with {key_field}")
    return True


def cancel_key_results(
    results: Any, keys: Sequence[str], out: Sequence[int | DelayqError | PassedOn]
) -> None:
    """A cancel by key's answers (how many of each key's messages were cancelled)
    into the response's ``results``: CANCELLED when some were, else NOT_FOUND (an
    error: this shard's, or that of the shard a message was passed on to)."""
    add = results.add
    for key, o in zip(keys, out, strict=True):
        if isinstance(o, PassedOn):
            add(key=key, error=o.item_error())
        elif isinstance(o, DelayqError):
            add(key=key, error=item_error(o))
        else:
            outcome = pb.CANCEL_OUTCOME_CANCELLED if o else pb.CANCEL_OUTCOME_NOT_FOUND
            add(key=key, outcome=outcome, cancelled=o)


def lookup_key_response(found: Sequence[LookupResult]) -> pb.LookupResponse:
    """The pending messages of a key (oldest first, at least one) as a
    LookupResponse: the oldest's fields, how many (all), the ids of the oldest
    ``KEY_IDS_MAX``, and the fields of those after the oldest while the answer
    stays within ``KEY_ANSWER_BYTES`` (``key_messages``)."""
    listed = found[:KEY_IDS_MAX]
    resp = lookup_response(listed[0])
    resp.key_matches = len(found)
    resp.key_ids.extend(r.id for r in listed)
    room = KEY_ANSWER_BYTES - resp.ByteSize()
    for r in listed[1:]:
        more = lookup_response(r)
        room -= more.ByteSize() + _FRAMING
        if room < 0:
            break
        resp.key_messages.append(more)
    return resp


def rescheduled_keys(out: Sequence[ScheduleOutcome]) -> pb.RescheduleResponse:
    """A reschedule by key's new messages (at least one) as a RescheduleResponse:
    the first's id and time, and every new id."""
    ids = [o.id or "" for o in out]
    return pb.RescheduleResponse(id=ids[0], deliver_at_ms=out[0].deliver_at_ms, ids=ids)
