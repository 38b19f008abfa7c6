"""What a RocketMQ request is checked for before it becomes a call of the node
(pure): every check the RocketMQ side makes, in one place; the rest (bodies,
times, sizes, receipts, ownership) are delayq's own (``argchecks``, the engine,
``server.calls``).

A topic is checked as delayq's (``names.delayq_topic``), named by the RocketMQ
field. A receive is served only from this node's own shard's queue (another's:
HA_NOT_AVAILABLE, the client queries the route again; a node serving alone
serves every queue). Invisible durations: a receive's ``MIN_INVISIBLE_MS`` to
``MAX_INVISIBLE_MS`` (none given: renewed, ``renewals``), an invisibility
change's 0 to ``MAX_INVISIBLE_MS``. Transaction and FIFO messages are
NOT_IMPLEMENTED.
"""

from __future__ import annotations

from typing import Any

from ..argchecks import MAX_INVISIBLE_MS, check_topic
from ..errors import InvalidArgument
from ..shardmap import ShardMap
from .names import delayq_topic
from .renewals import RENEWED_INVISIBLE_MS
from .routes import shard_of
from .status import not_implemented, status
from .v2 import definition_pb2 as rmq

__all__ = [
    "MIN_INVISIBLE_MS",
    "invisible_change_problem",
    "queue_problem",
    "receive_invisible_ms",
    "topic_of",
    "unsupported",
]

MIN_INVISIBLE_MS = 10_000
"""The shortest invisible duration a receive may ask for (RocketMQ's)."""


def topic_of(resource: Any, field: str) -> str:
    """delayq's name of the topic a RocketMQ ``Resource`` names; raises
    InvalidArgument naming ``field``."""
    topic = delayq_topic(resource.name)
    check_topic(topic, field)
    return topic


def unsupported(system_properties: Any) -> rmq.Status | None:
    """Why a message to send is not supported (None: it is)."""
    if system_properties.message_type == rmq.TRANSACTION:
        return not_implemented("a transaction message")
    if system_properties.HasField("message_group") or system_properties.message_type == rmq.FIFO:
        return not_implemented("a FIFO message (message_group)")
    return None


def queue_problem(queue: Any, shard_map: ShardMap, shard: int) -> rmq.Status | None:
    """Why this node (of ``shard``) cannot serve a receive from ``queue`` (None: it
    can)."""
    of_queue = shard_of(queue)
    if of_queue is None:
        return status(
            rmq.BAD_REQUEST, f"message_queue.broker.name: {queue.broker.name!r} is no shard"
        )
    if not shard_map.standalone and of_queue != shard:
        return status(
            rmq.HA_NOT_AVAILABLE,
            f"message_queue: shard {of_queue}'s messages are received at its master "
            f"(the shard map's rocketmq address), not at shard {shard}; query the "
            "route again",
        )
    return None


def millis(value: Any, field: str) -> int:
    """A protobuf Timestamp or Duration in ms; InvalidArgument naming ``field`` when
    protobuf refuses it with a ValueError (a Timestamp's nanos out of range)."""
    try:
        return int(value.ToMilliseconds())
    except ValueError as exc:
        raise InvalidArgument(field, str(exc)) from None


def receive_invisible_ms(request: Any) -> int:
    """How long a receive hides its messages (none given: ``RENEWED_INVISIBLE_MS``,
    renewed); raises InvalidArgument."""
    if not request.HasField("invisible_duration"):
        return RENEWED_INVISIBLE_MS
    invisible_ms = millis(request.invisible_duration, "invisible_duration")
    if not MIN_INVISIBLE_MS <= invisible_ms <= MAX_INVISIBLE_MS:
        raise InvalidArgument(
            "invisible_duration",
            f"{invisible_ms} ms; give {MIN_INVISIBLE_MS} ms to {MAX_INVISIBLE_MS} ms",
        )
    return invisible_ms


def invisible_change_problem(ms: int) -> rmq.Status | None:
    """Why an invisibility change to ``ms`` is refused (None: it is not)."""
    if 0 <= ms <= MAX_INVISIBLE_MS:
        return None
    return status(
        rmq.ILLEGAL_INVISIBLE_TIME,
        f"invisible_duration: {ms} ms; give 0 ms to {MAX_INVISIBLE_MS} ms",
    )
