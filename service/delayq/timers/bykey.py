"""Calls that name messages by their producer's key (topic, key), and the
messages that hold a name (a key, or a dedup id).

A name is taken by a message of the topic filed under it (``keyfiling``) that is
live (pending, or in a compaction block) or that ended here (delivered, cancelled,
rescheduled) before its hold passed (accepted + its dedup window), or that a
rebalance under way handed over to another shard (``ShardState.holding``: until
the map switches the key is this shard's still, and its message is pending
there, reached by its id here). Each candidate
the index gives is confirmed by its record (topic id, seq, and the key or the
``delayq-dedup-id`` header equal), so the index may be approximate; the oldest
(lowest position) live or handed-over holder answers, one that ended in its
window only when there is none (``holders``).

A checked schedule (``timers.keyschedule``) asks ``holders`` whether its names
are taken; a REPLACE of a key a handed-over message holds is ``Unavailable``
until the map switches (``moving``: its message is on another shard, no append
here ends it).

By key: ``lookup`` and ``reschedule`` answer a handed-over message as
``Forwarded`` (its id here and the shard it went to) in its place, ``cancel``
lists them apart (``moved``): the server passes them on by id, as it does calls
by id (``server.calls``).

Not thread-safe: called with the shard's lock held; returns the CommitLog end the
caller waits for (group commit) where it wrote.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

import numpy as np

from .. import formats
from ..errors import Forwarded, NotFound, Unavailable
from ..formats.keyheaders import holds_of
from ..formats.messagestate import FORWARD_BASE, MessageState, is_live
from ..ids import MessageId
from ..types import LookupResult, ScheduleOutcome
from .byid import ById, ByIdState
from .memory.keyindex import KeyIndex

__all__ = ["MOVING_RETRY_MS", "ByKey", "ByKeyState", "Holder", "holder_columns"]

_SCHEDULE = int(formats.RecordType.SCHEDULE)
_ENDED = (
    int(MessageState.CANCELLED),
    int(MessageState.DELIVERED),
    int(MessageState.RESCHEDULED),
)  # ended here: a window still holds (a forwarded one: ``ShardState.holding``)
MOVING_RETRY_MS = 1000
"""The retry hint of a REPLACE of a key whose message a rebalance handed over."""


class ByKeyState(ByIdState, Protocol):
    """What the by-key operations use of the shard's state."""

    keys: KeyIndex
    dedups: KeyIndex

    def holding(self, raw: np.ndarray) -> np.ndarray: ...


class Holder(NamedTuple):
    """A message holding a name: its record's position, epoch, seq, topic id, due
    time, whether it is live (else only its window holds, or it was handed over)
    and the shard a rebalance under way handed it over to (-1: none)."""

    pos: int
    epoch: int
    seq: int
    topic_id: int
    deliver_at_ms: int
    live: bool
    target: int = -1


