"""Receipt handles (pure): which delivery of which ready-queue entry a consumer holds.

A receipt is a token (see ``tokens``) of (topic id, ready-queue offset, attempt).
Acking with a receipt from an earlier attempt is answered STALE, because the
message has been handed out again since.
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import InvalidArgument
from ..tokens import TokenError, pack_token, unpack_token

__all__ = ["Receipt"]

_KIND = 0x52  # 'R'


class Receipt(NamedTuple):
    topic_id: int
    offset: int
    attempt: int

    def __str__(self) -> str:
        return pack_token(_KIND, self.topic_id, self.offset, self.attempt)

    @classmethod
    def parse(cls, text: str, field: str = "receipt") -> Receipt:
        try:
            return cls(*unpack_token(text, _KIND, 3))
        except TokenError as exc:
            raise InvalidArgument(field, f"malformed receipt handle {text[:80]!r} ({exc})") from exc
