"""A RocketMQ message's properties as delayq headers, and back (pure).

delayq stores a message's topic, body, due time and string headers. What a
RocketMQ message carries besides lives in headers under the reserved prefix
``rocketmq.`` (``TAG``, ``KEYS``, ``MESSAGE_ID``, ...), given back on receive;
user properties are headers of their own names (so delayq's own consumers see
them as they were set). A user property under the reserved prefix is refused.
The headers the engine adds for a send's dedup (``formats.keyheaders``: the
client's message id and the port's window) are not user properties.

| header              | RocketMQ                                         |
|---------------------|--------------------------------------------------|
| ``rocketmq.tag``    | ``system_properties.tag``                        |
| ``rocketmq.keys``   | ``system_properties.keys``, space-separated      |
| ``rocketmq.id``     | ``system_properties.message_id`` (the client's)  |
| ``rocketmq.type``   | ``message_type``: NORMAL or DELAY                |
| ``rocketmq.born``   | ``born_timestamp`` (ms) and ``born_host``: "ms host" |
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import InvalidArgument
from ..formats.keyheaders import RESERVED as _DEDUP

__all__ = ["PREFIX", "Carried", "carried", "headers_of", "user_properties"]

PREFIX = "rocketmq."
TAG, KEYS, ID, TYPE, BORN = (PREFIX + n for n in ("tag", "keys", "id", "type", "born"))
_KEY_SEPARATOR = " "  # RocketMQ's own (MessageConst.KEY_SEPARATOR)


def headers_of(
    *,
    tag: str,
    keys: list[str],
    message_id: str,
    kind: str,
    born_ms: int,
    born_host: str,
    user: Mapping[str, str],
    field: str,
) -> dict[str, str]:
    """The headers that keep a sent message's properties; ``field`` prefixes the
    name of a refused property."""
    for k in user:
        if k.startswith(PREFIX):
            raise InvalidArgument(
                f"{field}.user_properties", f"{k!r}: the prefix {PREFIX!r} is delayq's own"
            )
    out = dict(user)
    for name, value in (
        (TAG, tag),
        (KEYS, _KEY_SEPARATOR.join(keys)),
        (ID, message_id),
        (TYPE, kind),
        (BORN, f"{born_ms} {born_host}".strip() if born_ms or born_host else ""),
    ):
        if value:
            out[name] = value
    return out


class Carried:
    """A received message's RocketMQ properties, read from its headers."""

    __slots__ = ("born_host", "born_ms", "keys", "kind", "message_id", "tag")

    def __init__(self, headers: Mapping[str, str]) -> None:
        self.tag = headers.get(TAG, "")
        keys = headers.get(KEYS, "")
        self.keys = keys.split(_KEY_SEPARATOR) if keys else []
        self.message_id = headers.get(ID, "")
        self.kind = headers.get(TYPE, "")
        ms, _, host = headers.get(BORN, "").partition(" ")
        self.born_ms = int(ms) if ms.isdigit() else 0
        self.born_host = host


def carried(headers: Mapping[str, str]) -> Carried:
    return Carried(headers)


def user_properties(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers that are not the reserved ones: the message's user properties."""
    return {k: v for k, v in headers.items() if not k.startswith(PREFIX) and k not in _DEDUP}
