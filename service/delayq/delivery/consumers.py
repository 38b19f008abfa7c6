"""Consumers of one shard: the topics' ready queues and their consumer groups.

Holds one ``ReadyIndex`` per topic and one ``GroupState`` per (topic, group).
``take`` hands out entries, ``materialise`` turns them into messages (reading
bodies from the CommitLog), ``settle`` acks or re-times them and appends one
ACK record per call, so acks survive a restart.

Not thread-safe: every method but ``materialise`` runs under the engine's lock.
``materialise`` only reads (pread) and may run outside it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .. import formats
from ..engine.types import ReceivedBatch
from ..errors import CorruptData, DelayqError
from ..formats.ready import ENTRY_DTYPE as READY_DTYPE
from ..ids import MessageId
from ..pieces import join_rows, take_rows
from ..store.commitlog import CommitLog
from ..store.readyindex import ReadyIndex
from .groups import AckOutcome, GroupState
from .receipts import Receipt

__all__ = ["Consumers", "Taken"]

Quarantine = Callable[[str, int, str], None]
_ROLL = int(formats.RecordType.ROLL)


class Settled(NamedTuple):
    """The acks of one ``settle`` call, as columns: each acked offset and the
    attempt its receipt named."""

    offsets: list[int]
    attempts: list[int]


class Taken:
    """Entries handed to one receive call: parallel arrays plus the topic."""

    def __init__(
        self,
        topic_id: int,
        offsets: Sequence[int],
        attempts: list[int],
        entries: np.ndarray,
        acked: bool = False,
    ) -> None:
        self.topic_id = topic_id
        self.offsets = offsets
        self.attempts = attempts
        self.entries = entries
        self.acked = acked  # auto-acked on hand-out: no receipts


class Consumers:
    def __init__(self, ready_dir: Path, commitlog: CommitLog, shard: int, quarantine: Quarantine):
        self._dir = ready_dir
        self._cl = commitlog
        self._shard = shard
        self._quarantine = quarantine
        self.ready: dict[int, ReadyIndex] = {}
        self.groups: dict[int, dict[str, GroupState]] = {}

    def ready_index(self, topic_id: int, now_ms: int = 0) -> ReadyIndex:
        idx = self.ready.get(topic_id)
        if idx is None:
            idx = self.ready[topic_id] = ReadyIndex(self._dir / f"{topic_id}.idx", topic_id, now_ms)
        return idx

    def group(self, topic_id: int, name: str) -> GroupState:
        groups = self.groups.setdefault(topic_id, {})
        state = groups.get(name)
        if state is None:  # a new group starts at the oldest entry retention kept
            idx = self.ready.get(topic_id)
            state = groups[name] = GroupState(idx.floor if idx is not None else 0)
        return state

    def expire_before(self, cut_ms: int) -> dict[tuple[int, str], int]:
        """Expire the ready entries delivered before ``cut_ms`` (see ``ReadyIndex``) and
        move every group past them. Returns, per (topic id, group) that had any, how
        many expired unacked."""
        lost: dict[tuple[int, str], int] = {}
        for tid, idx in self.ready.items():
            try:
                floor = idx.expire_before(cut_ms)
            except CorruptData as exc:  # reported; the topic's entries stay until fixed
                self._quarantine(f"ready {tid}", idx.floor, f"retention: {exc}")
                continue
            for name, state in self.groups.get(tid, {}).items():
                if unacked := state.skip_to(floor):
                    lost[tid, name] = unacked
        return lost

    def release_blocks(self) -> None:
        """Give back the disk blocks of expired ready entries (see ``ReadyIndex``)."""
        for idx in self.ready.values():
            idx.release_blocks()

    def take(
        self,
        topic_id: int,
        group: str,
        now_ms: int,
        max_n: int,
        invisible_ms: int,
        max_inflight: int,
        auto_ack: bool = False,
    ) -> Taken | None:
        """Entries for one receive; with ``auto_ack`` they are acked in the group
        already (the caller logs them with ``write_acks``)."""
        idx = self.ready.get(topic_id)
        if idx is None or idx.length == 0:
            return None
        state = self.group(topic_id, group)
        offsets: Sequence[int]
        if auto_ack:
            offsets, attempts = state.take_acked(now_ms, idx.length, max_n)
        else:
            got = state.take(now_ms, idx.length, max_n, invisible_ms, max_inflight)
            offsets, attempts = [off for off, _ in got], [a for _, a in got]
        if not offsets:
            return None
        if isinstance(offsets, range):  # a contiguous run (auto-ack): one read, in order
            entries = idx.read_many(offsets.start, len(offsets))
        else:
            lo, hi = min(offsets), max(offsets)
            if hi - lo < 4 * len(offsets):  # mostly contiguous: one read
                block = idx.read_many(lo, hi - lo + 1)
                entries = take_rows(block, np.asarray(offsets) - lo)
            else:
                entries = join_rows([idx.read_many(off, 1) for off in offsets], READY_DTYPE)
        return Taken(topic_id, offsets, attempts, entries, auto_ack)

    def materialise(self, topic: str, taken: Taken) -> tuple[ReceivedBatch, list[int]]:
        """The messages of ``taken`` as columns, and the offsets whose body is
        unreadable (left out). One read per span, ids per epoch."""
        e = taken.entries
        body_pos = e["body_pos"]
        cols = self._cl.read_messages(body_pos)
        heads = cols.heads
        good = cols.ok & (heads["seq"] == e["seq"])
        # a rolled copy is named by its first SCHEDULE: the id its producer was given
        rolled = heads["type"] == _ROLL
        origins = np.where(rolled, heads["origin_pos"], body_pos) if rolled.any() else body_pos
        batch = ReceivedBatch(
            topic,
            self._ids(heads["epoch"], origins),
            cols.keys,
            [formats.decode_headers(h) if h else {} for h in cols.headers],
            cols.bodies,
            e["deliver_at_ms"].tolist(),
            e["delivered_ms"].tolist(),
            [""] * len(e) if taken.acked else self._receipts(taken),
            taken.attempts,
        )
        if good.all():
            return batch, []
        bad: list[int] = []
        for i in np.flatnonzero(~good).tolist():
            why = "ready entry points at another record" if cols.ok[i] else "unreadable"
            self._quarantine("commitlog", int(body_pos[i]), f"receive of seq {e['seq'][i]}: {why}")
            bad.append(taken.offsets[i])
        return batch.select(good.tolist()), bad

    def _ids(self, epochs: np.ndarray, positions: np.ndarray) -> list[str]:
        """Message ids of (epoch, position) rows, batched by epoch."""
        first = int(epochs[0]) if len(epochs) else 0
        if (epochs == first).all():
            return MessageId.texts(self._shard, first, positions)
        out = [""] * len(epochs)
        for epoch in set(epochs.tolist()):
            sel = np.flatnonzero(epochs == epoch)
            for i, text in zip(
                sel.tolist(), MessageId.texts(self._shard, epoch, positions[sel]), strict=True
            ):
                out[i] = text
        return out

    def _receipts(self, taken: Taken) -> list[str]:
        out = [""] * len(taken.offsets)
        for attempt in set(taken.attempts):
            sel = [i for i, a in enumerate(taken.attempts) if a == attempt]
            offs = np.array([taken.offsets[i] for i in sel], dtype=np.int64)
            for i, text in zip(sel, Receipt.texts(taken.topic_id, attempt, offs), strict=True):
                out[i] = text
        return out

    def settle(
        self,
        topic_id: int | None,
        group: str,
        receipts: Sequence[str],
        now_ms: int,
        invisible_ms: int | None,
    ) -> tuple[list[AckOutcome | DelayqError], Settled]:
        """Ack (``invisible_ms`` None) or re-time receipts. Returns the outcomes and the
        offsets newly acked (the caller logs them with ``write_acks``)."""
        rows, errors = Receipt.parse_rows(list(receipts))
        out: list[AckOutcome | DelayqError] = [AckOutcome.NOT_FOUND] * len(rows)
        for i, error in errors.items():
            out[i] = error
        idx = self.ready.get(topic_id) if topic_id is not None else None
        acked = Settled([], [])
        if idx is None or topic_id is None:
            return out, acked
        state = self.group(topic_id, group)
        mine = [i for i, row in enumerate(rows) if row[0] == topic_id and i not in errors]
        offsets = [rows[i][2] for i in mine]
        attempts = [rows[i][1] for i in mine]
        if invisible_ms is None:
            res = state.ack_many(offsets, attempts, idx.length)
            ok = AckOutcome.ACKED  # once: an enum member lookup costs ~0.1 µs
            if res.count(ok) == len(res):  # the usual call: every receipt acked
                acked = Settled(offsets, attempts)
            else:
                pairs = [(o, a) for o, a, r in zip(offsets, attempts, res, strict=True) if r is ok]
                acked = Settled([o for o, _ in pairs], [a for _, a in pairs])
        else:
            res = [
                state.change_invisibility(off, attempt, now_ms, invisible_ms)
                for off, attempt in zip(offsets, attempts, strict=True)
            ]
        for i, r in zip(mine, res, strict=True):
            out[i] = r
        return out, acked

    def write_acks(
        self,
        topic_id: int,
        group: str,
        offsets: Sequence[int],
        now_ms: int,
        *,
        attempts: Sequence[int] | None = None,
    ) -> int:
        """Log acks already applied to the group (one ACK record); returns the CommitLog
        end. Given the ``attempts`` they acked, acks whose record cannot be written (a
        full disk) are undone before the error is raised: due for redelivery at once
        (``GroupState.give_back``), not lost to the group."""
        try:
            self._cl.append(formats.encode_ack(topic_id, group, offsets), now_ms)
        except BaseException:
            if attempts is not None:
                self.group(topic_id, group).give_back(offsets, attempts, now_ms)
            raise
        return self._cl.end

    def ack_unreadable(self, topic_id: int, group: str, offsets: list[int], now_ms: int) -> None:
        """Ack entries whose body cannot be read, so they do not come back forever."""
        state = self.group(topic_id, group)
        for off in offsets:
            state.mark_acked(off)
        self.write_acks(topic_id, group, offsets, now_ms)

    def close(self, *, write_tails: bool = True) -> None:
        """Close the ready queues; ``write_tails=False`` drops their in-memory tails as
        a killed process would (recovery rebuilds them from DELIVER records)."""
        for idx in self.ready.values():
            idx.close(write_tail=write_tails)
