"""Recall handles (pure): what ``SendMessage`` hands back so the producer can
recall the message later (``RecallMessage``, which arrives at any node).

A handle is opaque to clients: ``dq1``, the topic, delayq's message id (which
names the message's shard) and the client's message id (a recall answers with
it, as RocketMQ does), space-separated, base64url without padding. A handle
that does not decode, or names another topic than the recall's, is refused
naming ``recall_handle``.
"""

from __future__ import annotations

import base64
import binascii
from typing import NamedTuple

from ..errors import InvalidArgument

__all__ = ["Recalled", "recall_handle", "recalled"]

_VERSION = "dq1"
_FIELD = "recall_handle"


class Recalled(NamedTuple):
    """What a recall handle names: delayq's id and the client's message id."""

    id: str
    client_id: str


def recall_handle(topic: str, message_id: str, client_id: str = "") -> str:
    raw = f"{_VERSION} {topic} {message_id} {client_id}".rstrip().encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def recalled(handle: str, topic: str) -> Recalled:
    """What a handle names, for a recall in ``topic``."""
    try:
        raw = base64.urlsafe_b64decode(handle + "=" * (-len(handle) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise InvalidArgument(_FIELD, "is not a recall handle delayq handed out") from None
    version, _, rest = raw.partition(" ")
    of_topic, _, rest = rest.partition(" ")
    message_id, _, client_id = rest.partition(" ")
    if version != _VERSION or not message_id:
        raise InvalidArgument(_FIELD, "is not a recall handle delayq handed out")
    if of_topic != topic:
        raise InvalidArgument(_FIELD, f"names a message of topic {of_topic!r}, not of {topic!r}")
    return Recalled(message_id, client_id)
