"""Schedules that ask what to do when their key (or dedup id) is taken: a
checked batch (``Columns.checked``), decided against the key indexes by the
holders ``timers.bykey`` finds.

``schedule`` decides a batch's rows in order, under the shard's lock, so two rows
(of one batch, or of two calls) never both take a free name. First the whole
batch's checked names are looked up at once (``KeyIndex.any_of``, their hashes
then handed to the accept stage's filing, and told distinct by them; a batch of
fewer than 8 rows, a name at a time: ``KeyIndex.holds``). When no name is given
twice, no row's
decision waits on another's: the rows the index may hold (none when the names are
new; a few when a name shares its 32-bit hash with a filed one) are looked up
alone, the held ones answered, and every other row goes in one append, as an
unchecked batch; unless such a row is a REPLACE that ends a holder, when the batch
is decided row by row. Row by row, a row is looked up only if the index may hold
its name or a row before it wrote it: rows without a check are appended together;
a checked row whose name a row before it in the same append holds makes that
append go first. A row with a dedup id that is taken is answered KEPT with its
holder; then ``if_exists``: REJECT and KEEP answer the holder (nothing written),
REPLACE writes the new message and ends every pending holder in the same append,
so no instant has two pending messages of the key. One holder: the SCHEDULE's
``replaces_seq`` ends it, one record, so a crash leaves the old message or the new
one. Several: a CANCELS record goes before the SCHEDULE; a crash between the two
(a torn append) keeps the cancels and loses the new message, leaving no pending
message of the key. The call was not acknowledged then, and its retry stores the
new one. A REPLACE of a key a handed-over message holds is ``Unavailable`` until
the map switches (its message is on another shard: no append here ends it).

Not thread-safe: called with the shard's lock held; returns the CommitLog end the
caller waits for (group commit) where it wrote.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import formats
from ..errors import AlreadyExists, Congested, DelayqError
from ..formats.messagestate import MessageState
from ..types import IfExists, KeyOutcome
from .bykey import ByKey, ByKeyState, Holder, holder_columns
from .columns import Columns
from .keyfiling import NameHashes, hashes_of
from .memory import keyslots
from .stages.accept import Acceptor

__all__ = ["KeySchedule", "KeyedSchedule"]

_Name = tuple[str, bytes] | tuple[str, None, bytes]

_REPLACE = int(IfExists.REPLACE)
_ANSWER = {int(IfExists.REJECT): KeyOutcome.EXISTS, int(IfExists.KEEP): KeyOutcome.KEPT}


class KeyedSchedule(NamedTuple):
    """A checked batch's results by row of its columns: ids (None where refused),
    due times, errors and the rows' key outcomes (not NEW only), and the CommitLog
    end to wait for (0: nothing written)."""

    ids: list[str | None]
    deliver_at_ms: list[int]
    errors: dict[int, DelayqError]
    outcomes: dict[int, KeyOutcome]
    end: int


class KeySchedule:
    def __init__(self, state: ByKeyState, acceptor: Acceptor, bykey: ByKey) -> None:
        self._state = state
        self._acceptor = acceptor
        self._bykey = bykey

    def schedule(self, cols: Columns, now: int, counted: bool = True) -> KeyedSchedule:
        """Schedule the rows of ``cols`` (``cols.checked``), each row's key and dedup
        checks decided in order (see the module docstring); ``counted``: the rows
        written count as ``scheduled`` (a client's; not a dead letter's copy)."""
        n = len(cols.bodies)
        modes = cols.modes.tolist() if cols.modes is not None else [0] * n
        dedup_ids = cols.dedup_ids or [b""] * n
        keys = cols.keys or [b""] * n
        topics = [cols.topics] * n if isinstance(cols.topics, str) else cols.topics
        maybe, hashes = self._maybe_held(cols, modes, dedup_ids, keys, topics)
        tids = self._state.topics.ids
        out = KeyedSchedule([None] * n, cols.deliver_at_ms.tolist(), {}, {}, 0)
        if _distinct(cols, hashes):  # no name given twice: no row's decision waits on another's
            answers: dict[int, tuple[Holder, KeyOutcome]] | None = {}
            for i in np.flatnonzero(maybe).tolist():  # few: new names, or a hash shared
                tid = tids.get(topics[i])
                outcome, got = self._check(tid, modes[i], dedup_ids[i], keys[i], now)
                if outcome is None and any(h.live or h.target >= 0 for h in got):
                    answers = None  # a REPLACE ends a holder: row by row, in order
                    break
                if outcome is not None:
                    answers[i] = got[0], outcome  # type: ignore[index]
            if answers is not None:  # every other row new: decided as a whole, one append
                if not answers:  # (the usual case)
                    ids, dues, refused, end = self._acceptor.accept(
                        cols, now, hashes=hashes, counted=counted
                    )
                    return KeyedSchedule(ids, dues, refused, {}, end)
                rows = [i for i in range(n) if i not in answers]
                end = self._append(cols, rows, now, out, False, counted, hashes) if rows else 0
                for i, (h, outcome) in answers.items():
                    self._answer(out, i, h, outcome)
                return out._replace(end=end)
        maybe_rows = maybe.tolist()
        run: list[int] = []  # rows to append together
        # the names the run's rows take: (topic, key), and (topic, None, dedup id)
        held: set[_Name] = set()
        taken: set[_Name] = set()  # every name this call wrote: a row of one is looked up
        ends = [0]

        def flush() -> None:
            if run:
                ends[0] = max(ends[0], self._append(cols, run, now, out, ends[0] > 0, counted))
                run.clear()
                held.clear()

        for i in range(n):
            mode, did, key, topic = modes[i], dedup_ids[i], keys[i], topics[i]
            if mode or did:
                if (key and (topic, key) in held) or (did and (topic, None, did) in held):
                    flush()  # a row before it in this batch takes its name: written first
                look = maybe_rows[i] or (topic, key) in taken or (topic, None, did) in taken
                tid = tids.get(topic) if look else None  # (None: nothing can hold it)
                outcome, got = self._check(tid, mode, did, key, now)
                if outcome is not None:
                    self._answer(out, i, got[0], outcome)
                    continue
                moved = [h for h in got if h.target >= 0]
                if moved:  # REPLACE of a key handed over: held until the map switches
                    if not ends[0]:
                        raise self._bykey.moving(moved[0], "key")
                    out.errors[i] = self._bykey.moving(moved[0], "key")
                    continue
                pending = [h for h in got if h.live]
                if pending:  # REPLACE
                    flush()
                    _take(taken, topic, key, did)
                    try:
                        ends[0] = max(ends[0], self._replace(cols, i, pending, now, out, counted))
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

    def _check(
        self, tid: int | None, mode: int, did: bytes, key: bytes, now: int
    ) -> tuple[KeyOutcome | None, list[Holder]]:
        """A checked row's holders (``tid`` None: nothing can hold its names): its
        dedup id's (then KEPT), else its key's (REJECT and KEEP: their outcome; a
        REPLACE: None, with every holder of the key)."""
        if tid is None:
            return None, []
        got = self._bykey.holders(tid, did, now, dedup=True) if did else []
        if got:
            return KeyOutcome.KEPT, got
        got = self._bykey.holders(tid, key, now) if mode else []
        if got and mode != _REPLACE:
            return _ANSWER[mode], got
        return None, got

    def _maybe_held(
        self,
        cols: Columns,
        modes: list[int],
        dedup_ids: list[bytes],
        keys: list[bytes],
        topics: list[str],
    ) -> tuple[np.ndarray, NameHashes]:
        """Per row: whether a message filed before this call may hold the name it
        checks (its key with a mode, its dedup id): the index's ``any_of``, a batch
        at once; False for a row that checks nothing or whose topic has no id. And
        the names hashed for it, a column per index where every row was (for the
        accept stage's filing: not hashed again)."""
        st = self._state
        n = len(modes)
        tids = st.topics.ids
        if n < keyslots.FEW:  # a few (a single send): Python scalars, no numpy call
            return self._maybe_held_few(modes, dedup_ids, keys, topics), (None, None)
        if isinstance(cols.topics, str):
            tid = np.full(n, tids.get(cols.topics, -1), dtype=np.int64)
        else:
            tid = np.fromiter((tids.get(t, -1) for t in topics), np.int64, n)
        maybe = np.zeros(n, dtype=bool)
        known = tid >= 0
        hashed: list[np.ndarray | None] = [None, None]
        for j, (index, names, asks) in enumerate(
            (
                (st.keys, keys, None if cols.modes is None else cols.modes != 0),
                (st.dedups, dedup_ids, None if cols.dedup_ids is None else _named(dedup_ids)),
            )
        ):
            if asks is None or not len(index):
                continue
            rows = np.flatnonzero(asks & known)
            if len(rows) == n:  # every row (the usual checked batch): as they are
                hashed[j] = hashes = index.hashes(tid, names)
                maybe |= index.any_of(hashes)
            elif len(rows):
                pick = rows.tolist()
                maybe[rows] |= index.any_of(index.hashes(tid[rows], [names[i] for i in pick]))
        return maybe, (hashed[0], hashed[1])

    def _maybe_held_few(
        self, modes: list[int], dedup_ids: list[bytes], keys: list[bytes], topics: list[str]
    ) -> np.ndarray:
        """``_maybe_held`` of a few rows, one at a time."""
        st = self._state
        tids = st.topics.ids
        out = []
        for mode, did, key, topic in zip(modes, dedup_ids, keys, topics, strict=True):
            tid = tids.get(topic)
            out.append(
                tid is not None
                and (
                    bool(mode and len(st.keys) and st.keys.holds(tid, key))
                    or bool(did and len(st.dedups) and st.dedups.holds(tid, did))
                )
            )
        return np.array(out, dtype=bool)

    def _answer(self, out: KeyedSchedule, i: int, h: Holder, outcome: KeyOutcome) -> None:
        st = self._state
        out.ids[i], out.deliver_at_ms[i] = self._bykey.message_id(h), h.deliver_at_ms
        out.outcomes[i] = outcome
        if outcome is KeyOutcome.EXISTS:
            out.errors[i] = AlreadyExists("key", self._bykey.message_id(h), h.deliver_at_ms)
            st.counters["key_exists"] += 1
        else:
            st.counters["key_kept"] += 1

    def _append(
        self,
        cols: Columns,
        rows: list[int],
        now: int,
        out: KeyedSchedule,
        wrote: bool,
        counted: bool,
        hashes: NameHashes = (None, None),
    ) -> int:
        """Append ``rows`` of ``cols`` as one batch (``hashes``: of all of ``cols``'s
        rows, as ``_maybe_held`` gives them); a refusal of the whole append after an
        earlier one of this batch wrote is that of its rows alone."""
        r = np.array(rows, dtype=np.int64)
        part = cols.take(r)._replace(origin=None)
        try:
            ids, dues, refused, end = self._acceptor.accept(
                part, now, hashes=hashes_of(hashes, r), counted=counted
            )
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
        self,
        cols: Columns,
        i: int,
        pending: list[Holder],
        now: int,
        out: KeyedSchedule,
        counted: bool,
    ) -> int:
        """Write row ``i`` and end the ``pending`` holders of its key in one append."""
        st = self._state
        part = cols.take(np.array([i], dtype=np.int64))._replace(origin=None)
        seqs, tids, dues, positions = holder_columns(pending)
        if len(pending) == 1:
            one = pending[0]
            ids, got, refused, end = self._acceptor.accept(
                part, now, replaces=one.seq, replaces_pos=one.pos, counted=counted
            )
            became = MessageState.RESCHEDULED
        else:
            cancels = formats.encode_cancels(seqs, positions, tids, now, dues)
            ids, got, refused, end = self._acceptor.accept(
                part, now, prefix=cancels, counted=counted
            )
            became = MessageState.CANCELLED
        out.ids[i], out.deliver_at_ms[i] = ids[0], got[0]
        if refused:
            out.errors[i] = refused[0]
            return end
        st.left_pending(seqs, tids, dues, became)
        st.counters["key_replaced"] += len(pending)
        out.outcomes[i] = KeyOutcome.REPLACED
        return end


def _named(names: list[bytes]) -> np.ndarray:
    return np.fromiter(map(bool, names), dtype=bool, count=len(names))


def _take(names: set[_Name], topic: str, key: bytes, did: bytes) -> None:
    """Add a written row's names (its key, its dedup id) to ``names``."""
    if key:
        names.add((topic, key))
    if did:
        names.add((topic, None, did))


def _distinct(cols: Columns, hashes: NameHashes) -> bool:
    """Whether no (topic, key) and no (topic, dedup id) is given by two rows
    (``hashes``: of every row's, where given: no hash twice says it at once)."""
    for col, hashed in zip((cols.keys, cols.dedup_ids), hashes, strict=True):
        if col is None:
            continue
        if hashed is not None:
            ranked = np.sort(hashed)
            if not (ranked[1:] == ranked[:-1]).any():
                continue  # (a hash twice: two names of one hash, or one name twice)
        if isinstance(cols.topics, str):
            named = [k for k in col if k] if not all(col) else col
            if len(set(named)) != len(named):
                return False
        else:
            pairs = [(t, k) for t, k in zip(cols.topics, col, strict=True) if k]
            if len(set(pairs)) != len(pairs):
                return False
    return True
