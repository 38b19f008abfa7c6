"""State-map bytes (pure; no file I/O): one byte per message sequence number,
its ``MessageState``. The state map (``store.statemap``) keeps them in chunk
files ``<data>/state/<chunk:012d>.map``: a ``FileHeader`` (magic b"DQSM",
format version 1, base = chunk number, param = entries per chunk) padded to
``DATA_OFFSET`` (64) bytes, then the entries of seqs ``chunk * param`` on:

| offset      | size | type | meaning                                   |
|------------:|-----:|------|-------------------------------------------|
| 64 + i      | 1    | u8   | ``MessageState`` of seq ``chunk*param+i`` |

A never-written entry reads 0 (PENDING, or unknown if the seq was never used).
A value of 128 + T (``forward_state``) means FORWARDED to shard T (T < 128): a
rebalance released the message here and moved it there (``forwarded_to``).
``BLOCKED`` (4) is internal: the message is pending, kept in a compaction block
(``timers.blocks``) instead of rolling; it reads as PENDING to clients
(``state_of``) and counts as *live* (``is_live``: PENDING or BLOCKED) wherever a
message's records must be kept. Its timer entries are dropped as not PENDING
(the roll cycle ends); loading its block makes it PENDING again.
"""

from __future__ import annotations

import enum

import numpy as np

__all__ = [
    "BLOCKED",
    "DATA_OFFSET",
    "FORWARD_BASE",
    "MAX_FORWARD_SHARD",
    "MessageState",
    "forward_state",
    "forwarded_to",
    "is_live",
    "state_of",
]

DATA_OFFSET = 64


class MessageState(enum.IntEnum):
    PENDING = 0
    CANCELLED = 1
    DELIVERED = 2
    RESCHEDULED = 3  # cancelled by a reschedule; a new message replaces it
    FORWARDED = 128  # moved to another shard by a rebalance (the byte is 128 + that shard)


FORWARD_BASE = 128
MAX_FORWARD_SHARD = 127
BLOCKED = 4
"""The byte of a pending message kept in a compaction block (see the module docstring)."""
_PENDING = int(MessageState.PENDING)


def forward_state(shard: int) -> int:
    """The byte of a message forwarded to ``shard``."""
    if not 0 <= shard <= MAX_FORWARD_SHARD:
        raise ValueError(
            f"a message can be forwarded to shards 0..{MAX_FORWARD_SHARD}, not {shard}"
        )
    return FORWARD_BASE + shard


def forwarded_to(raw: int) -> int | None:
    """The shard a message whose state byte is ``raw`` was forwarded to, or None."""
    return raw - FORWARD_BASE if raw >= FORWARD_BASE else None


def state_of(raw: int) -> MessageState:
    """The ``MessageState`` of a state byte as clients see it (any forward reads
    FORWARDED, a blocked message PENDING)."""
    if raw >= FORWARD_BASE:
        return MessageState.FORWARDED
    return MessageState.PENDING if raw == BLOCKED else MessageState(raw)


def is_live(raw: np.ndarray) -> np.ndarray:
    """Which of these state bytes are of messages still to deliver (PENDING or
    BLOCKED): a bool per byte."""
    live: np.ndarray = (raw == _PENDING) | (raw == BLOCKED)
    return live
