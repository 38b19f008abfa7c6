"""Recall handles (pure): what ``SendMessage`` hands back so the producer can
recall the message later (``RecallMessage``, which arrives at any node).

A handle is opaque to clients: ``dq1`` then the topic and delayq's message id
(which names the message's shard), base64url without padding. A handle that
does not decode, or names another topic than the recall's, is refused naming
``recall_handle``.
"""

from __future__ import annotations

import base64
import binascii

from ..errors import InvalidArgument

__all__ = ["recall_handle", "recalled_id"]

_VERSION = "dq1"
_FIELD = "recall_handle"


def recall_handle(topic: str, message_id: str) -> str:
    raw = f"{_VERSION} {topic} {message_id}".encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def recalled_id(handle: str, topic: str) -> str:
    """The delayq id a handle names, for a recall in ``topic``."""
    try:
        raw = base64.urlsafe_b64decode(handle + "=" * (-len(handle) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise InvalidArgument(_FIELD, "is not a recall handle delayq handed out") from None
    version, _, rest = raw.partition(" ")
    of_topic, _, message_id = rest.partition(" ")
    if version != _VERSION or not message_id:
        raise InvalidArgument(_FIELD, "is not a recall handle delayq handed out")
    if of_topic != topic:
        raise InvalidArgument(_FIELD, f"names a message of topic {of_topic!r}, not of {topic!r}")
    return message_id
