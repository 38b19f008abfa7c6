"""Validation of client input (pure). Every error names the offending field."""

from __future__ import annotations

import functools
import re
from typing import NamedTuple

from ..errors import InvalidArgument
from ..settings import EngineSettings
from ..store.records import encode_headers
from .types import ScheduleRequest

__all__ = ["MAX_TOPIC_LEN", "Prepared", "check_group", "check_topic", "prepare", "resolve_due"]

MAX_TOPIC_LEN = 128
MAX_KEY_BYTES = 1024
MAX_HEADERS = 64
MAX_HEADER_BYTES = 16 << 10
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class Prepared(NamedTuple):
    """A validated schedule request, encoded for the CommitLog."""

    topic: str
    deliver_at_ms: int
    key: bytes
    headers: bytes
    body: bytes


def _check_name(value: object, field: str, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidArgument(field, f"{what} must be a non-empty string")
    problem = _name_problem(value)
    if problem:
        raise InvalidArgument(field, f"{what} {problem}")
    return value


@functools.lru_cache(maxsize=4096)  # names repeat: judge each once
def _name_problem(value: str) -> str:
    """What is wrong with a topic/group name ("" when nothing)."""
    if len(value) > MAX_TOPIC_LEN:
        return f"is {len(value)} characters; at most {MAX_TOPIC_LEN}"
    if not _NAME.fullmatch(value):
        return (
            f"{value[:40]!r} may hold only letters, digits, '.', '_' and '-', "
            "and must start with a letter or digit"
        )
    return ""


def check_topic(topic: object, field: str = "topic") -> str:
    return _check_name(topic, field, "topic")


def check_group(group: object, field: str = "group") -> str:
    return _check_name(group, field, "consumer group")


def resolve_due(
    deliver_at_ms: int | None,
    delay_ms: int | None,
    now_ms: int,
    settings: EngineSettings,
    prefix: str = "",
) -> int:
    """The effective delivery time: an absolute time or now + delay (neither: now).
    A time in the past means now; beyond ``max_delay_ms`` is refused."""
    if deliver_at_ms is not None and delay_ms is not None:
        raise InvalidArgument(prefix + "deliver_at_ms", "give deliver_at_ms or delay_ms, not both")
    if delay_ms is not None:
        if delay_ms < 0:
            raise InvalidArgument(prefix + "delay_ms", f"must be >= 0, got {delay_ms}")
        if delay_ms > settings.max_delay_ms:
            raise InvalidArgument(
                prefix + "delay_ms",
                f"{delay_ms} ms exceeds the maximum delay of {settings.max_delay_ms} ms",
            )
        return now_ms + delay_ms
    if deliver_at_ms is not None:
        if deliver_at_ms < 0:
            raise InvalidArgument(prefix + "deliver_at_ms", "must be >= 0 (ms since the epoch)")
        if deliver_at_ms - now_ms > settings.max_delay_ms:
            raise InvalidArgument(
                prefix + "deliver_at_ms",
                f"is {deliver_at_ms - now_ms} ms ahead; the maximum delay is "
                f"{settings.max_delay_ms} ms",
            )
        return max(deliver_at_ms, now_ms)
    return now_ms


def prepare(
    req: ScheduleRequest, now_ms: int, settings: EngineSettings, prefix: str = ""
) -> Prepared:
    """Validate one request; ``prefix`` (e.g. "messages[3].") goes before field names.

    Hot path: field names are only built when there is an error to report."""
    topic = req.topic
    if not (isinstance(topic, str) and topic and not _name_problem(topic)):
        check_topic(topic, prefix + "topic")
    body = req.body
    if type(body) is not bytes:
        if not isinstance(body, bytearray | memoryview):
            raise InvalidArgument(prefix + "body", "must be bytes")
        body = bytes(body)
    if not 0 < len(body) <= settings.max_body_bytes:
        if not body:
            raise InvalidArgument(prefix + "body", "must not be empty")
        raise InvalidArgument(
            prefix + "body", f"is {len(body)} bytes; at most {settings.max_body_bytes}"
        )
    delay = req.delay_ms
    if req.deliver_at_ms is None and delay is not None and 0 <= delay <= settings.max_delay_ms:
        due = now_ms + delay  # the common case, checked inline
    else:
        due = resolve_due(req.deliver_at_ms, delay, now_ms, settings, prefix)
    if not isinstance(req.key, str):
        raise InvalidArgument(prefix + "key", "must be a string")
    key = req.key.encode() if req.key else b""
    if len(key) > MAX_KEY_BYTES:
        raise InvalidArgument(prefix + "key", f"is {len(key)} bytes; at most {MAX_KEY_BYTES}")
    headers = _encode_checked_headers(req.headers, prefix) if req.headers else b""
    return Prepared(topic, due, key, headers, body)


def _encode_checked_headers(headers: dict[str, str], prefix: str) -> bytes:
    if len(headers) > MAX_HEADERS:
        raise InvalidArgument(prefix + "headers", f"{len(headers)} entries; at most {MAX_HEADERS}")
    for k, v in headers.items():
        if not isinstance(k, str) or not k or not isinstance(v, str):
            raise InvalidArgument(
                prefix + "headers", "keys must be non-empty strings, values strings"
            )
    data = encode_headers(headers)
    if len(data) > MAX_HEADER_BYTES:
        raise InvalidArgument(
            prefix + "headers", f"take {len(data)} bytes; at most {MAX_HEADER_BYTES}"
        )
    return data
