"""Validation of client input (pure). Every error names the offending field."""

from __future__ import annotations

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
    if len(value) > MAX_TOPIC_LEN:
        raise InvalidArgument(field, f"{what} is {len(value)} characters; at most {MAX_TOPIC_LEN}")
    if not _NAME.fullmatch(value):
        raise InvalidArgument(
            field,
            f"{what} {value[:40]!r} may hold only letters, digits, '.', '_' and '-', "
            "and must start with a letter or digit",
        )
    return value


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
    """Validate one request; ``prefix`` (e.g. "messages[3].") goes before field names."""
    topic = check_topic(req.topic, prefix + "topic")
    body = req.body
    if not isinstance(body, bytes | bytearray | memoryview):
        raise InvalidArgument(prefix + "body", "must be bytes")
    if len(body) == 0:
        raise InvalidArgument(prefix + "body", "must not be empty")
    if len(body) > settings.max_body_bytes:
        raise InvalidArgument(
            prefix + "body", f"is {len(body)} bytes; at most {settings.max_body_bytes}"
        )
    due = resolve_due(req.deliver_at_ms, req.delay_ms, now_ms, settings, prefix)
    key = req.key.encode() if isinstance(req.key, str) else b""
    if not isinstance(req.key, str):
        raise InvalidArgument(prefix + "key", "must be a string")
    if len(key) > MAX_KEY_BYTES:
        raise InvalidArgument(prefix + "key", f"is {len(key)} bytes; at most {MAX_KEY_BYTES}")
    headers = b""
    if req.headers:
        if len(req.headers) > MAX_HEADERS:
            raise InvalidArgument(
                prefix + "headers", f"{len(req.headers)} entries; at most {MAX_HEADERS}"
            )
        for k, v in req.headers.items():
            if not isinstance(k, str) or not k or not isinstance(v, str):
                raise InvalidArgument(
                    prefix + "headers", "keys must be non-empty strings, values strings"
                )
        headers = encode_headers(req.headers)
        if len(headers) > MAX_HEADER_BYTES:
            raise InvalidArgument(
                prefix + "headers", f"take {len(headers)} bytes; at most {MAX_HEADER_BYTES}"
            )
    return Prepared(topic, due, key, headers, bytes(body))
