"""The text codec of message ids (``ids``) and receipt handles (``receipts``)
(pure): compact, checksummed text tokens, packed from and unpacked into their
integer fields, one at a time or a batch at once. (A *token* here is always this
text form; the nodes' lease tokens are another thing, in ``replication``.)

Bytes: a kind byte, unsigned LEB128 varints for all fields but the last, the
last field as minimal big-endian bytes (its length is what remains), for a kind
with a *trailer* 8 more bytes (a u64, big-endian: a receipt's MAC), and one
check byte (low byte of the CRC32C of what precedes it). Text: URL-safe base64
without padding, so a message id is about 11 characters and safe in URLs,
file names and logs. Decoding rejects unknown kinds, bad characters, bad
lengths and a wrong check byte, so a mistyped id is reported as malformed, not
looked up.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Sequence

import crc32c
import numpy as np

from .batchops import FEW, strided
from .errors import InvalidArgument, quote

__all__ = [
    "TRAILER",
    "TokenError",
    "TokenPrefix",
    "check_bytes",
    "invalid",
    "pack_token",
    "unpack_all",
    "unpack_columns",
    "unpack_rows",
    "unpack_token",
]

_CHARS = re.compile(rb"[A-Za-z0-9_-]+")
TRAILER = 8
"""Bytes of a token's trailer, when its kind has one (a u64, big-endian)."""


class TokenError(ValueError):
    """The text is not a well-formed token of the expected kind."""


def invalid(what: str, text: object, exc: TokenError, field: str) -> InvalidArgument:
    """The client-facing error for a malformed token, naming the field."""
    return InvalidArgument(field, f"malformed {what} {quote(text)} ({exc})")