def holder_columns(hs: Sequence[Holder]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Holders as (seqs, topic ids, due times, positions) columns: what a CANCELS
    record and ``ShardState.left_pending`` take."""
    return (
        np.array([h.seq for h in hs], dtype=np.uint64),
        np.array([h.topic_id for h in hs], dtype=np.int64),
        np.array([h.deliver_at_ms for h in hs], dtype=np.int64),
        np.array([h.pos for h in hs], dtype=np.int64),
    )


def _ended_only(h: Holder) -> bool:
    """Whether only its window holds ``h`` (it ended here): sorts after the rest."""
    return not h.live and h.target < 0


class ByKey:
    def __init__(self, state: ByKeyState, byid: ById) -> None:
        self._state = state
        self._byid = byid

    # ------------------------------------------------------------------ holders
    def holders(
        self, tid: int | None, name: bytes, now: int, *, dedup: bool = False
    ) -> list[Holder]:
        """The messages of topic ``tid`` holding ``name`` (a key, or a dedup id):
        the live ones and those handed over first, then those only a window holds
        (ended here), each part oldest first; so ``holders(...)[0]`` is the oldest
        live holder, an ended one only when none is live."""
        return [h for h, _ in self._read_holders(tid, name, now, dedup=dedup)[0]]

    def _read_holders(
        self, tid: int | None, name: bytes, now: int, *, dedup: bool = False
    ) -> tuple[list[tuple[Holder, int]], formats.MessageColumns | None]:
        """``holders``, each with its row in the records read to confirm them (which
        a lookup answers from: the records are read once)."""
        if tid is None or not name:
            return [], None
        st = self._state
        entries = (st.dedups if dedup else st.keys).find(tid, name)
        if not entries:
            return [], None
        # by the state map first: an ended entry whose hold passed costs no read
        seqs = np.fromiter((e.seq for e in entries), np.uint64, len(entries))
        raw = st.states.raw_many(seqs)
        live = is_live(raw).tolist()
        ended = np.isin(raw, _ENDED).tolist()
        moved = np.where(st.holding(raw), raw.astype(np.int64) - FORWARD_BASE, -1).tolist()
        maybe = [
            (e, live[k], moved[k])
            for k, e in enumerate(entries)
            if live[k] or moved[k] >= 0 or (ended[k] and e.hold_until_ms > now)
        ]
        if not maybe:
            return [], None
        positions = np.fromiter((e.pos for e, _, _ in maybe), np.int64, len(maybe))
        cols = st.cl.read_scheduled(positions, payload=True)
        heads = cols.heads
        out: list[tuple[Holder, int]] = []
        for i, (e, alive, target) in enumerate(maybe):
            h = heads[i]
            if not (
                cols.ok[i]
                and int(h["type"]) == _SCHEDULE
                and int(h["topic_id"]) == tid
                and int(h["seq"]) == e.seq
            ):
                continue
            if dedup:
                if holds_of([cols.headers[i]], 1)[1][0] != name:
                    continue
            elif cols.keys[i].encode() != name:
                continue
            due = int(h["deliver_at_ms"])
            out.append((Holder(e.pos, int(h["epoch"]), e.seq, tid, due, alive, target), i))
        out.sort(key=lambda found: _ended_only(found[0]))  # stable: oldest first in each part
        return out, cols

    def message_id(self, h: Holder) -> str:
        return str(MessageId(self._state.settings.shard, h.epoch, h.pos))

    def moving(self, h: Holder, field: str) -> Unavailable:
        """The refusal of a call on a message a rebalance is handing over."""
        return Unavailable(
            f"{field}: its message {self.message_id(h)} is moving to shard {h.target} (a rebalance "
            "under way); retry once the shard map switches",
            MOVING_RETRY_MS,
        )

    def _forwarded(self, h: Holder, field: str) -> Forwarded:
        return Forwarded(field, self.message_id(h), h.target)

    # ------------------------------------------------------------------ by key
    def pending(self, topic: str, key: str, now: int) -> list[Holder]:
        """The live messages of ``topic`` with ``key`` and those a rebalance under
        way handed over, oldest first; NotFound if none."""
        return [h for h, _ in self._pending(topic, key, now)[0]]

    def _pending(
        self, topic: str, key: str, now: int
    ) -> tuple[list[tuple[Holder, int]], formats.MessageColumns | None]:
        """``pending``, each with its row in the records read (``_read_holders``)."""
        tid = self._state.topics.ids.get(topic)
        found, cols = self._read_holders(tid, key.encode(), now)
        got = [(h, i) for h, i in found if h.live or h.target >= 0]
        if not got:
            raise NotFound("key", f"no pending message of topic {topic!r} has this key")
        return got, cols

    def lookup(self, topic: str, key: str, now: int) -> list[LookupResult | Forwarded]:
        """The pending messages of the key, oldest first, from the records read to
        confirm them (``ById.result``; one handed over: ``Forwarded``)."""
        got, cols = self._pending(topic, key, now)
        assert cols is not None  # (something was found: its records were read)
        shard = self._state.settings.shard
        out: list[LookupResult | Forwarded] = []
        for h, i in got:
            if h.target >= 0:
                out.append(self._forwarded(h, "key"))
                continue
            mid = MessageId(shard, h.epoch, h.pos)
            out.append(self._byid.result(cols.record(i)[0], mid, str(mid)))
        return out

    def cancel(
        self, topic: str, keys: Sequence[str], now: int, moved: list[tuple[int, Forwarded]]
    ) -> tuple[list[int], int]:
        """Cancel every pending message of each key (one CANCELS record for the
        call); how many per key (a key named twice: the second finds none). Those
        handed over are appended to ``moved`` (key index, ``Forwarded``), not counted."""
        st = self._state
        tid = st.topics.ids.get(topic)
        counts: list[int] = []
        gone: list[Holder] = []
        seen: set[int] = set()
        for k, key in enumerate(keys):
            got = [h for h in self.holders(tid, key.encode(), now) if h.seq not in seen]
            seen.update(h.seq for h in got)
            moved += [(k, self._forwarded(h, "keys")) for h in got if h.target >= 0]
            got = [h for h in got if h.live]
            counts.append(len(got))
            gone += got
        if not gone:
            return counts, 0
        seqs, tids, dues, positions = holder_columns(gone)
        st.cl.append(formats.encode_cancels(seqs, positions, tids, now, dues), now)
        st.left_pending(seqs, tids, dues, MessageState.CANCELLED)
        st.counters["cancelled"] += len(gone)
        return counts, st.cl.end

    def reschedule(
        self, topic: str, key: str, deliver_at_ms: int | None, delay_ms: int | None, now: int
    ) -> tuple[list[ScheduleOutcome | Forwarded], int]:
        """Reschedule each pending message of the key, oldest first, in one append
        (``ById.reschedule_many``: all or none); the new ids (one handed over:
        ``Forwarded``, left as it is)."""
        got = self.pending(topic, key, now)
        here = [h for h in got if h.target < 0]
        shard = self._state.settings.shard
        mids = [MessageId(shard, h.epoch, h.pos) for h in here]
        done, end = (
            self._byid.reschedule_many(mids, deliver_at_ms, delay_ms, now) if mids else ([], 0)
        )
        copies = iter(done)
        outs: list[ScheduleOutcome | Forwarded] = [
            self._forwarded(h, "key") if h.target >= 0 else next(copies) for h in got
        ]
        return outs, end
