"""Receipt handles (pure): which delivery of which ready-queue entry a consumer holds.

A receipt is a token (see ``tokens``) of (shard, topic id, attempt, ready-queue
offset). The shard routes Ack and ChangeInvisibility in a cluster and keeps the
receipts of different shards apart (topic ids and offsets are per shard); the
offset goes last so one receive's receipts share a prefix and encode as a batch.
Acking with a receipt from an earlier attempt is answered STALE, because the
message has been handed out again since.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from .errors import InvalidArgument
from .tokens import TokenPrefix, invalid, pack_token, unpack_rows

__all__ = ["Receipt"]


@functools.lru_cache(maxsize=1024)
def _prefix(shard: int, topic_id: int, attempt: int) -> TokenPrefix:
    return TokenPrefix(_KIND, shard, topic_id, attempt)


_KIND = 0x52  # 'R'
_FIELDS = 4


class Receipt(NamedTuple):
    shard: int
    topic_id: int
    offset: int
    attempt: int

    def __str__(self) -> str:
        return pack_token(_KIND, self.shard, self.topic_id, self.attempt, self.offset)

    @staticmethod
    def texts(shard: int, topic_id: int, attempt: int, offsets: np.ndarray) -> list[str]:
        """Receipts of many offsets of one topic and attempt (the batch fast path)."""
        return _prefix(shard, topic_id, attempt).pack_many(offsets)

    @staticmethod
    def parse_rows(
        texts: Sequence[str], field: str = "receipts"
    ) -> tuple[list[list[int]], dict[int, InvalidArgument]]:
        """Parse many receipts into rows of (shard, topic id, attempt, offset), the
        token's field order (the batch path: no object per receipt). A malformed one
        gets an error naming ``field[i]``, by index, and its row is left zeros."""
        rows, bad = unpack_rows(texts, _KIND, _FIELDS)
        errors = {
            i: invalid("receipt handle", texts[i], exc, f"{field}[{i}]") for i, exc in bad.items()
        }
        return rows, errors

    @staticmethod
    def shards(texts: Sequence[str]) -> list[int]:
        """The shard of each receipt (-1 for a malformed one: any shard may answer
        that it is malformed). The client's routing path: no error texts built."""
        rows, errors = unpack_rows(texts, _KIND, _FIELDS)
        return [-1 if i in errors else row[0] for i, row in enumerate(rows)]

    @classmethod
    def parse_many(
        cls, texts: Sequence[str], field: str = "receipts"
    ) -> list[Receipt | InvalidArgument]:
        """Parse many receipts; a malformed one becomes an error naming ``field[i]``."""
        rows, errors = cls.parse_rows(texts, field)
        return [
            errors.get(i) or cls(shard, tid, off, att)
            for i, (shard, tid, att, off) in enumerate(rows)
        ]

    @classmethod
    def parse(cls, text: str, field: str = "receipt") -> Receipt:
        got = cls.parse_many([text])[0]
        if isinstance(got, InvalidArgument):
            raise InvalidArgument(field, got.message)
        return got
