"""Consumers of one shard: the topics' ready queues and their consumer groups.

Holds one ``ReadyIndex`` per topic and one ``GroupState`` per (topic, group).
Released messages come in through ``deliver`` (the one entry point from the
timer pipeline); ``take`` hands out entries, ``materialise`` turns them into
messages (reading bodies from the CommitLog) with receipts made under the
shard's ``ReceiptKey``, ``settle`` checks receipts against that key and the
ready entries they name (``receiptcheck``), acks or re-times them and appends one ACK record per
call, so acks survive a restart. Each hand-out, re-timing and nack is logged
as one HANDOUT record a call (``write_handout``), so attempts and receipts
survive too; each group's delivery policy (``grouppolicies``) is enforced at
``take`` and set by POLICY records (``set_policy``). A checkpoint saves the
groups and policies (``save_to``); a restart restores them and replays the
DELIVER, ACK, HANDOUT and POLICY records written since (``restore``, ``replay_*``).

Not thread-safe: every method but ``materialise`` runs under the engine's lock.
``materialise`` only reads (pread) and may run outside it.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .. import formats
from ..batchops import by_topic
from ..errors import CorruptData, DelayqError
from ..formats.ready import ReadyEntry
from ..receipts import ReceiptKey
from ..store.checkpoint import Checkpoint, GroupCheckpoint
from ..store.commitlog import CommitLog
from ..store.readyindex import ReadyIndex
from . import groupstats, receiptcheck
from .grouppolicies import GroupPolicies, record_of
from .groups import GroupState
from .materialising import Quarantine, Taken, materialise
from .policy import GroupPolicy
from .receiptcheck import Checked
from .staging import StagedRows
from .types import AckOutcome, GroupStats, ReceivedBatch

__all__ = ["Consumers", "Taken"]

log = logging.getLogger("delayq.engine")


class Settled(NamedTuple):
    """The receipts one call acked, re-timed, held or nacked, as columns: each
    offset and the ticket (attempt and turn) it is held or was acked under."""

    offsets: list[int]
    attempts: list[int]


class Consumers:
    def __init__(
        self,
        ready_dir: Path,
        commitlog: CommitLog,
        shard: int,
        quarantine: Quarantine,
        receipt_key: bytes,
        policies: GroupPolicies,
    ) -> None:
        self._dir = ready_dir
        self._cl = commitlog
        self._shard = shard
        self._quarantine = quarantine
        self.receipts = ReceiptKey(receipt_key, shard)  # replaced whole (use_receipt_key)
        self.ready: dict[int, ReadyIndex] = {}
        self.groups: dict[int, dict[str, GroupState]] = {}
        self.policies = policies
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
                state = GroupState(g.committed, g.acked, g.inflight)
                self.groups.setdefault(int(tid_text), {})[name] = state
        self.policies.restore(ckpt)
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

    def replay_handout(self, rec: formats.Handout) -> None:
        state = self.group(rec.topic_id, rec.group)
        state.restore_held(rec.offsets, rec.tickets, rec.until_ms, waiting=rec.waiting)

    def replay_policy(self, rec: formats.PolicyDef) -> None:
        self.policies.apply_record(rec)
        self.group(rec.topic_id, rec.group)  # a group set is known

    def set_policy(
        self, topic_id: int, group: str, policy: GroupPolicy, now_ms: int, prefix: bytes = b""
    ) -> int:
        """Log ``policy`` for the group (after ``prefix``: a new topic's TOPIC record)
        and apply it; returns the CommitLog end."""
        self._cl.append(prefix + formats.encode_policy(record_of(topic_id, group, policy)), now_ms)
        self.policies.set(topic_id, group, policy)
        self.group(topic_id, group)  # a group set is known
        return self._cl.end

    def save_to(self, ckpt: Checkpoint) -> list[int]:
        """Put the groups and ready-queue lengths into ``ckpt``; write the ready
        queues' tails and return their descriptors (to fsync)."""
        ckpt.ready_len = {str(k): r.length for k, r in self.ready.items()}
        ckpt.ready_floor = {str(k): r.floor for k, r in self.ready.items() if r.floor}
        ckpt.groups = {
            str(tid): {g: _saved(st) for g, st in gs.items()} for tid, gs in self.groups.items()
        }
        self.policies.save_to(ckpt)
        return [fd for r in self.ready.values() if (fd := r.write_tail()) >= 0]

    def backlogs(self, topic_id: int) -> dict[str, int]:
        """Per group of the topic: messages delivered and not yet acked."""
        idx = self.ready.get(topic_id)
        length = idx.length if idx else 0
        return {g: st.backlog(length) for g, st in self.groups.get(topic_id, {}).items()}

    def group_stats(self, topic_id: int, now_ms: int) -> dict[str, GroupStats]:
        """Per group of the topic: where it stands (``groupstats.of_topic``)."""
        return groupstats.of_topic(
            self.ready.get(topic_id), self.groups.get(topic_id, {}), self.policies,
            self.dead_lettered, topic_id, now_ms,
        )  # fmt: skip

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
        auto_ack: bool = False,
    ) -> Taken | None:
        """Entries for one receive, as the group's policy allows (``grouppolicies``:
        none while paused, within its rate and in-flight limit, after its backoff);
        with ``auto_ack`` they are acked in the group already (the caller logs them
        with ``write_acks``), else the caller logs them with ``write_handout``.
        Entries past their last attempt are held for ``take_dead`` instead."""
        idx = self.ready.get(topic_id)
        if idx is None or idx.length == 0:
            return None
        state = self.group(topic_id, group)
        policies = self.policies
        policy = policies.enforced(topic_id, group)
        if policy.paused:
            return None
        bucket = policies.bucket(topic_id, group, policy, now_ms)
        wanted = max_n
        if bucket is not None:
            max_n = bucket.allowed(now_ms, max_n)
            if not max_n:
                if idx.length > state.next:  # something was there to hand out
                    policies.throttled[topic_id, group] += 1
                return None
        offsets: Sequence[int]
        backoff = policies.backoff(policy)
        if auto_ack:
            offsets, attempts = state.take_acked(
                now_ms, idx.length, max_n, policy.max_attempts, backoff
            )
        else:
            got = state.take(
                now_ms, idx.length, max_n, invisible_ms, policy.max_in_flight,
                policy.max_attempts, backoff,
            )  # fmt: skip
            offsets, attempts = [off for off, _ in got], [a for _, a in got]
        if not offsets:
            return None
        if bucket is not None:
            bucket.take(len(offsets))
            if len(offsets) == max_n < wanted:  # the rate cut this hand-out short
                policies.throttled[topic_id, group] += 1
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
        """The messages of ``taken`` (``materialising.materialise``); may run without
        the lock."""
        return materialise(self._cl, self.receipts, self._shard, self._quarantine, topic, taken)

    def settle(
        self,
        topic_id: int | None,
        group: str,
        receipts: Sequence[str],
        now_ms: int,
        invisible_ms: int | None,
    ) -> tuple[list[AckOutcome | DelayqError], Settled]:
        """Ack (``invisible_ms`` None) or re-time receipts. Returns the outcomes and the
        offsets newly acked or re-timed, with their tickets (the caller logs them with
        ``write_acks`` or ``write_handout``). A receipt that does not check
        (``receiptcheck``) is INVALID_RECEIPT and changes nothing."""
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
        else:  # the re-timed, in ``acked`` too: the caller logs them (``write_handout``)
            res = [
                state.change_invisibility(off, attempt, now_ms, invisible_ms)
                for off, attempt in zip(offsets, attempts, strict=True)
            ]
            for off, ticket, r in zip(offsets, attempts, res, strict=True):
                if r is AckOutcome.ACKED:
                    acked.offsets.append(off)
                    acked.attempts.append(ticket)
        for i, r in zip(checked.mine, res, strict=True):
            out[i] = r
        return out, acked

    def nack(
        self,
        topic_id: int | None,
        group: str,
        receipts: Sequence[str],
        now_ms: int,
        at_least_ms: int = 0,
    ) -> tuple[list[AckOutcome | DelayqError], Settled, list[int]]:
        """Negative acknowledgements: each message waits its group's backoff for the
        attempt it had (at least ``at_least_ms``), then is handed out again. The
        outcomes (ACKED where taken), and the nacked offsets with their tickets and
        when each is due again (the caller logs them with ``write_handout``)."""
        out, checked = self._checked(topic_id, group, receipts)
        nacked, dues = Settled([], []), list[int]()
        if checked is None or topic_id is None:
            return out, nacked, dues
        policy = self.policies.enforced(topic_id, group)
        backoff = self.policies.backoff(policy)
        for i, off, ticket in zip(checked.mine, checked.offsets, checked.tickets, strict=True):
            got = checked.state.nack(off, ticket, now_ms, backoff, policy.max_attempts, at_least_ms)
            if isinstance(got, AckOutcome):
                out[i] = got
            else:
                out[i] = AckOutcome.ACKED
                nacked.offsets.append(off)
                nacked.attempts.append(ticket)
                dues.append(got)
        return out, nacked, dues

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
        handed: bool = False,
    ) -> int:
        """Log acks already applied to the group (one ACK record); returns the CommitLog
        end. Given the ``attempts`` they acked, acks whose record cannot be written (a
        full disk) are undone before the error is raised: due again at once
        (``GroupState.give_back``; ``handed``: an ``auto_ack`` receive's, with the
        same attempt), not lost to the group."""
        try:
            self._cl.append(formats.encode_ack(topic_id, group, offsets), now_ms)
        except BaseException:
            if attempts is not None:
                self.group(topic_id, group).give_back(offsets, attempts, now_ms, handed=handed)
            raise
        return self._cl.end

    def write_handout(
        self,
        topic_id: int,
        group: str,
        held: Settled,
        until_ms: Sequence[int],
        now_ms: int,
        *,
        waiting: bool = False,
        handed: bool = False,
    ) -> int:
        """Log messages held in flight (hand-outs, re-timings; ``waiting``: nacks) as one
        HANDOUT record; returns the CommitLog end (0: nothing to log). Hand-outs
        (``handed``) whose record cannot be written (a full disk) are given back
        before the error is raised: due again at once with the same attempt, no retry
        counted (``GroupState.give_back``)."""
        if not held.offsets:
            return 0
        rec = formats.encode_handout(
            topic_id, group, held.offsets, held.attempts, until_ms, waiting=waiting
        )
        try:
            self._cl.append(rec, now_ms)
        except BaseException:
            if handed:
                state = self.group(topic_id, group)
                state.give_back(held.offsets, held.attempts, now_ms, handed=True)
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


def _saved(st: GroupState) -> GroupCheckpoint:
    """A group's state for the checkpoint: acks and what it holds in flight."""
    waiting = st.waiting
    held = [[off, t, due, int(off in waiting)] for off, (due, t) in st.inflight.items()]
    return GroupCheckpoint(st.committed, sorted(st.acked), held)
