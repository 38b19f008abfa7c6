"""Receipt handles (pure): which delivery of which ready-queue entry a consumer holds.

A receipt is a token (see ``tokens``) of (topic id, attempt, ready-queue offset);
the offset goes last so one receive's receipts share a prefix and encode as a batch.
Acking with a receipt from an earlier attempt is answered STALE, because the
message has been handed out again since.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from ..errors import InvalidArgument
from ..tokens import TokenError, TokenPrefix, pack_token, unpack_many, unpack_token

__all__ = ["Receipt"]


@functools.lru_cache(maxsize=1024)
def _prefix(topic_id: int, attempt: int) -> TokenPrefix:
    return TokenPrefix(_KIND, topic_id, attempt)


_KIND = 0x52  # 'R'


class Receipt(NamedTuple):
    topic_id: int
    offset: int
    attempt: int

    def __str__(self) -> str:
        return pack_token(_KIND, self.topic_id, self.attempt, self.offset)

    @staticmethod
    def texts(topic_id: int, attempt: int, offsets: np.ndarray) -> list[str]:
        """Receipts of many offsets of one topic and attempt (the batch fast path)."""
        return _prefix(topic_id, attempt).pack_many(offsets)

    @classmethod
    def parse_many(
        cls, texts: list[str], field: str = "receipts"
    ) -> list[Receipt | InvalidArgument]:
        """Parse many receipts; a malformed one becomes an error naming ``field[i]``."""
        out: list[Receipt | InvalidArgument] = []
        for i, got in enumerate(unpack_many(texts, _KIND, 3)):
            if got is not None:
                out.append(cls(got[0], got[2], got[1]))
                continue
            try:
                out.append(cls.parse(texts[i], f"{field}[{i}]"))
            except InvalidArgument as exc:
                out.append(exc)
        return out

    @classmethod
    def parse(cls, text: str, field: str = "receipt") -> Receipt:
        try:
            topic_id, attempt, offset = unpack_token(text, _KIND, 3)
        except TokenError as exc:
            raise InvalidArgument(field, f"malformed receipt handle {text[:80]!r} ({exc})") from exc
        return cls(topic_id, offset, attempt)
