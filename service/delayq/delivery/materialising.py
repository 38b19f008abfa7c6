"""Turning the ready entries handed to one receive (``Taken``) into messages
(``materialise``): bodies read from the CommitLog (one read per span), ids per
epoch, receipts made under the shard's ``ReceiptKey``. Reads only (pread): runs
outside the engine's lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np

from .. import formats
from ..ids import MessageId
from ..receipts import ReceiptKey
from ..store.commitlog import CommitLog
from .types import ReceivedBatch

__all__ = ["Quarantine", "Taken", "materialise"]

log = logging.getLogger("delayq.engine")

Quarantine = Callable[[str, int, str], None]
_ROLL = int(formats.RecordType.ROLL)


class Taken:
    """Entries handed to one receive call: parallel arrays plus the topic."""

    def __init__(
        self,
        topic_id: int,
        group: str,
        offsets: Sequence[int],
        attempts: list[int],
        entries: np.ndarray,
        acked: bool = False,
    ) -> None:
        self.topic_id = topic_id
        self.group = group
        self.offsets = offsets
        self.attempts = attempts
        self.entries = entries
        self.acked = acked  # auto-acked on hand-out: no receipts


def materialise(
    cl: CommitLog,
    receipts: ReceiptKey,
    shard: int,
    quarantine: Quarantine,
    topic: str,
    taken: Taken,
) -> tuple[ReceivedBatch, list[int]]:
    """The messages of ``taken`` as columns, and the offsets whose body is
    unreadable (left out). One read per span, ids per epoch."""
    e = taken.entries
    body_pos = e["body_pos"]
    cols = cl.read_messages(body_pos)
    if not cols.ok.all():  # looked at once more, with pread, before it costs a message
        for i in cl.read_again(cols, body_pos):
            log.warning(
                "a record read torn through its segment's map read whole with pread",
                extra={"position": int(body_pos[i])},
            )
    heads = cols.heads
    good = cols.ok & (heads["seq"] == e["seq"])
    # a rolled copy is named by its first SCHEDULE: the id its producer was given
    rolled = heads["type"] == _ROLL
    origins = np.where(rolled, heads["origin_pos"], body_pos) if rolled.any() else body_pos
    batch = ReceivedBatch(
        topic,
        _ids(shard, heads["epoch"], origins),
        cols.keys,
        [formats.decode_headers(h) if h else {} for h in cols.headers],
        cols.bodies,
        e["deliver_at_ms"].tolist(),
        e["delivered_ms"].tolist(),
        [""] * len(e)
        if taken.acked
        else receipts.texts(taken.topic_id, taken.group, taken.attempts, taken.offsets, e["seq"]),
        taken.attempts,
    )
    if good.all():
        return batch, []
    bad: list[int] = []
    for i in np.flatnonzero(~good).tolist():
        why = "ready entry points at another record" if cols.ok[i] else "unreadable"
        quarantine("commitlog", int(body_pos[i]), f"receive of seq {e['seq'][i]}: {why}")
        bad.append(taken.offsets[i])
    return batch.select(good.tolist()), bad


def _ids(shard: int, epochs: np.ndarray, positions: np.ndarray) -> list[str]:
    """Message ids of (epoch, position) rows, batched by epoch."""
    first = int(epochs[0]) if len(epochs) else 0
    if (epochs == first).all():
        return MessageId.texts(shard, first, positions)
    out = [""] * len(epochs)
    for epoch in set(epochs.tolist()):
        sel = np.flatnonzero(epochs == epoch)
        for i, text in zip(
            sel.tolist(), MessageId.texts(shard, epoch, positions[sel]), strict=True
        ):
            out[i] = text
    return out
