"""Receipt handles (pure): one hand-out of one message to one consumer group.

A receipt is a token (see ``idcodec``) of (shard, topic id, attempt, ready-queue
offset) with a trailer: a MAC under the shard's secret key (``ReceiptKey``; on
disk ``formats.receiptkey``), over the fields, the group the message was handed
to and the message's sequence number (kept in its ready-queue entry). Only the
shard that holds the key can make one, so a receipt names its shard, topic,
group, message and attempt, and a receipt of another group, a guessed or
altered one, or one for another message at that offset (a log that diverged in
a failover) does not check. The shard routes Ack and ChangeInvisibility in a
cluster; the offset goes last so one receive's receipts share a prefix and
encode as a batch. Acking with a receipt from an earlier attempt is answered
STALE, because the message has been handed out again since.

The MAC: keyed BLAKE2s (RFC 7693, a MAC by design; ~1 µs a receipt, about half
of HMAC-SHA256 in CPython) with the 32-byte key and personalisation
``b"dqrcpt1"``, cut to 8 bytes (a guess is right once in 2**64), over
little-endian:

| offset | size | type  | meaning                                   |
|-------:|-----:|-------|-------------------------------------------|
| 0      | 2    | u16   | n: bytes of the group name                |
| 2      | n    | bytes | the group name, UTF-8                     |
| 2+n    | 4    | u32   | shard                                     |
| 6+n    | 4    | u32   | topic id                                  |
| 10+n   | 8    | u64   | attempt                                   |
| 18+n   | 8    | u64   | ready-queue offset                        |
| 26+n   | 8    | u64   | the message's seq (its ready entry's)     |

The part up to the topic id is shared by one receive's receipts and hashed once.
"""

from __future__ import annotations

import functools
import hashlib
import struct
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from .errors import InvalidArgument
from .idcodec import TokenError, TokenPrefix, invalid, unpack_columns, unpack_rows, unpack_token

__all__ = ["KEY_SIZE", "Receipt", "ReceiptKey"]

KEY_SIZE = 32
"""Bytes of a shard's receipt key (BLAKE2s takes up to 32)."""

_KIND = 0x52  # 'R'
_FIELDS = 4
_MAC_SIZE = 8
_PERSON = b"dqrcpt1"
_HEAD = struct.Struct("<H")
_IDS = struct.Struct("<II")
_ROW = struct.Struct("<QQQ")  # attempt, offset, seq


@functools.lru_cache(maxsize=1024)
def _prefix(shard: int, topic_id: int, attempt: int) -> TokenPrefix:
    return TokenPrefix(_KIND, shard, topic_id, attempt, trailer=True)


