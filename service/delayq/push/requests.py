"""The headers of one pushed request (pure): ``request_headers``.

In order, later ones winning (names compared lower-cased): the message's own
headers, less those a target may not set (``pushtarget.RESERVED``, ``webhook-*``,
``delayq-*``), credentials and hop-by-hop ones (``MESSAGE_DROPPED``: a message's
producer does not speak for the target's owner, and a URL's ``user:pw@`` with an
``Authorization`` header fails every request) and any that are not valid HTTP
fields; the target's headers (which may set ``Authorization``); then
delayq's: ``webhook-id`` (the message id: a receiver drops duplicates by it),
``webhook-timestamp`` (this attempt's send time, seconds: the specification's
tolerance window applies per attempt), ``webhook-signature`` (one ``v1,`` per
key; absent when the target has no secret), ``delayq-topic``, ``delayq-group``,
``delayq-key`` (absent without a key), ``delayq-attempt``, ``delayq-due-ms``,
``delayq-delivered-ms``. ``content-type`` is the target's, else the message's,
else ``application/octet-stream``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from ..delivery.pushtarget import RESERVED, RESERVED_PREFIXES
from .signing import Key, signature

__all__ = ["DEFAULT_CONTENT_TYPE", "MESSAGE_DROPPED", "Pushed", "request_headers"]

DEFAULT_CONTENT_TYPE = "application/octet-stream"
MESSAGE_DROPPED = frozenset({"authorization", "cookie", "proxy-authenticate"})
"""A message's headers never sent, besides ``RESERVED`` and every ``proxy-*``."""
_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 token
_BAD_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # controls but tab


def _sendable(name: str, value: str) -> bool:
    """Whether a message's header goes into its request."""
    low = name.lower()
    return (
        _NAME.fullmatch(name) is not None
        and _BAD_VALUE.search(value) is None
        and low not in RESERVED
        and low not in MESSAGE_DROPPED
        and not low.startswith(RESERVED_PREFIXES)
        and not low.startswith("proxy-")
    )


class Pushed:
    """What of a message goes into its request's headers (a plain record)."""

    __slots__ = ("attempt", "delivered_ms", "due_ms", "group", "headers", "id", "key", "topic")

    def __init__(
        self,
        *,
        id: str,
        topic: str,
        group: str,
        key: str,
        headers: Mapping[str, str],
        attempt: int,
        due_ms: int,
        delivered_ms: int,
    ) -> None:
        self.id = id
        self.topic = topic
        self.group = group
        self.key = key
        self.headers = headers
        self.attempt = attempt
        self.due_ms = due_ms
        self.delivered_ms = delivered_ms


def request_headers(
    m: Pushed,
    body: bytes,
    target_headers: Sequence[tuple[str, str]],
    keys: Sequence[Key],
    now_s: int,
) -> dict[str, str]:
    """The request's headers, lower-cased names (see the module's docstring)."""
    out = {k.lower(): v for k, v in m.headers.items() if _sendable(k, v)}
    out.update((k.lower(), v) for k, v in target_headers)
    out.setdefault("content-type", DEFAULT_CONTENT_TYPE)
    out["webhook-id"] = m.id
    out["webhook-timestamp"] = str(now_s)
    if keys:
        out["webhook-signature"] = signature(keys, m.id, now_s, body)
    out["delayq-topic"] = m.topic
    out["delayq-group"] = m.group
    if m.key:
        out["delayq-key"] = m.key
    out["delayq-attempt"] = str(m.attempt)
    out["delayq-due-ms"] = str(m.due_ms)
    out["delayq-delivered-ms"] = str(m.delivered_ms)
    return out
