"""The reserved headers a keyed SCHEDULE record carries for its key index (pure):
``delayq-dedup-until`` (until when, epoch ms, decimal, the message holds its key
and dedup id once it ended: its acceptance plus the schedule's dedup window) and
``delayq-dedup-id`` (a second name the message holds apart from its key: the
RocketMQ port's client message id).

Both are delayq's own, like ``delayq-moved-from`` (``imports``): clients cannot set
them (``engine.validation``); the engine writes them from a schedule's
``dedup_window_ms`` and ``dedup_id``, and a copy of the message (a reschedule, a
rebalance's import) carries them on unchanged, so a copy never stretches the
window. The record is the truth: the key index is rebuilt from these headers
(``holds_of``), never from memory. Like ``delayq-moved-from`` they are among the
headers a lookup and a consumer see.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .headers import decode_headers, encode_headers

__all__ = [
    "DEDUP_ID",
    "DEDUP_UNTIL",
    "RESERVED",
    "dedup_headers",
    "holds_of",
    "split_dedup",
    "without_dedup",
]

DEDUP_UNTIL = "delayq-dedup-until"
DEDUP_ID = "delayq-dedup-id"
RESERVED = (DEDUP_UNTIL, DEDUP_ID)
"""The dedup headers clients may not set and the RocketMQ port does not show."""
_MARK = b"delayq-dedup-"  # in an encoded block only when one of them is there


def dedup_headers(until_ms: int, dedup_id: str) -> bytes:
    """The encoded headers for a hold's end (0: none) and a dedup id ("": none)."""
    got: dict[str, str] = {}
    if until_ms:
        got[DEDUP_UNTIL] = str(until_ms)
    if dedup_id:
        got[DEDUP_ID] = dedup_id
    return encode_headers(got) if got else b""


def split_dedup(headers: Mapping[str, str]) -> tuple[dict[str, str], bytes]:
    """A record's decoded headers as those a client may give and the encoded
    reserved dedup ones, for a copy to carry on: the hold's end as it was."""
    if not any(name in headers for name in RESERVED):
        return dict(headers), b""
    until = _until(headers)
    return without_dedup(headers), dedup_headers(until, headers.get(DEDUP_ID, ""))


def without_dedup(headers: Mapping[str, str]) -> dict[str, str]:
    """Decoded headers without the reserved dedup ones (those a client may give)."""
    return {k: v for k, v in headers.items() if k not in RESERVED}


def _until(headers: Mapping[str, str]) -> int:
    """The hold's end the decoded ``headers`` give (0: none)."""
    return int(headers.get(DEDUP_UNTIL, "0") or 0)


def holds_of(headers: Sequence[bytes] | None, n: int) -> tuple[np.ndarray, list[bytes]]:
    """For ``n`` records (their encoded headers, or None for none): until when
    each holds its names after it ended (0: not after) and each one's dedup id
    (b"": none). A block without the reserved prefix is not decoded."""
    holds = np.zeros(n, dtype=np.int64)
    ids: list[bytes] = [b""] * n
    if headers is None:
        return holds, ids
    for i, block in enumerate(headers):
        if block and _MARK in block:
            got = decode_headers(bytes(block))
            holds[i] = _until(got)
            ids[i] = got.get(DEDUP_ID, "").encode()
    return holds, ids
