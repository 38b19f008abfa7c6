"""Message ids (pure): shard index, replication epoch and CommitLog position.

The position makes lookup and cancel O(1) with no in-memory index; the epoch
keeps ids unique when a failover reuses log positions; the shard routes
id-based calls. See ``idcodec`` for the text form.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .batchops import high
from .errors import InvalidArgument
from .idcodec import (
    TokenError,
    TokenPrefix,
    invalid,
    pack_token,
    unpack_all,
    unpack_columns,
    unpack_token,
)

__all__ = ["MessageId"]


@functools.lru_cache(maxsize=64)
def _prefix(shard: int, epoch: int) -> TokenPrefix:
    return TokenPrefix(_KIND, shard, epoch)


_KIND = 0x4D  # 'M'
_INT64_MAX = 2**63 - 1


def _item(field: str, i: int, n: int) -> str:
    return f"{field}[{i}]" if n > 1 else "id"


@dataclass(frozen=True, slots=True)
class MessageId:
    shard: int
    epoch: int
    position: int

    def __str__(self) -> str:
        return pack_token(_KIND, self.shard, self.epoch, self.position)

    @staticmethod
    def texts(
        shard: int, epoch: int, positions: np.ndarray, *, ascending: bool = False
    ) -> list[str]:
        """Text forms of many ids of one shard and epoch (the batch fast path);
        ``ascending``: the positions are known to ascend (a batch just appended)."""
        return _prefix(shard, epoch).pack_many(positions, ascending=ascending)

    @staticmethod
    def parse_columns(
        texts: Sequence[str], field: str = "ids"
    ) -> tuple[np.ndarray, dict[int, InvalidArgument]]:
        """Parse many ids into an (n, 3) int64 array of (shard, epoch, position) rows;
        a malformed id leaves its row 0 and gets an error naming ``field[i]`` (or
        ``id`` when there is only one). A well-formed id with a field beyond int64
        names no record: its position is -1."""
        cols, done = unpack_columns(texts, _KIND, 3)
        errors: dict[int, InvalidArgument] = {}
        huge: list[int] = []
        for i in [] if done.all() else np.flatnonzero(~done).tolist():
            try:
                got = unpack_token(texts[i], _KIND, 3)
            except TokenError as exc:
                errors[i] = invalid("message id", texts[i], exc, _item(field, i, len(texts)))
                continue
            if max(got) > _INT64_MAX:
                huge.append(i)
            else:
                cols[i] = got
        # rows decoded together have one-byte leading fields: only a position may be huge
        if len(cols) and int(high(cols[:, 2])) > _INT64_MAX:
            huge += np.flatnonzero(cols[:, 2] > _INT64_MAX).tolist()
        out = cols.astype(np.int64)
        if huge:
            out[huge] = (0, 0, -1)
        return out, errors

    @classmethod
    def parse_many(
        cls, texts: Sequence[str], field: str = "ids"
    ) -> list[MessageId | InvalidArgument]:
        """Parse many ids; a malformed one becomes an error naming ``field[i]``
        (or ``id`` when there is only one)."""

        return [
            invalid("message id", t, got, _item(field, i, len(texts)))
            if isinstance(got, TokenError)
            else cls(*got)
            for i, (t, got) in enumerate(zip(texts, unpack_all(texts, _KIND, 3), strict=True))
        ]

    @classmethod
    def parse(cls, text: str, field: str = "id") -> MessageId:
        """Parse the text form; raises ``InvalidArgument`` naming ``field``."""
        got = cls.parse_many([text])[0]
        if isinstance(got, InvalidArgument):
            raise InvalidArgument(field, got.message)
        return got
