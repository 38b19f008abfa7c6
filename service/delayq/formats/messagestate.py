"""State-map entries (pure; no file I/O): one byte per message sequence number,
its ``MessageState``, and for a message forwarded to a shard the byte cannot
name, that shard in a side file. The state map (``store.statemap``) keeps them
in chunk files ``<data>/state/<chunk:012d>.map``: a ``FileHeader`` (magic
b"DQSM", format version 1, base = chunk number, param = entries per chunk)
padded to ``DATA_OFFSET`` (64) bytes, then the entries of seqs ``chunk * param`` on:

| offset      | size | type | meaning                                   |
|------------:|-----:|------|-------------------------------------------|
| 64 + i      | 1    | u8   | state byte of seq ``chunk*param+i``       |

State bytes:

| byte      | meaning                                                        |
|----------:|----------------------------------------------------------------|
| 0         | PENDING (or unknown: a never-written entry, a seq never used)  |
| 1         | CANCELLED                                                      |
| 2         | DELIVERED                                                      |
| 3         | RESCHEDULED (cancelled by a reschedule; a new message replaces it) |
| 4         | ``BLOCKED`` (below)                                            |
| 5         | ``FORWARDED_FAR``: forwarded to shard T >= 128, T in the side file |
| 128 + T   | FORWARDED to shard T < 128 (``NEAR_SHARDS``)                   |

Side file ``<data>/state/<chunk:012d>.fwd``, made for a chunk when a message of
it is first forwarded to a shard of 128 or more (so none in a directory that
never did: a directory written before side files existed reads as it did): a
``FileHeader`` (magic b"DQSF", format version 1, base = chunk number, param =
entries per chunk) padded to 64 bytes, then:

| offset      | size | type | meaning                                               |
|------------:|-----:|------|-------------------------------------------------------|
| 64 + 2*i    | 2    | u16  | shard T of seq ``chunk*param+i`` if its byte is 5     |

(meaningless where the byte is not 5: a later state overwrites only the byte).

State values: what the state map's reads return and its writes take, one int
per entry: the byte itself, except that a forward to shard T is the value
``FORWARD_BASE + T`` (``forward_state``) for every T up to ``MAX_FORWARD_SHARD``
(the shard map's last: ``shardmap.MAX_SHARDS`` - 1), whichever way it is stored;
callers never see byte 5. Values fit in a u16.

``BLOCKED`` (4) is internal: the message is pending, kept in a compaction block
(``timers.compaction.loading``) instead of rolling; it reads as PENDING to clients
(``state_of``) and counts as *live* (``is_live``: PENDING or BLOCKED) wherever a
message's records must be kept. Its timer entries are dropped as not PENDING
(the roll cycle ends); loading its block makes it PENDING again.
"""

from __future__ import annotations

import enum

import numpy as np

from ..shardmap import MAX_SHARDS

__all__ = [
    "BLOCKED",
    "DATA_OFFSET",
    "FORWARDED_FAR",
    "FORWARD_BASE",
    "MAX_FORWARD_SHARD",
    "NEAR_SHARDS",
    "PENDING",
    "SIDE_ENTRY",
    "MessageState",
    "forward_state",
    "forwarded_to",
    "is_known",
    "is_live",
    "state_of",
]

DATA_OFFSET = 64


class MessageState(enum.IntEnum):
    PENDING = 0
    CANCELLED = 1
    DELIVERED = 2
    RESCHEDULED = 3  # cancelled by a reschedule; a new message replaces it
    FORWARDED = 128  # moved to another shard by a rebalance (the value is 128 + that shard)


FORWARD_BASE = 128
MAX_FORWARD_SHARD = MAX_SHARDS - 1
NEAR_SHARDS = 128
"""Shards 0..127 are named by the state byte itself (128 + T); the rest by the side file."""
BLOCKED = 4
"""The byte of a pending message kept in a compaction block (see the module docstring)."""
FORWARDED_FAR = 5
"""The byte of a message forwarded to shard ``NEAR_SHARDS`` or above (its shard: in
the side file)."""
SIDE_ENTRY = np.dtype("<u2")
"""A side file's entry: the shard a ``FORWARDED_FAR`` message was forwarded to."""
PENDING = int(MessageState.PENDING)
"""``MessageState.PENDING`` as a plain int: numpy compares one 4x faster than an enum."""
_LAST_STATE = FORWARD_BASE + MAX_FORWARD_SHARD


def forward_state(shard: int) -> int:
    """The state value of a message forwarded to ``shard`` (any shard the map allows)."""
    if not 0 <= shard <= MAX_FORWARD_SHARD:
        raise ValueError(
            f"a message can be forwarded to shards 0..{MAX_FORWARD_SHARD}, not {shard}"
        )
    return FORWARD_BASE + shard


def forwarded_to(raw: int) -> int | None:
    """The shard a message whose state value is ``raw`` was forwarded to, or None."""
    return raw - FORWARD_BASE if raw >= FORWARD_BASE else None


def state_of(raw: int) -> MessageState:
    """The ``MessageState`` of a state value as clients see it (any forward reads
    FORWARDED, a blocked message PENDING)."""
    if raw >= FORWARD_BASE:
        return MessageState.FORWARDED
    return MessageState.PENDING if raw == BLOCKED else MessageState(raw)


def is_live(raw: np.ndarray) -> np.ndarray:
    """Which of these state values are of messages still to deliver (PENDING or
    BLOCKED): a bool per value."""
    live: np.ndarray = (raw == PENDING) | (raw == BLOCKED)
    return live


def is_known(raw: np.ndarray) -> np.ndarray:
    """Which of these state values mean a state (0..4, or a forward to a shard the
    map allows): a bool per value."""
    known: np.ndarray = (raw <= BLOCKED) | ((raw >= FORWARD_BASE) & (raw <= _LAST_STATE))
    return known
