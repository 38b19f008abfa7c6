"""Schedules by the producer's own key, as the system tests of keys see them
(``tests/*/test_keys*.py``): one call's answer as (outcome, id) whatever its form
(a ``Scheduled`` with its ``key_outcome``, or ``AlreadyExists`` naming the message
that holds the key), and a message id's place in its shard's log, which orders
the schedules of one shard."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import delayq
from delayq.client import AlreadyExists
from delayq.ids import MessageId

__all__ = ["Answer", "log_order", "schedule_keyed"]


@dataclass(frozen=True)
class Answer:
    """What one keyed schedule was told: ``outcome`` is a ``KeyOutcome``'s value
    (``new``, ``exists``, ``kept`` or ``replaced``); ``id`` the message that holds
    the key after it (its own, or the one that was there), ``deliver_at_ms`` that
    message's due time."""

    outcome: str
    id: str
    deliver_at_ms: int


def schedule_keyed(
    client: delayq.Client,
    topic: str,
    body: bytes,
    key: str,
    if_exists: str | None,
    *,
    delay: float = 3_600,
    dedup_window: timedelta | None = None,
) -> Answer:
    """``client.schedule`` with ``key`` and ``if_exists``, its answer as an ``Answer``
    (``AlreadyExists``, REJECT's refusal, is the ``exists`` outcome)."""
    try:
        s = client.schedule(
            topic, body, key=key, if_exists=if_exists, delay=delay, dedup_window=dedup_window
        )
    except AlreadyExists as exc:
        return Answer("exists", exc.id, exc.deliver_at_ms)
    assert s.id is not None, s
    return Answer(str(s.key_outcome), s.id, s.deliver_at_ms)


def log_order(message_id: str) -> tuple[int, int]:
    """(epoch, position) of a message id: on one shard, the order its SCHEDULE
    records were written in."""
    mid = MessageId.parse(message_id)
    return (mid.epoch, mid.position)
