"""Compact, checksummed text tokens for message ids and receipt handles (pure).

A token is a kind byte, unsigned LEB128 varints and one check byte (low byte
of the CRC32C of what precedes it), written in lower-case Crockford base32
without padding. A typical message id is 10-14 characters. Decoding rejects
unknown kinds, bad characters, trailing bytes and a wrong check byte, so a
mistyped id is reported as malformed, not looked up.
"""

from __future__ import annotations

import crc32c

__all__ = ["TokenError", "pack_token", "unpack_token"]

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
_DECODE = {c: i for i, c in enumerate(_ALPHABET)}


class TokenError(ValueError):
    """The text is not a well-formed token of the expected kind."""


def _varint(n: int, out: bytearray) -> None:
    if n < 0:
        raise ValueError("token fields are unsigned")
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return


def pack_token(kind: int, *fields: int) -> str:
    raw = bytearray([kind])
    for f in fields:
        _varint(f, raw)
    raw.append(crc32c.crc32c(bytes(raw)) & 0xFF)
    n = int.from_bytes(raw, "big")
    chars = []
    for _ in range((len(raw) * 8 + 4) // 5):
        chars.append(_ALPHABET[n & 31])
        n >>= 5
    return "".join(reversed(chars))


def unpack_token(text: str, kind: int, count: int) -> tuple[int, ...]:
    """Decode a token of ``kind`` holding exactly ``count`` fields."""
    if not text or len(text) > 64:
        raise TokenError("empty or too long")
    n = 0
    for c in text.lower():
        v = _DECODE.get(c)
        if v is None:
            raise TokenError(f"bad character {c!r}")
        n = (n << 5) | v
    nbytes = len(text) * 5 // 8
    try:
        raw = n.to_bytes(nbytes, "big")
    except OverflowError as exc:
        raise TokenError("bad length") from exc
    if len(raw) < 2 or raw[0] != kind:
        raise TokenError("wrong kind")
    if crc32c.crc32c(raw[:-1]) & 0xFF != raw[-1]:
        raise TokenError("check byte mismatch")
    fields: list[int] = []
    i, end = 1, len(raw) - 1
    for _ in range(count):
        value, shift = 0, 0
        while True:
            if i >= end or shift > 63:
                raise TokenError("truncated")
            b = raw[i]
            i += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        fields.append(value)
    if i != end:
        raise TokenError("trailing bytes")
    return tuple(fields)
