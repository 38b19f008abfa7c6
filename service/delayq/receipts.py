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

The MAC (one vectorised computation per batch): AES-128 CBC-MAC of two blocks,
cut to 8 bytes (a guess is right once in 2**64), under a key of the batch's
group, shard and topic: the first 16 bytes of keyed BLAKE2s (RFC 7693) with the
shard's 32-byte key and personalisation ``b"dqrcpt2"`` over the head below. The
blocks, little-endian u64s: (attempt, offset) and (seq, 0). CBC-MAC is a secure
MAC for messages of one fixed length, which these always are; OpenSSL encrypts a
whole batch's blocks in two calls (~0.05 µs a receipt against ~1 µs for a
BLAKE2s per receipt).

| offset | size | type  | meaning (the key's head)                  |
|-------:|-----:|-------|-------------------------------------------|
| 0      | 2    | u16   | n: bytes of the group name                |
| 2      | n    | bytes | the group name, UTF-8                     |
| 2+n    | 4    | u32   | shard                                     |
| 6+n    | 4    | u32   | topic id                                  |

Receipts handed out before this MAC (keyed BLAKE2s per receipt over the head,
then attempt, offset and seq as u64s, personalisation ``b"dqrcpt1"``) still
check (``ReceiptKey.check`` tries that one for a receipt the new MAC refuses), so
an upgrade redelivers nothing; a node older than this MAC refuses the new ones
as INVALID_RECEIPT (their messages come again after their invisibility).
"""

from __future__ import annotations

import functools
import hashlib
import struct
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from .errors import InvalidArgument
from .idcodec import TokenError, TokenPrefix, invalid, unpack_columns, unpack_rows, unpack_token

__all__ = ["KEY_SIZE", "Receipt", "ReceiptKey"]

KEY_SIZE = 32
"""Bytes of a shard's receipt key (BLAKE2s takes up to 32)."""

_KIND = 0x52  # 'R'
_FIELDS = 4
_MAC_SIZE = 8
_PERSON = b"dqrcpt2"
_LEGACY_PERSON = b"dqrcpt1"
_SUBKEY_SIZE = 16  # AES-128
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
    safe to share between threads (each batch works on its own copy of the keyed
    hash state and its own cipher)."""

    def __init__(self, key: bytes, shard: int) -> None:
        if len(key) != KEY_SIZE:
            raise ValueError(f"a receipt key is {KEY_SIZE} bytes, not {len(key)}")
        self.key = key
        self.shard = shard
        self._subkeys = hashlib.blake2s(key=key, digest_size=_SUBKEY_SIZE, person=_PERSON)
        self._legacy = hashlib.blake2s(key=key, digest_size=_MAC_SIZE, person=_LEGACY_PERSON)

    def _head(self, topic_id: int, group: str) -> bytes:
        name = group.encode()
        return _HEAD.pack(len(name)) + name + _IDS.pack(self.shard, topic_id)

    def macs(
        self,
        topic_id: int,
        group: str,
        attempts: Sequence[int] | np.ndarray,
        offsets: Sequence[int] | np.ndarray,
        seqs: Sequence[int] | np.ndarray,
    ) -> np.ndarray:
        """The MAC (as a u64) of each (attempt, offset, seq) handed to ``group``: the
        module's CBC-MAC, the whole batch in two AES calls."""
        n = len(offsets)
        sub = self._subkeys.copy()
        sub.update(self._head(topic_id, group))
        aes = Cipher(algorithms.AES(sub.digest()), modes.ECB()).encryptor()
        blocks = np.empty((n, 2), dtype="<u8")
        blocks[:, 0] = attempts
        blocks[:, 1] = offsets
        chained = np.frombuffer(aes.update(blocks.tobytes()), dtype="<u8").reshape(n, 2)
        blocks[:, 0] = chained[:, 0] ^ np.asarray(seqs, dtype="<u8")
        blocks[:, 1] = chained[:, 1]
        tags = np.frombuffer(aes.update(blocks.tobytes()), dtype=">u8").reshape(n, 2)
        return tags[:, 0].astype(np.uint64)

    def check(
        self,
        topic_id: int,
        group: str,
        attempts: np.ndarray,
        offsets: np.ndarray,
        seqs: np.ndarray,
        macs: np.ndarray,
    ) -> np.ndarray:
        """Which receipts' ``macs`` are theirs under this key: the MAC of ``macs``, or
        (for a receipt it refuses) the one before it."""
        ok: np.ndarray = self.macs(topic_id, group, attempts, offsets, seqs) == macs
        if not ok.all():
            old = np.flatnonzero(~ok)
            ok[old] = (
                self.legacy_macs(topic_id, group, attempts[old], offsets[old], seqs[old])
                == macs[old]
            )
        return ok

    def legacy_macs(
        self,
        topic_id: int,
        group: str,
        attempts: Sequence[int] | np.ndarray,
        offsets: Sequence[int] | np.ndarray,
        seqs: Sequence[int] | np.ndarray,
    ) -> np.ndarray:
        """The MAC before this one (keyed BLAKE2s per receipt), for receipts handed
        out before it."""
        head = self._legacy.copy()
        head.update(self._head(topic_id, group))
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