class Receipt(NamedTuple):
    shard: int
    topic_id: int
    offset: int
    attempt: int
    mac: int = 0  # (left 0 only by tests making receipts up)

    def __str__(self) -> str:
        return _prefix(self.shard, self.topic_id, self.attempt).pack(self.offset, self.mac)

    @staticmethod
    def texts(
        shard: int, topic_id: int, attempt: int, offsets: np.ndarray, macs: np.ndarray
    ) -> list[str]:
        """Receipts of many offsets of one topic and attempt (the batch fast path)."""
        return _prefix(shard, topic_id, attempt).pack_many(offsets, trailers=macs)

    @staticmethod
    def parse_columns(
        texts: Sequence[str], field: str = "receipts"
    ) -> tuple[np.ndarray, dict[int, InvalidArgument]]:
        """Parse many receipts into a (len, 5) uint64 array of rows (shard, topic id,
        attempt, offset, mac), the token's field order (the batch path: no object per
        receipt). A malformed one gets an error naming ``field[i]``, by index, and its
        row is left zeros."""
        cols, done = unpack_columns(texts, _KIND, _FIELDS, trailer=True)
        errors: dict[int, InvalidArgument] = {}
        for i in [] if done.all() else np.flatnonzero(~done).tolist():
            try:
                got = unpack_token(texts[i], _KIND, _FIELDS, trailer=True)
                if max(got) >= 1 << 64:  # (no shard hands out such a receipt)
                    raise TokenError("a field out of range")
            except TokenError as exc:
                errors[i] = invalid("receipt handle", texts[i], exc, f"{field}[{i}]")
                continue
            cols[i] = got
        return cols, errors

    @staticmethod
    def shards(texts: Sequence[str]) -> list[int]:
        """The shard of each receipt (-1 for a malformed one: any shard may answer
        that it is malformed). The client's routing path: no error texts built."""
        rows, errors = unpack_rows(texts, _KIND, _FIELDS, trailer=True)
        return [-1 if i in errors else row[0] for i, row in enumerate(rows)]

    @classmethod
    def parse_many(
        cls, texts: Sequence[str], field: str = "receipts"
    ) -> list[Receipt | InvalidArgument]:
        """Parse many receipts; a malformed one becomes an error naming ``field[i]``."""
        cols, errors = cls.parse_columns(texts, field)
        return [
            errors.get(i) or cls(shard, tid, off, att, mac)
            for i, (shard, tid, att, off, mac) in enumerate(cols.tolist())
        ]

    @classmethod
    def parse(cls, text: str, field: str = "receipt") -> Receipt:
        got = cls.parse_many([text])[0]
        if isinstance(got, InvalidArgument):
            raise InvalidArgument(field, got.message)
        return got


class ReceiptKey:
    """A shard's receipt key: makes its receipts and checks them. Immutable;
    safe to share between threads (each MAC works on its own copy of the keyed
    hash state)."""

    def __init__(self, key: bytes, shard: int) -> None:
        if len(key) != KEY_SIZE:
            raise ValueError(f"a receipt key is {KEY_SIZE} bytes, not {len(key)}")
        self.key = key
        self.shard = shard
        self._keyed = hashlib.blake2s(key=key, digest_size=_MAC_SIZE, person=_PERSON)

    def macs(
        self,
        topic_id: int,
        group: str,
        attempts: Sequence[int] | np.ndarray,
        offsets: Sequence[int] | np.ndarray,
        seqs: Sequence[int] | np.ndarray,
    ) -> np.ndarray:
        """The MAC (as a u64) of each (attempt, offset, seq) handed to ``group``."""
        name = group.encode()
        head = self._keyed.copy()
        head.update(_HEAD.pack(len(name)) + name + _IDS.pack(self.shard, topic_id))
        copy, row, digests = head.copy, _ROW.pack, []
        for a, o, s in zip(_ints(attempts), _ints(offsets), _ints(seqs), strict=True):
            h = copy()  # per receipt: a MAC has no batch form
            h.update(row(a, o, s))
            digests.append(h.digest())
        return np.frombuffer(b"".join(digests), dtype=">u8").astype(np.uint64)

    def texts(
        self,
        topic_id: int,
        group: str,
        attempts: Sequence[int],
        offsets: Sequence[int],
        seqs: np.ndarray,
    ) -> list[str]:
        """The receipts of one hand-out of ``offsets`` (messages ``seqs``) to ``group``,
        each at its attempt: encoded a batch per attempt."""
        macs = self.macs(topic_id, group, attempts, offsets, seqs)
        offs = np.asarray(offsets, dtype=np.uint64)
        first = attempts[0] if len(attempts) else 1
        if all(a == first for a in attempts):  # the usual: one attempt
            return Receipt.texts(self.shard, topic_id, first, offs, macs)
        att = np.asarray(attempts)
        out = [""] * len(offs)
        for attempt in set(attempts):
            sel = np.flatnonzero(att == attempt)
            texts = Receipt.texts(self.shard, topic_id, attempt, offs[sel], macs[sel])
            for i, text in zip(sel.tolist(), texts, strict=True):
                out[i] = text
        return out


def _ints(values: Sequence[int] | np.ndarray) -> Sequence[int]:
    """Python ints (numpy's cost more to pack one by one)."""
    return values.tolist() if isinstance(values, np.ndarray) else values
