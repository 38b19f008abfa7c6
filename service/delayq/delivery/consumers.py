"""Consumers of one shard: the topics' ready queues and their consumer groups.

Holds one ``ReadyIndex`` per topic and one ``GroupState`` per (topic, group).
Released messages come in through ``deliver`` (the one entry point from the
timer pipeline); ``take`` hands out entries, ``materialise`` turns them into
messages (reading bodies from the CommitLog) with receipts made under the
shard's ``ReceiptKey``, ``settle`` checks receipts against that key and the
ready entries they name (``receiptcheck``), acks or re-times them and appends one ACK record per
call, so acks survive a restart. A checkpoint
saves the groups (``save_to``); a restart restores them and replays the
DELIVER and ACK records written since (``restore``, ``replay_*``).

Not thread-safe: every method but ``materialise`` runs under the engine's lock.
``materialise`` only reads (pread) and may run outside it.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .. import formats
from ..batchops import by_topic
from ..errors import CorruptData, DelayqError
from ..formats.ready import ReadyEntry
from ..ids import MessageId
from ..receipts import ReceiptKey
from ..store.checkpoint import Checkpoint, GroupCheckpoint
from ..store.commitlog import CommitLog
from ..store.readyindex import ReadyIndex
from . import receiptcheck
from .groups import GroupState
from .receiptcheck import Checked
from .staging import StagedRows
from .types import AckOutcome, GroupStats, ReceivedBatch

__all__ = ["Consumers", "Taken"]

log = logging.getLogger("delayq.engine")

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


class Consumers:
    def __init__(
        self,
        ready_dir: Path,
        commitlog: CommitLog,
        shard: int,
        quarantine: Quarantine,
        receipt_key: bytes,
    ) -> None:
        self._dir = ready_dir
        self._cl = commitlog
        self._shard = shard
        self._quarantine = quarantine
        self.receipts = ReceiptKey(receipt_key, shard)  # replaced whole (use_receipt_key)
        self.ready: dict[int, ReadyIndex] = {}
        self.groups: dict[int, dict[str, GroupState]] = {}
        self.dead_lettered: collections.Counter[tuple[int, str]] = collections.Counter()
        """Messages each (topic id, group) dead-lettered since the shard opened."""

    def ready_index(self, topic_id: int, now_ms: int = 0) -> ReadyIndex:
        idx = self.ready.get(topic_id)
        if idx is None:
            idx = self.ready[topic_id] = ReadyIndex(self._dir / f"{topic_id}.idx", topic_id, now_ms)
        return idx

    def use_receipt_key(self, key: bytes) -> None:
        """Make and check receipts under ``key`` from now on (a replica taking its
        master's: the caller has saved it)."""
        self.receipts = ReceiptKey(key, self._shard)

    def group(self, topic_id: int, name: str) -> GroupState:
        groups = self.groups.setdefault(topic_id, {})
        state = groups.get(name)
        if state is None:  # a new group starts at the oldest entry retention kept
            idx = self.ready.get(topic_id)
            state = groups[name] = GroupState(idx.floor if idx is not None else 0)
        return state

    def stage(self, rows: np.ndarray, now_ms: int) -> StagedRows:
        """Get ready to index released messages (release-buffer rows: seq, cl_pos,
        cl_size, topic_id, deliver_at_ms) in their topics' ready queues: what can
        fail comes here (a topic's first ready queue file is made), nothing is
        indexed; see ``timers.deliveries.Deliveries``."""
        queues = [
            (self.ready_index(tid, now_ms), tid, mask) for tid, mask in by_topic(rows["topic_id"])
        ]
        return StagedRows(rows, now_ms, queues)

    def restore(self, ckpt: Checkpoint, now_ms: int) -> None:
        """The groups and ready queues as of ``ckpt`` (ready entries it does not
        cover are cut: the DELIVER records replayed after it add them back)."""
        for tid_text, groups in ckpt.groups.items():
            for name, g in groups.items():
                self.groups.setdefault(int(tid_text), {})[name] = GroupState(g.committed, g.acked)
        for path in self._dir.glob("*.idx"):
            tid = int(path.stem)
            ready = self.ready_index(tid, now_ms)
            ready.truncate(ckpt.ready_len.get(str(tid), 0))
            ready.floor = ckpt.ready_floor.get(str(tid), 0)

    def replay_deliver(self, rec: formats.Deliver) -> None:
        r = rec
        entry = ReadyEntry(r.seq, r.body_pos, r.body_size, r.deliver_at_ms, r.delivered_ms)
        self.ready_index(r.topic_id).append([entry])

    def replay_ack(self, rec: formats.Ack) -> None:
        group = self.group(rec.topic_id, rec.group)
        for off in rec.offsets:
            group.mark_acked(off)

    def save_to(self, ckpt: Checkpoint) -> list[int]:
        """Put the groups and ready-queue lengths into ``ckpt``; write the ready
        queues' tails and return their descriptors (to fsync)."""
        ckpt.ready_len = {str(k): r.length for k, r in self.ready.items()}
        ckpt.ready_floor = {str(k): r.floor for k, r in self.ready.items() if r.floor}
        ckpt.groups = {
            str(tid): {g: GroupCheckpoint(st.committed, sorted(st.acked)) for g, st in gs.items()}
            for tid, gs in self.groups.items()
        }
        return [fd for r in self.ready.values() if (fd := r.write_tail()) >= 0]

    def backlogs(self, topic_id: int) -> dict[str, int]:
        """Per group of the topic: messages delivered and not yet acked."""
        idx = self.ready.get(topic_id)
        length = idx.length if idx else 0
        return {g: st.backlog(length) for g, st in self.groups.get(topic_id, {}).items()}

    def group_stats(self, topic_id: int, now_ms: int) -> dict[str, GroupStats]:
        """Per group of the topic: where it stands (``GroupStats``). Reads one ready
        entry per group (its oldest unacked message's release time; an entry that
        cannot be read gives no age, 0, and raises nothing: a scrape is no reader to
        report it to)."""
        idx = self.ready.get(topic_id)
        length = idx.length if idx else 0
        out: dict[str, GroupStats] = {}
        for name, st in self.groups.get(topic_id, {}).items():
            oldest_ms = 0
            if idx is not None and idx.floor <= st.committed < length:
                try:
                    delivered = int(idx.read_many(st.committed, 1)["delivered_ms"][0])
                    oldest_ms = max(0, now_ms - delivered)
                except (CorruptData, OSError):  # an entry receiving would report: no age
                    pass
            out[name] = GroupStats(
                backlog=st.backlog(length),
                ready=st.unhanded(length),
                inflight=len(st.inflight),
                oldest_unacked_ms=oldest_ms,
                redelivered=st.redelivered,
                dead_lettered=self.dead_lettered.get((topic_id, name), 0),
            )
        return out

    def dead_letters(self, topic_id: int) -> dict[str, int]:
        """Per group of the topic that sent any: messages it dead-lettered."""
        return {g: n for (tid, g), n in self.dead_lettered.items() if tid == topic_id}

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
        max_attempts: int = 0,
    ) -> Taken | None:
        """Entries for one receive; with ``auto_ack`` they are acked in the group
        already (the caller logs them with ``write_acks``). Entries past their
        ``max_attempts`` are held for ``take_dead`` instead."""
        idx = self.ready.get(topic_id)
        if idx is None or idx.length == 0:
            return None
        state = self.group(topic_id, group)
        offsets: Sequence[int]
        if auto_ack:
            offsets, attempts = state.take_acked(now_ms, idx.length, max_n)
        else:
            got = state.take(now_ms, idx.length, max_n, invisible_ms, max_inflight, max_attempts)
            offsets, attempts = [off for off, _ in got], [a for _, a in got]
        if not offsets:
            return None
        return Taken(topic_id, group, offsets, attempts, idx.read_at(offsets), auto_ack)

    def take_dead(self, topic_id: int, group: str) -> Taken | None:
        """The entries ``take`` found past their last attempt and holds (the caller
        dead-letters them, then acks them), or None."""
        state = self.groups.get(topic_id, {}).get(group)
        dead = state.take_dead() if state is not None else []
        if not dead:
            return None
        return self.taken(topic_id, group, [off for off, _ in dead], [t for _, t in dead])

    def taken(self, topic_id: int, group: str, offsets: Sequence[int], tickets: list[int]) -> Taken:
        """The entries at ``offsets`` of a topic's ready queue, held by ``tickets``."""
        return Taken(topic_id, group, offsets, tickets, self.ready[topic_id].read_at(offsets))

    def materialise(self, topic: str, taken: Taken) -> tuple[ReceivedBatch, list[int]]:
        """The messages of ``taken`` as columns, and the offsets whose body is
        unreadable (left out). One read per span, ids per epoch."""
        e = taken.entries
        body_pos = e["body_pos"]
        cols = self._cl.read_messages(body_pos)
        if not cols.ok.all():  # looked at once more, with pread, before it costs a message
            for i in self._cl.read_again(cols, body_pos):
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
            self._ids(heads["epoch"], origins),
            cols.keys,
            [formats.decode_headers(h) if h else {} for h in cols.headers],
            cols.bodies,
            e["deliver_at_ms"].tolist(),
            e["delivered_ms"].tolist(),
            [""] * len(e)
            if taken.acked
            else self.receipts.texts(
                taken.topic_id, taken.group, taken.attempts, taken.offsets, e["seq"]
            ),
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

    def settle(
        self,
        topic_id: int | None,
        group: str,
        receipts: Sequence[str],
        now_ms: int,
        invisible_ms: int | None,
    ) -> tuple[list[AckOutcome | DelayqError], Settled]:
        """Ack (``invisible_ms`` None) or re-time receipts. Returns the outcomes and the
        offsets newly acked (the caller logs them with ``write_acks``). A receipt that
        does not check (``receiptcheck``) is INVALID_RECEIPT and acks nothing."""
        out, checked = self._checked(topic_id, group, receipts)
        acked = Settled([], [])
        if checked is None:
            return out, acked
        state, offsets, attempts = checked.state, checked.offsets, checked.tickets
        if invisible_ms is None:
            res = state.ack_many(offsets, attempts, checked.idx.length)
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
        for i, r in zip(checked.mine, res, strict=True):
            out[i] = r
        return out, acked

    def hold(
        self, topic_id: int | None, group: str, receipts: Sequence[str], until_ms: int
    ) -> tuple[list[str | AckOutcome | DelayqError], Settled]:
        """Hold received messages in flight until ``until_ms`` under new receipts: the
        outcomes (a new receipt where held; the old one acks nothing from then on) and
        the held offsets with their new tickets, as columns."""
        found, checked = self._checked(topic_id, group, receipts)
        out: list[str | AckOutcome | DelayqError] = list(found)
        held = Settled([], [])
        if checked is None or topic_id is None:
            return out, held
        where: list[int] = []
        for i, off, ticket in zip(checked.mine, checked.offsets, checked.tickets, strict=True):
            got = checked.state.hold(off, ticket, until_ms)
            if isinstance(got, AckOutcome):
                out[i] = got
            else:
                where.append(i)
                held.offsets.append(off)
                held.attempts.append(got)
        if where:
            seqs = checked.idx.read_at(held.offsets)["seq"]
            texts = self.receipts.texts(topic_id, group, held.attempts, held.offsets, seqs)
            for i, text in zip(where, texts, strict=True):
                out[i] = text
        return out, held

    def _checked(
        self, topic_id: int | None, group: str, receipts: Sequence[str]
    ) -> tuple[list[AckOutcome | DelayqError], Checked | None]:
        """``receiptcheck.check`` of ``receipts`` on this shard's topic ``topic_id``."""
        idx = self.ready.get(topic_id) if topic_id is not None else None
        return receiptcheck.check(
            self.receipts, self._shard, idx, topic_id, group, receipts, self.group
        )

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
