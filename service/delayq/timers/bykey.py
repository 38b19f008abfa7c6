"""Calls that name messages by their producer's key (topic, key), and schedules
that ask what to do when their key (or dedup id) is taken.

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

``schedule`` decides a batch's rows in order, under the shard's lock, so two rows
(of one batch, or of two calls) never both take a free name. First the whole
batch's checked names are looked up at once (``KeyIndex.any_of``): when no entry
may hold any of them and no name is given twice, every row is new and the batch
is one append, as an unchecked one. Else row by row, a row looked up only if the
index may hold its name or a row before it wrote it: rows without a check
are appended together; a checked row whose name a row before it in the same
append holds makes that append go first. A row with a dedup id that is taken is
answered KEPT with its holder; then ``if_exists``: REJECT and KEEP answer the
holder (nothing written), REPLACE writes the new message and ends every pending
holder in the same append, so no instant has two pending messages of the key.
One holder: the SCHEDULE's ``replaces_seq`` ends it, one record, so a crash
leaves the old message or the new one. Several: a CANCELS record goes before the
SCHEDULE; a crash between the two (a torn append) keeps the cancels and loses the
new message, leaving no pending message of the key. The call was not
acknowledged then, and its retry stores the new one. A REPLACE of a key a
handed-over message holds is ``Unavailable`` until the map switches (its message
is on another shard: no append here ends it).

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
from ..errors import AlreadyExists, Congested, DelayqError, Forwarded, NotFound, Unavailable
from ..formats.keyheaders import holds_of
from ..formats.messagestate import FORWARD_BASE, MessageState, is_live
from ..ids import MessageId
from ..types import IfExists, KeyOutcome, LookupResult, ScheduleOutcome
from .byid import ById, ByIdState
from .columns import Columns
from .memory.keyindex import KeyIndex
from .stages.accept import Acceptor

__all__ = ["MOVING_RETRY_MS", "ByKey", "ByKeyState", "Holder", "KeyedSchedule"]

_Name = tuple[str, bytes] | tuple[str, None, bytes]

_SCHEDULE = int(formats.RecordType.SCHEDULE)
_REPLACE = int(IfExists.REPLACE)
_ANSWER = {int(IfExists.REJECT): KeyOutcome.EXISTS, int(IfExists.KEEP): KeyOutcome.KEPT}
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


class KeyedSchedule(NamedTuple):
    """A checked batch's results by row of its columns: ids (None where refused),
    due times, errors and the rows' key outcomes (not NEW only), and the CommitLog
    end to wait for (0: nothing written)."""

    ids: list[str | None]
    deliver_at_ms: list[int]
    errors: dict[int, DelayqError]
    outcomes: dict[int, KeyOutcome]
    end: int


def _ended_only(h: Holder) -> bool:
    """Whether only its window holds ``h`` (it ended here): sorts after the rest."""
    return not h.live and h.target < 0


class ByKey:
    def __init__(self, state: ByKeyState, acceptor: Acceptor, byid: ById) -> None:
        self._state = state
        self._acceptor = acceptor
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

    def _id(self, h: Holder) -> str:
        return str(MessageId(self._state.settings.shard, h.epoch, h.pos))

    def moving(self, h: Holder, field: str) -> Unavailable:
        """The refusal of a call on a message a rebalance is handing over."""
        return Unavailable(
            f"{field}: its message {self._id(h)} is moving to shard {h.target} (a rebalance "
            "under way); retry once the shard map switches",
            MOVING_RETRY_MS,
        )

    def _forwarded(self, h: Holder, field: str) -> Forwarded:
        return Forwarded(field, self._id(h), h.target)

    # ------------------------------------------------------------------ schedule
    def schedule(self, cols: Columns, now: int) -> KeyedSchedule:
        """Schedule the rows of ``cols`` (``cols.checked``), each row's key and dedup
        checks decided in order (see the module docstring)."""
        n = len(cols.bodies)
        modes = cols.modes.tolist() if cols.modes is not None else [0] * n
        dedup_ids = cols.dedup_ids or [b""] * n
        keys = cols.keys or [b""] * n
        topics = [cols.topics] * n if isinstance(cols.topics, str) else cols.topics
        maybe = self._maybe_held(cols, modes, dedup_ids, keys, topics)
        if not maybe.any() and _distinct(cols):
            # the common case (new names, none twice): decided as a whole, one append
            ids, dues, refused, end = self._acceptor.accept(cols, now)
            return KeyedSchedule(ids, dues, refused, {}, end)
        tids = self._state.topics.ids
        maybe_rows = maybe.tolist()
        out = KeyedSchedule([None] * n, cols.deliver_at_ms.tolist(), {}, {}, 0)
        run: list[int] = []  # rows to append together
        # the names the run's rows take: (topic, key), and (topic, None, dedup id)
        held: set[_Name] = set()
        taken: set[_Name] = set()  # every name this call wrote: a row of one is looked up
        ends = [0]

        def flush() -> None:
            if run:
                ends[0] = max(ends[0], self._append(cols, run, now, out, ends[0] > 0))
                run.clear()
                held.clear()

        for i in range(n):
            mode, did, key, topic = modes[i], dedup_ids[i], keys[i], topics[i]
            if mode or did:
                if (key and (topic, key) in held) or (did and (topic, None, did) in held):
                    flush()  # a row before it in this batch takes its name: written first
                look = maybe_rows[i] or (topic, key) in taken or (topic, None, did) in taken
                tid = tids.get(topic) if look else None  # (None: nothing can hold it)
                got = self.holders(tid, did, now, dedup=True) if did and tid is not None else []
                if got:
                    self._answer(out, i, got[0], KeyOutcome.KEPT)
                    continue
                got = self.holders(tid, key, now) if mode and tid is not None else []
                if got and mode != _REPLACE:
                    self._answer(out, i, got[0], _ANSWER[mode])
                    continue
                moved = [h for h in got if h.target >= 0]
                if moved:  # REPLACE of a key handed over: held until the map switches
                    if not ends[0]:
                        raise self.moving(moved[0], "key")
                    out.errors[i] = self.moving(moved[0], "key")
                    continue
                pending = [h for h in got if h.live]
                if pending:  # REPLACE
                    flush()
                    _take(taken, topic, key, did)
                    try:
                        ends[0] = max(ends[0], self._replace(cols, i, pending, now, out))
                    except Congested as exc:
                        if not ends[0]:
                            raise  # nothing written yet: the whole call is refused
                        out.errors[i] = exc
                    continue
            run.append(i)
            _take(held, topic, key, did)
            _take(taken, topic, key, did)
        flush()
        return out._replace(end=ends[0])

    def _maybe_held(
        self,
        cols: Columns,
        modes: list[int],
        dedup_ids: list[bytes],
        keys: list[bytes],
        topics: list[str],
    ) -> np.ndarray:
        """Per row: whether a message filed before this call may hold the name it
        checks (its key with a mode, its dedup id): the index's ``any_of``, a batch
        at once; False for a row that checks nothing or whose topic has no id."""
        st = self._state
        n = len(modes)
        tids = st.topics.ids
        if isinstance(cols.topics, str):
            tid = np.full(n, tids.get(cols.topics, -1), dtype=np.int64)
        else:
            tid = np.fromiter((tids.get(t, -1) for t in topics), np.int64, n)
        maybe = np.zeros(n, dtype=bool)
        known = tid >= 0
        for index, names, asks in (
            (st.keys, keys, None if cols.modes is None else cols.modes != 0),
            (st.dedups, dedup_ids, None if cols.dedup_ids is None else _named(dedup_ids)),
        ):
            if asks is None or not len(index):
                continue
            rows = np.flatnonzero(asks & known)
            if len(rows):
                pick = rows.tolist()
                maybe[rows] |= index.any_of(tid[rows], [names[i] for i in pick])
        return maybe

    def _answer(self, out: KeyedSchedule, i: int, h: Holder, outcome: KeyOutcome) -> None:
        st = self._state
        out.ids[i], out.deliver_at_ms[i] = self._id(h), h.deliver_at_ms
        out.outcomes[i] = outcome
        if outcome is KeyOutcome.EXISTS:
            out.errors[i] = AlreadyExists("key", self._id(h), h.deliver_at_ms)
            st.counters["key_exists"] += 1
        else:
            st.counters["key_kept"] += 1

    def _append(
        self, cols: Columns, rows: list[int], now: int, out: KeyedSchedule, wrote: bool
    ) -> int:
        """Append ``rows`` of ``cols`` as one batch; a refusal of the whole append
        after an earlier one of this batch wrote is that of its rows alone."""
        part = cols.take(np.array(rows, dtype=np.int64))._replace(origin=None)
        try:
            ids, dues, refused, end = self._acceptor.accept(part, now)
        except Congested as exc:
            if not wrote:
                raise
            for i in rows:
                out.errors[i] = exc
            return 0
        for k, i in enumerate(rows):
            out.ids[i], out.deliver_at_ms[i] = ids[k], dues[k]
            if k in refused:
                out.errors[i] = refused[k]
        return end

    def _replace(
        self, cols: Columns, i: int, pending: list[Holder], now: int, out: KeyedSchedule
    ) -> int:
        """Write row ``i`` and end the ``pending`` holders of its key in one append."""
        st = self._state
        part = cols.take(np.array([i], dtype=np.int64))._replace(origin=None)
        seqs = np.array([h.seq for h in pending], dtype=np.uint64)
        tids = np.array([h.topic_id for h in pending], dtype=np.int64)
        dues = np.array([h.deliver_at_ms for h in pending], dtype=np.int64)
        if len(pending) == 1:
            one = pending[0]
            ids, got, refused, end = self._acceptor.accept(
                part, now, replaces=one.seq, replaces_pos=one.pos
            )
            became = MessageState.RESCHEDULED
        else:
            positions = np.array([h.pos for h in pending], dtype=np.int64)
            cancels = formats.encode_cancels(seqs, positions, tids, now, dues)
            ids, got, refused, end = self._acceptor.accept(part, now, prefix=cancels)
            became = MessageState.CANCELLED
        out.ids[i], out.deliver_at_ms[i] = ids[0], got[0]
        if refused:
            out.errors[i] = refused[0]
            return end
        st.left_pending(seqs, tids, dues, became)
        st.counters["key_replaced"] += len(pending)
        out.outcomes[i] = KeyOutcome.REPLACED
        return end

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
        seqs = np.array([h.seq for h in gone], dtype=np.uint64)
        tids = np.array([h.topic_id for h in gone], dtype=np.int64)
        dues = np.array([h.deliver_at_ms for h in gone], dtype=np.int64)
        positions = np.array([h.pos for h in gone], dtype=np.int64)
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


def _named(names: list[bytes]) -> np.ndarray:
    return np.fromiter(map(bool, names), dtype=bool, count=len(names))


def _take(names: set[_Name], topic: str, key: bytes, did: bytes) -> None:
    """Add a written row's names (its key, its dedup id) to ``names``."""
    if key:
        names.add((topic, key))
    if did:
        names.add((topic, None, did))


def _distinct(cols: Columns) -> bool:
    """Whether no (topic, key) and no (topic, dedup id) is given by two rows."""
    for col in (cols.keys, cols.dedup_ids):
        if col is None:
            continue
        if isinstance(cols.topics, str):
            named = [k for k in col if k] if not all(col) else col
            if len(set(named)) != len(named):
                return False
        else:
            pairs = [(t, k) for t, k in zip(cols.topics, col, strict=True) if k]
            if len(set(pairs)) != len(pairs):
                return False
    return True