def _varint(n: int) -> bytes:
    if n < 0:
        raise ValueError("token fields are unsigned")
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class TokenPrefix:
    """Tokens that share their kind and leading fields (e.g. one shard and epoch):
    the shared bytes are encoded once, then ``pack(last)`` is cheap. ``trailer``:
    the kind's tokens end in a ``TRAILER``-byte value after the last field."""

    def __init__(self, kind: int, *fields: int, trailer: bool = False) -> None:
        self._prefix = bytes((kind,)) + b"".join(_varint(f) for f in fields)
        self._tail = TRAILER if trailer else 0
        self._widths: np.ndarray | None = None  # width by bit length, built on first batch

    def _width(self, last_bits: int) -> int:
        """Bytes for the last field: minimal, then widened (leading zeros) so the
        whole token is a multiple of 3 bytes and its base64 has no padding."""
        width = max(1, (last_bits + 7) // 8)
        return width + (-(len(self._prefix) + width + self._tail + 1)) % 3

    def pack(self, last: int, trailer: int = 0) -> str:
        raw = self._prefix + last.to_bytes(self._width(last.bit_length()), "big")
        if self._tail:
            raw += trailer.to_bytes(TRAILER, "big")
        return base64.urlsafe_b64encode(raw + bytes((_check_byte(raw),))).decode()

    def pack_many(
        self, lasts: np.ndarray, *, ascending: bool = False, trailers: np.ndarray | None = None
    ) -> list[str]:
        """``pack`` for many values at once, same text as ``pack`` for each: rows of one
        width are base64-encoded together (3-byte rows encode independently), then split.
        ``ascending``: the caller knows the values ascend (the ends bound them).
        ``trailers``: each token's trailer (a kind with one)."""
        if (trailers is None) == bool(self._tail):
            raise ValueError("trailers go with (only) a kind of token that has them")
        if len(lasts) < FEW:  # a few: numpy's set-up costs more than it saves
            return self._pack_each(lasts, trailers)
        lasts = np.asarray(lasts, dtype=np.uint64)
        tails = None if trailers is None else np.asarray(trailers, dtype=np.uint64)
        if ascending:
            low, high = int(lasts[0]).bit_length(), int(lasts[-1]).bit_length()
        else:
            low = int(np.minimum.reduce(lasts)).bit_length()
            high = int(np.maximum.reduce(lasts)).bit_length()
        if self._width(low) == self._width(high):  # one width: the usual case
            return self._pack_width(lasts, tails, self._width(high), ascending=ascending)
        if high > 52:  # beyond exact float bit lengths
            return self._pack_each(lasts, tails)
        bits = np.frexp(lasts.astype(np.float64))[1]  # == int.bit_length() below 2**53
        if self._widths is None:
            self._widths = np.array([self._width(b) for b in range(54)])
        widths = self._widths[bits]
        out: list[str] = [""] * len(lasts)
        for width in np.unique(widths).tolist():
            sel = np.nonzero(widths == width)[0]
            texts = self._pack_width(lasts[sel], None if tails is None else tails[sel], width)
            for i, text in zip(sel.tolist(), texts, strict=True):
                out[i] = text
        return out

    def _pack_each(self, lasts: np.ndarray, tails: np.ndarray | None) -> list[str]:
        values = np.asarray(lasts).tolist()
        if tails is None:
            return [self.pack(int(v)) for v in values]
        trailers = np.asarray(tails).tolist()
        return [self.pack(int(v), int(t)) for v, t in zip(values, trailers, strict=True)]

    def _pack_width(
        self, lasts: np.ndarray, tails: np.ndarray | None, width: int, *, ascending: bool = False
    ) -> list[str]:
        plen = len(self._prefix)
        end = plen + width  # where the last field ends (and a trailer starts)
        size = end + self._tail + 1
        rows = np.empty((len(lasts), size), dtype=np.uint8)
        rows[:, :plen] = _row(self._prefix)
        big_endian = lasts.astype(">u8").view(np.uint8).reshape(-1, 8)
        if width <= 8:
            rows[:, plen:end] = big_endian[:, 8 - width :]
        else:  # widened past a u64's 8 bytes so the text has no padding: leading zeros
            rows[:, plen : end - 8] = 0
            rows[:, end - 8 : end] = big_endian
        if tails is not None:
            rows[:, end:-1] = tails.astype(">u8").view(np.uint8).reshape(-1, TRAILER)
        checks = None
        if ascending and not self._tail:  # (the checks' shortcut wants the field last)
            checks = self._ascending_checks(lasts, big_endian, width)
        rows[:, -1] = check_bytes(rows[:, :-1]) if checks is None else checks
        text = binascii.b2a_base64(rows.tobytes(), newline=False).translate(_URLSAFE).decode()
        return list(strided(text, len(lasts), size // 3 * 4))

    def _ascending_checks(
        self, lasts: np.ndarray, big_endian: np.ndarray, width: int
    ) -> np.ndarray | None:
        """The check bytes of ascending values whose bits above the low 16 take at
        most two values (a batch of CommitLog positions), or None. Tokens that differ
        only in their last two bytes have checks that differ by what those bytes XOR
        in (CRC32C is affine): one CRC per high part, then one table look-up each."""
        high0, high1 = int(lasts[0]) >> 16, int(lasts[-1]) >> 16
        if width < 2 or high1 - high0 > 1:
            return None
        low_half = big_endian[:, 6:8].view(">u2")[:, 0]  # the last two bytes of each token
        checks: np.ndarray = _low_half_table().take(low_half)

        def check_at(high: int) -> int:  # the check of the token whose low two bytes are 0
            return _check_byte(self._prefix + (high << 16).to_bytes(width, "big"))

        base = check_at(high0)
        checks ^= np.uint8(base)
        if high1 != high0:  # the values from the first of the next high part on
            split = int(lasts.searchsorted(np.uint64(high1 << 16)))
            checks[split:] ^= np.uint8(base ^ check_at(high1))
        return checks


_URLSAFE = bytes.maketrans(b"+/", b"-_")
_FROM_URLSAFE = bytes.maketrans(b"-_", b"+/")


def _check_byte(raw: bytes | bytearray) -> int:
    """A token's check byte: the low byte of the CRC32C of the bytes before it."""
    return crc32c.crc32c(raw) & 0xFF


@functools.lru_cache(maxsize=64)
def _row(prefix: bytes) -> np.ndarray:
    return np.frombuffer(prefix, dtype=np.uint8)


@functools.lru_cache(maxsize=16)
def _check_table(width: int) -> tuple[np.uint8, np.ndarray, np.ndarray]:
    """For rows of ``width`` bytes: the check byte of the zero row; ``t[p * 256 + v]``,
    what byte ``v`` at position ``p`` XORs into it (CRC32C is affine for a fixed
    length, so its low byte is too); and each position's offset into ``t``."""
    zero = _check_byte(bytes(width))
    t = np.empty(width * 256, dtype=np.uint8)
    row = bytearray(width)
    for p in range(width):
        for v in range(256):
            row[p] = v
            t[p * 256 + v] = _check_byte(row) ^ zero
        row[p] = 0
    return np.uint8(zero), t, np.arange(0, width * 256, 256, dtype=np.intp)


@functools.lru_cache(maxsize=1)
def _low_half_table() -> np.ndarray:
    """``t[v]``: what the last two bytes before a check byte, ``v`` as a big-endian
    u16, XOR into it. The same for tokens of any length: a byte's share of a CRC
    depends only on how many bytes follow it."""
    _, t, _ = _check_table(2)
    table: np.ndarray = np.bitwise_xor.outer(t[:256], t[256:]).ravel()
    return table


def check_bytes(rows: np.ndarray) -> np.ndarray:
    """The check byte (low byte of CRC32C) of each row of a 2-D uint8 array, by
    table look-up: a handful of numpy calls instead of a CRC call per token."""
    zero, table, offsets = _check_table(rows.shape[1])
    checks: np.ndarray = np.bitwise_xor.reduce(table.take(rows + offsets), axis=1) ^ zero
    return checks


def pack_token(kind: int, *fields: int) -> str:
    if not fields or fields[-1] < 0:
        raise ValueError("token fields are unsigned, at least one")
    return TokenPrefix(kind, *fields[:-1]).pack(fields[-1])


def unpack_columns(
    texts: Sequence[str], kind: int, count: int, *, trailer: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """``unpack_token`` for many texts at once, as columns: a (len, count) uint64
    array of fields (one more column, the last, for a ``trailer``) and a mask of
    the rows decoded. Fast path for tokens whose
    leading fields fit one byte each (the usual case; fewer than ``FEW`` texts
    are decoded one by one, any that fit u64); rows not decoded must go through
    ``unpack_token`` (which also explains what is wrong)."""
    n = len(texts)
    tail = TRAILER if trailer else 0
    fields = np.zeros((n, count + (1 if trailer else 0)), dtype=np.uint64)
    done = np.zeros(n, dtype=bool)
    if n < FEW:  # a few (a single cancel or lookup): one by one, no numpy set-up
        for i, text in enumerate(texts):
            try:
                got = unpack_token(text, kind, count, trailer=trailer)
            except TokenError:
                continue
            if max(got) < 1 << 64:
                fields[i], done[i] = got, True
        return fields, done
    by_len: dict[int, list[int]] = {}
    try:
        whole: str | None = "".join(texts)  # raises unless every one is text
    except TypeError:
        whole = None
    lengths = set(map(len, texts)) if whole is not None else None
    if lengths is not None and len(lengths) == 1:  # the usual case: ids of one length
        by_len[lengths.pop()] = list(range(n))
    else:
        for i, t in enumerate(texts):
            if isinstance(t, str):
                by_len.setdefault(len(t), []).append(i)
    lead = count - 1
    for length, sel in by_len.items():
        size = length // 4 * 3
        width = size - 2 - lead - tail
        if not 0 < length <= 64 or length % 4 or width < 1 or width > 8:
            continue
        picked = whole if whole is not None and len(sel) == n else "".join(texts[i] for i in sel)
        blob = picked.encode("ascii", "replace")
        if not _CHARS.fullmatch(blob):
            continue
        decoded = binascii.a2b_base64(blob.translate(_FROM_URLSAFE))
        rows = np.frombuffer(decoded, dtype=np.uint8).reshape(-1, size)
        good = _lead_ok(rows[:, : 1 + lead], kind)
        good &= rows[:, -1] == check_bytes(rows[:, :-1])
        padded = np.zeros((len(sel), 8), dtype=np.uint8)  # the last field, big-endian
        padded[:, 8 - width :] = rows[:, 1 + lead : 1 + lead + width]
        idx = slice(None) if len(sel) == n else np.asarray(sel)
        fields[idx, :lead] = rows[:, 1 : 1 + lead]
        fields[idx, lead] = padded.view(">u8").ravel()
        if tail:
            fields[idx, count] = np.ascontiguousarray(rows[:, -1 - tail : -1]).view(">u8").ravel()
        done[idx] = good
    return fields, done


def _lead_ok(heads: np.ndarray, kind: int) -> np.ndarray:
    """Per row of tokens' first bytes: the kind byte, then leading fields of one
    varint byte each (high bit clear). Rows that all repeat the first row (one
    shard and epoch: the usual batch) are told by one compare of their bytes."""
    lead = heads.tobytes()
    first = lead[: heads.shape[1]]
    if lead == first * len(heads):
        mask_int, expect_int = _lead_ints(kind, heads.shape[1] - 1)
        ok = int.from_bytes(first, "big") & mask_int == expect_int
        return (np.ones if ok else np.zeros)(len(heads), dtype=bool)
    mask, expect = _lead_check(kind, heads.shape[1] - 1)
    good: np.ndarray = ((heads & mask) == expect).all(axis=1)
    return good


@functools.lru_cache(maxsize=16)
def _lead_ints(kind: int, lead: int) -> tuple[int, int]:
    """``_lead_check`` as big-endian integers, to test one row in one operation."""
    mask, expect = _lead_check(kind, lead)
    return int.from_bytes(mask.tobytes(), "big"), int.from_bytes(expect.tobytes(), "big")


@functools.lru_cache(maxsize=16)
def _lead_check(kind: int, lead: int) -> tuple[np.ndarray, np.ndarray]:
    """Mask and expected value of a token's first ``1 + lead`` bytes: the kind
    byte whole, then only the varint continuation bit of each leading field."""
    mask = np.array([0xFF] + [0x80] * lead, dtype=np.uint8)
    return mask, np.array([kind] + [0] * lead, dtype=np.uint8)


def unpack_rows(
    texts: Sequence[str], kind: int, count: int, *, trailer: bool = False
) -> tuple[list[list[int]], dict[int, TokenError]]:
    """Every text decoded, as rows of fields (and trailer): the batch fast path, then
    ``unpack_token`` for the rest. A text that is not a token leaves its row zeros
    and has its error (which says what is wrong) by index."""
    fields, done = unpack_columns(texts, kind, count, trailer=trailer)
    rows: list[list[int]] = fields.tolist()
    errors: dict[int, TokenError] = {}
    for i in [] if done.all() else np.flatnonzero(~done).tolist():
        try:
            rows[i] = list(unpack_token(texts[i], kind, count, trailer=trailer))
        except TokenError as exc:
            errors[i] = exc
    return rows, errors


def unpack_all(texts: Sequence[str], kind: int, count: int) -> list[tuple[int, ...] | TokenError]:
    """Every text decoded (``unpack_rows``): its fields, or its error."""
    rows, errors = unpack_rows(texts, kind, count)
    return [errors[i] if i in errors else tuple(row) for i, row in enumerate(rows)]


def unpack_token(text: str, kind: int, count: int, *, trailer: bool = False) -> tuple[int, ...]:
    """Decode a token of ``kind`` holding exactly ``count`` fields (and then its
    trailer, for a kind with one)."""
    if not isinstance(text, str):
        raise TokenError(f"not text but {type(text).__name__}")
    if not text or len(text) > 64:
        raise TokenError("empty or too long")
    data = text.encode("ascii", "replace")
    if not _CHARS.fullmatch(data):
        raise TokenError("bad character")
    try:
        raw = base64.urlsafe_b64decode(data + b"=" * (-len(data) % 4))
    except binascii.Error as exc:
        raise TokenError("bad length") from exc
    tail = TRAILER if trailer else 0
    if len(raw) < 3 + tail or raw[0] != kind:
        raise TokenError("wrong kind")
    if _check_byte(raw[:-1]) != raw[-1]:
        raise TokenError("check byte mismatch")
    fields: list[int] = []
    i, end = 1, len(raw) - 1 - tail
    for _ in range(count - 1):
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
    if not 1 <= end - i <= 10:
        raise TokenError("bad length")
    fields.append(int.from_bytes(raw[i:end], "big"))
    if tail:
        fields.append(int.from_bytes(raw[end : end + tail], "big"))
    return tuple(fields)
