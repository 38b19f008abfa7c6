"""Checking the receipts of one ack, re-time or hold call (``check``): which
name an entry of this shard's topic that their group was handed, under this
shard's receipt key.

A receipt that does not parse answers its error; one of another shard or topic
names none of this topic's entries (NOT_FOUND); one whose MAC is not the one the
shard's key gives its group, attempt, offset and the message at that offset now
is forged (INVALID_RECEIPT). The rest come back as columns for the group's
state to settle (``Consumers.settle``, ``Consumers.hold``). Pure but for reading
ready entries; runs under the engine's lock, as ``Consumers`` does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from ..errors import DelayqError
from ..receipts import Receipt, ReceiptKey
from ..store.readyindex import ReadyIndex
from .groups import GroupState
from .types import AckOutcome

__all__ = ["Checked", "check"]


class Checked(NamedTuple):
    """The receipts of one call that check: their group's state, its ready queue,
    their indexes in the call and their (offset, ticket) columns."""

    state: GroupState
    idx: ReadyIndex
    mine: list[int]
    offsets: list[int]
    tickets: list[int]


def check(
    key: ReceiptKey,
    shard: int,
    idx: ReadyIndex | None,
    topic_id: int | None,
    group: str,
    receipts: Sequence[str],
    group_state: Callable[[int, str], GroupState],
) -> tuple[list[AckOutcome | DelayqError], Checked | None]:
    """Parse and check ``receipts`` of ``group`` on the topic ``topic_id`` (its ready
    queue ``idx``; None: it has none): the outcome of each that fails, and for the
    rest the group's state (``group_state(topic_id, group)``, made only then),
    their indexes and their (offset, ticket) columns (None: no rest)."""
    cols, errors = Receipt.parse_columns(list(receipts))
    out: list[AckOutcome | DelayqError] = [AckOutcome.NOT_FOUND] * len(cols)
    for i, error in errors.items():
        out[i] = error
    if idx is None or topic_id is None:
        return out, None
    # another shard's or topic's receipt names none of this one's entries
    named = (cols[:, 0] == shard) & (cols[:, 1] == topic_id)
    if errors:
        named[list(errors)] = False
    mine = np.flatnonzero(named)
    rows = cols if len(mine) == len(cols) else cols[mine]  # the usual: all of them
    forged = _forged(key, idx, topic_id, group, rows)
    if forged.any():
        for i in mine[forged].tolist():
            out[i] = AckOutcome.INVALID_RECEIPT
        mine, rows = mine[~forged], rows[~forged]
    if not len(mine):  # (and no group made up by receipts that name nothing)
        return out, None
    return out, Checked(
        group_state(topic_id, group), idx, mine.tolist(), rows[:, 3].tolist(), rows[:, 2].tolist()
    )


def _forged(
    key: ReceiptKey, idx: ReadyIndex, topic_id: int, group: str, rows: np.ndarray
) -> np.ndarray:
    """Which receipt rows (shard, topic id, attempt, offset, mac; of this shard and
    topic) do not check: their MAC is not the one ``key`` gives ``group``, their
    attempt and offset, and the message at that offset now. Offsets with no entry
    (never delivered here, or expired by retention) cannot be checked; they ack
    nothing anyway (NOT_FOUND, ALREADY_ACKED)."""
    offsets = rows[:, 3]
    held = (offsets >= idx.floor) & (offsets < idx.length)
    if len(rows) and held.all():  # the usual call: no fancy indexing
        seqs = idx.read_at(offsets.tolist())["seq"]
        every: np.ndarray = ~key.check(topic_id, group, rows[:, 2], offsets, seqs, rows[:, 4])
        return every
    forged = np.zeros(len(rows), dtype=bool)
    if held.any():
        at = offsets[held]
        seqs = idx.read_at(at.tolist())["seq"]
        forged[held] = ~key.check(topic_id, group, rows[held, 2], at, seqs, rows[held, 4])
    return forged
