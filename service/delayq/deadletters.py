"""Dead letters (pure): where a consumer group's messages go after its last
delivery attempt, and what the copy there carries. Shared by the engine, which
makes the copies, and the clients that read and replay them.

A group's dead-letter topic is ``dlq.<group>`` (one per group, whatever topic
the message came from; RocketMQ clients see it as ``%DLQ%<group>``). The copy is
a new message due at once with the original's key, body and headers, plus
headers naming where it came from (``DEAD_LETTER_HEADERS``), so that it can be
received like any message and replayed to its topic (``replayed``). The engine
acks the original for the group only once the copy is durable: a crash in
between forwards it again (at-least-once), never loses it.
"""

from __future__ import annotations

from collections.abc import Mapping

from .argchecks import MAX_HEADERS

__all__ = [
    "DEAD_LETTER_HEADERS",
    "DEAD_LETTER_PREFIX",
    "dead_letter_headers",
    "dead_letter_topic",
    "replayed",
]

DEAD_LETTER_PREFIX = "dlq."  # argchecks.MAX_GROUP_LEN leaves room for it
HEADER_TOPIC = "dlq.topic"
HEADER_ID = "dlq.id"
HEADER_GROUP = "dlq.group"
HEADER_ATTEMPTS = "dlq.attempts"
DEAD_LETTER_HEADERS = (HEADER_TOPIC, HEADER_ID, HEADER_GROUP, HEADER_ATTEMPTS)


def dead_letter_topic(group: str) -> str:
    """The topic a group's dead letters go to."""
    return DEAD_LETTER_PREFIX + group


def dead_letter_headers(
    headers: Mapping[str, str], topic: str, message_id: str, group: str, attempts: int
) -> dict[str, str]:
    """The headers of the dead-letter copy of a message of ``topic`` (``headers``,
    ``message_id``) that ``group`` had ``attempts`` deliveries of. A message with
    the most headers allowed keeps as many of its own as leave room for the four
    that say where it came from."""
    own = {k: v for k, v in headers.items() if k not in DEAD_LETTER_HEADERS}
    room = MAX_HEADERS - len(DEAD_LETTER_HEADERS)
    if len(own) > room:
        own = dict(list(own.items())[:room])
    return own | {
        HEADER_TOPIC: topic,
        HEADER_ID: message_id,
        HEADER_GROUP: group,
        HEADER_ATTEMPTS: str(attempts),
    }


def replayed(headers: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """The topic a dead letter came from and its own headers, as they were: what to
    schedule it again with. Raises ValueError for a message that is not one."""
    topic = headers.get(HEADER_TOPIC)
    if not topic:
        raise ValueError(f"not a dead letter: no {HEADER_TOPIC} header")
    return topic, {k: v for k, v in headers.items() if k not in DEAD_LETTER_HEADERS}
