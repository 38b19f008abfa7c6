"""The reserved headers a keyed SCHEDULE record carries for its key index (pure):
``delayq-dedup-window`` (how long after acceptance, in ms, decimal, the message
holds its key and dedup id once it ended) and ``delayq-dedup-id`` (a second name
the message holds apart from its key: the RocketMQ port's client message id).

Both are delayq's own, like ``delayq-moved-from`` (``imports``): clients cannot set
them (``engine.validation``); the engine writes them from a schedule's
``dedup_window_ms`` and ``dedup_id``, and a copy of the message (a reschedule, a
rebalance's import) carries them on as they were. The record is the truth: the key
index is rebuilt from these headers (``holds_of``), never from memory. Like
``delayq-moved-from`` they are among the headers a lookup and a consumer see.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .headers import decode_headers, encode_headers

__all__ = [
    "DEDUP_ID",
    "DEDUP_WINDOW",
    "dedup_headers",
    "holds_of",
    "split_dedup",
]

DEDUP_WINDOW = "delayq-dedup-window"
DEDUP_ID = "delayq-dedup-id"
_MARK = b"delayq-dedup-"  # in an encoded block only when one of the two is there


def dedup_headers(window_ms: int, dedup_id: str) -> bytes:
    """The encoded headers for a window (0: none) and a dedup id ("": none)."""
    got: dict[str, str] = {}
    if window_ms:
        got[DEDUP_WINDOW] = str(window_ms)
    if dedup_id:
        got[DEDUP_ID] = dedup_id
    return encode_headers(got) if got else b""


def split_dedup(headers: Mapping[str, str]) -> tuple[dict[str, str], bytes]:
    """A record's decoded headers as those a client may give and the encoded reserved
    dedup ones (for a copy to carry on as they were)."""
    if DEDUP_WINDOW not in headers and DEDUP_ID not in headers:
        return dict(headers), b""
    other = {k: v for k, v in headers.items() if k not in (DEDUP_WINDOW, DEDUP_ID)}
    return other, dedup_headers(int(headers.get(DEDUP_WINDOW, "0") or 0), headers.get(DEDUP_ID, ""))


def holds_of(
    accepted_ms: np.ndarray | int, headers: Sequence[bytes] | None, n: int
) -> tuple[np.ndarray, list[bytes]]:
    """For ``n`` records (their acceptance times, their encoded headers or None for
    none): until when each holds its names after it ended (accepted + window; 0:
    not after) and each one's dedup id (b"": none). A block without the reserved
    prefix is not decoded."""
    holds = np.zeros(n, dtype=np.int64)
    ids: list[bytes] = [b""] * n
    if headers is None:
        return holds, ids
    acc = np.broadcast_to(np.asarray(accepted_ms, dtype=np.int64), (n,))
    for i, block in enumerate(headers):
        if block and _MARK in block:
            got = decode_headers(bytes(block))
            window = int(got.get(DEDUP_WINDOW, "0") or 0)
            if window:
                holds[i] = int(acc[i]) + window
            ids[i] = got.get(DEDUP_ID, "").encode()
    return holds, ids
