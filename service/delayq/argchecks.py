"""Checks of call arguments (pure): what a topic or consumer-group name may be,
a receive's limits, and the length bound of other names (``check_lengths``: node
names, addresses, job names of the admin API). Every check raises
``InvalidArgument`` naming the offending field and quoting at most a short
prefix of what was sent (``errors.quote``); a value that passes is returned or
left as it was."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from .errors import InvalidArgument, quote

__all__ = [
    "MAX_GROUP_LEN",
    "MAX_HEADERS",
    "MAX_HEADER_BYTES",
    "MAX_INVISIBLE_MS",
    "MAX_RECEIVE_MESSAGES",
    "MAX_TOPIC_LEN",
    "MAX_WAIT_MS",
    "RECEIVE_INVISIBLE_MS",
    "RECEIVE_MAX_MESSAGES",
    "check_group",
    "check_lengths",
    "check_receive",
    "check_topic",
    "name_problem",
]

MAX_TOPIC_LEN = 128
MAX_GROUP_LEN = MAX_TOPIC_LEN - 4
"""A consumer group's longest name: its dead-letter topic (``dlq.<group>``, see
``deadletters``) is then a topic name."""
MAX_HEADERS = 64
"""Most headers one message may carry."""
MAX_HEADER_BYTES = 16 << 10
"""Most bytes a message's headers may take, encoded."""
MAX_INVISIBLE_MS = 12 * 3_600_000  # the longest a received message stays invisible
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _check_name(value: object, field: str, what: str, limit: int = MAX_TOPIC_LEN) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidArgument(field, f"{what} must be a non-empty string")
    problem = name_problem(value, limit)
    if problem:
        raise InvalidArgument(field, f"{what} {problem}")
    return value


@functools.lru_cache(maxsize=4096)  # names repeat: judge each once
def name_problem(value: str, limit: int = MAX_TOPIC_LEN) -> str:
    """What is wrong with a topic/group name of at most ``limit`` characters ("" when
    nothing)."""
    if len(value) > limit:
        return f"is {len(value)} characters; at most {limit}"
    if not _NAME.fullmatch(value):
        return (
            f"{quote(value)} may hold only letters, digits, '.', '_' and '-', "
            "and must start with a letter or digit"
        )
    return ""


def check_topic(topic: object, field: str = "topic") -> str:
    return _check_name(topic, field, "topic")


def check_group(group: object, field: str = "group") -> str:
    return _check_name(group, field, "consumer group", MAX_GROUP_LEN)


RECEIVE_MAX_MESSAGES = 32
"""A receive's batch when the caller names none (the engine, the server, the client)."""
RECEIVE_INVISIBLE_MS = 30_000
"""How long a received message stays invisible when the caller says nothing."""
MAX_RECEIVE_MESSAGES = 10_000
MAX_WAIT_MS = 60_000
"""The longest long-poll of one receive."""


def check_receive(max_messages: int, invisible_ms: int, wait_ms: int) -> None:
    """A receive's limits: batch size, invisibility and long-poll time."""
    if not 1 <= max_messages <= MAX_RECEIVE_MESSAGES:
        raise InvalidArgument(
            "max_messages", f"must be 1..{MAX_RECEIVE_MESSAGES}, got {max_messages}"
        )
    if not 0 < invisible_ms <= MAX_INVISIBLE_MS:
        raise InvalidArgument("invisible_ms", f"must be 1..{MAX_INVISIBLE_MS}, got {invisible_ms}")
    if not 0 <= wait_ms <= MAX_WAIT_MS:
        raise InvalidArgument("wait_ms", f"must be 0..{MAX_WAIT_MS}, got {wait_ms}")


def check_lengths(values: Sequence[str], field: str, limit: int, most: int = 1) -> None:
    """At most ``most`` values of at most ``limit`` characters each; the error names
    ``field``, or ``field[i]`` when ``most`` > 1 (a list)."""
    if len(values) > most:
        raise InvalidArgument(field, f"{len(values)} items; at most {most}")
    for i, value in enumerate(values):
        if len(value) > limit:
            name = f"{field}[{i}]" if most > 1 else field
            raise InvalidArgument(name, f"is {len(value)} characters; at most {limit}")
