"""Signatures of pushed requests by the Standard Webhooks specification (pure).

A secret is ``whsec_<base64 of the key>`` (the ``whsec_`` prefix optional, as the
specification's libraries accept); the signed content is
``<webhook-id>.<webhook-timestamp>.<body>``; the ``webhook-signature`` header is
``v1,<base64 HMAC-SHA256>`` once per secret, space-separated, so a receiver that
knows either of two secrets verifies during a rotation. Receivers verify with the
specification's own libraries (``standardwebhooks.Webhook(secret).verify``).

Invariant: a key's bytes never leave this module in any form but an HMAC;
``Key``'s repr shows no material.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Sequence

__all__ = ["PREFIX", "Key", "parse_key", "signature"]

PREFIX = "whsec_"
MIN_KEY_BYTES = 16  # the specification's libraries make 24..64-byte keys; fewer is a mistake


class Key:
    """One signing key (the decoded bytes of a ``whsec_`` secret). Immutable."""

    __slots__ = ("_material",)

    def __init__(self, material: bytes) -> None:
        self._material = material

    def mac(self, content: bytes) -> bytes:
        return hmac.new(self._material, content, hashlib.sha256).digest()

    def __repr__(self) -> str:
        return "Key(<hidden>)"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Key) and hmac.compare_digest(self._material, other._material)

    def __hash__(self) -> int:
        return hash(hashlib.sha256(self._material).digest())


def parse_key(text: str) -> Key:
    """The key of a secret's text (``whsec_<base64>``, surrounding blanks ignored);
    ValueError, naming no part of the text, when it is not one."""
    body = text.strip()
    body = body.removeprefix(PREFIX)
    try:
        material = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("a signing secret is not whsec_<base64>") from None
    if len(material) < MIN_KEY_BYTES:
        raise ValueError(f"a signing secret holds under {MIN_KEY_BYTES} bytes")
    return Key(material)


def signature(keys: Sequence[Key], message_id: str, timestamp_s: int, body: bytes) -> str:
    """The ``webhook-signature`` header's value: one ``v1,<b64>`` per key, in order."""
    content = f"{message_id}.{timestamp_s}.".encode() + body
    return " ".join("v1," + base64.b64encode(k.mac(content)).decode() for k in keys)
