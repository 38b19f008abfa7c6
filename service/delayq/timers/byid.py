"""Calls that name a message by its id: cancel, reschedule, lookup.

An id names the message's SCHEDULE record (its CommitLog position and epoch),
so each call reads that record and the message's state-map entry; nothing is
indexed in memory. A cancel appends one CANCELS record per call; a reschedule
appends one SCHEDULE record that both replaces the old message and carries the
new one (``replaces_seq``), so a crash leaves exactly one of them pending.

Not thread-safe: called with the shard's lock held; they return the CommitLog
end the caller waits for (group commit) where they wrote.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from .. import formats
from ..batchops import first_of_each, take_rows
from ..errors import CorruptData, DelayqError, FailedPrecondition, Forwarded, NotFound
from ..formats.imports import MOVED_FROM
from ..formats.keyheaders import split_dedup
from ..formats.messagestate import FORWARD_BASE, MessageState, forwarded_to, is_live, state_of
from ..ids import MessageId
from ..settings import EngineSettings
from ..store.commitlog import CommitLog
from ..store.statemap import StateMap
from ..types import CancelOutcome, LookupResult, ScheduleOutcome, ScheduleRequest
from .columns import Columns, Prepare, Prepared, prepare_copy
from .memory.topics import TopicBook
from .stages.accept import Acceptor

__all__ = ["ById", "ByIdState", "scheduled_heads"]

_DELIVERED = int(MessageState.DELIVERED)
_SCHEDULE = int(formats.RecordType.SCHEDULE)  # numpy compares a plain int 4x faster
# a cancel's outcome by code: 0 pending (cancelled now), 1 delivered, 2 cancelled or rescheduled
_CANCEL_OUTCOMES = (
    CancelOutcome.CANCELLED,
    CancelOutcome.ALREADY_DELIVERED,
    CancelOutcome.ALREADY_CANCELLED,
)


class ByIdState(Protocol):
    """What the by-id operations use of the shard's state."""

    counters: collections.Counter[str]
    settings: EngineSettings
    topics: TopicBook

    @property
    def cl(self) -> CommitLog: ...

    @property
    def states(self) -> StateMap: ...

    def left_pending(
        self, seqs: np.ndarray, tids: np.ndarray, dues: np.ndarray, state: MessageState | int
    ) -> None: ...


def scheduled_heads(
    st: ByIdState, cols: np.ndarray, errors: Mapping[int, DelayqError]
) -> tuple[np.ndarray, np.ndarray]:
    """Of these parsed ids (``MessageId.parse_columns``), the rows that name a
    SCHEDULE record of this shard, and those records' heads (one pread per span)."""
    shard, epoch, pos = cols.T
    live = shard == st.settings.shard
    if errors:
        live[list(errors)] = False
    rows = np.flatnonzero(live)
    heads, ok = st.cl.read_heads(pos[rows])
    ok &= (heads["type"] == _SCHEDULE) & (heads["epoch"] == epoch[rows])
    if not ok.all():
        rows, heads = rows[ok], take_rows(heads, ok)
    return rows, heads


class ById:
    def __init__(self, state: ByIdState, acceptor: Acceptor, prepare: Prepare) -> None:
        """``prepare``: the engine's validation of one request (``columns.Prepare``)."""
        self._state = state
        self._acceptor = acceptor
        self._prepare = prepare

    def read(
        self, mid: MessageId, field: str, *, payload: bool = True
    ) -> tuple[formats.Message, int]:
        """The SCHEDULE record an id names; NotFound otherwise."""
        st = self._state
        shard = st.settings.shard
        if mid.shard != shard:
            raise NotFound(field, f"message id belongs to shard {mid.shard}; this is shard {shard}")
        try:
            rec, size = st.cl.read(mid.position, payload=payload)
        except CorruptData as exc:
            gone = mid.position < st.cl.log.start  # its segment was deleted, it not kept
            why = (
                "no such message (unknown, or removed by retention)" if gone else "no such message"
            )
            raise NotFound(field, why) from exc
        if (
            not isinstance(rec, formats.Message)
            or rec.type is not formats.RecordType.SCHEDULE
            or rec.epoch != mid.epoch
        ):
            raise NotFound(field, "no such message")
        return rec, size

    def state_of(self, seq: int, mid: MessageId) -> MessageState:
        """The state of the message ``mid`` names (seq ``seq``); ``Forwarded`` when a
        rebalance moved it to another shard (the server passes the call on)."""
        raw = self._state.states.raw(seq)
        target = forwarded_to(raw)
        if target is not None:
            raise Forwarded("id", str(mid), target)
        return state_of(raw)  # (a message in a compaction block is pending to its callers)

    def cancel(
        self, ids: Sequence[str], cols: np.ndarray, errors: Mapping[int, DelayqError], now: int
    ) -> tuple[list[CancelOutcome | DelayqError], int]:
        """Cancel messages by id (``cols``/``errors``: the ids parsed, see
        ``MessageId.parse_columns``). Vectorised: records read (one pread per span),
        states checked and one CANCELS record written for the whole batch."""
        st = self._state
        out: list[CancelOutcome | DelayqError] = [CancelOutcome.NOT_FOUND] * len(ids)
        for i, exc in errors.items():
            out[i] = exc
        rows, heads = scheduled_heads(st, cols, errors)
        pos = cols[:, 2]
        state = st.states.raw_many(heads["seq"])
        hit = is_live(state)  # (pending, or in a compaction block: see ``compaction.loading``)
        seqs = heads["seq"].tolist()
        if len(set(seqs)) < len(seqs):  # named twice: the first cancels, the rest see it
            hit &= first_of_each(heads["seq"])
        every = len(rows) > 0 and bool(hit.all())
        if every and len(rows) == len(ids):  # the usual call: every id cancels here
            out[:] = [CancelOutcome.CANCELLED] * len(ids)
        else:
            codes = np.where(hit, 0, np.where(state == _DELIVERED, 1, 2)).tolist()
            for i, code in zip(rows.tolist(), codes, strict=True):
                out[i] = _CANCEL_OUTCOMES[code]
            for k in np.flatnonzero(state >= FORWARD_BASE).tolist():  # moved: passed on
                i = int(rows[k])
                out[i] = Forwarded(_item(i, len(ids)), ids[i], int(state[k]) - FORWARD_BASE)
        if not (every or hit.any()):
            # nothing written; but ALREADY_CANCELLED is said from this node's state,
            # and the CANCEL behind it may be one whose call failed (not yet held by
            # the in-sync set, or its lease lapsed before the ack), which a successor
            # would not have: the caller waits for the log's end, as for a new cancel
            already = CancelOutcome.ALREADY_CANCELLED in out
            return out, st.cl.end if already else 0
        gone, at = (heads, pos[rows]) if every else (take_rows(heads, hit), pos[rows[hit]])
        st.cl.append(
            formats.encode_cancels(gone["seq"], at, gone["topic_id"], now, gone["deliver_at_ms"]),
            now,
        )
        dues = gone["deliver_at_ms"]
        st.left_pending(gone["seq"], gone["topic_id"], dues, MessageState.CANCELLED)
        st.counters["cancelled"] += len(gone)
        return out, st.cl.end

    def reschedule(
        self, mid: MessageId, deliver_at_ms: int | None, delay_ms: int | None, now: int
    ) -> tuple[ScheduleOutcome, int]:
        """Cancel a pending message and schedule its copy at a new time, atomically
        (one SCHEDULE record carries both). Returns the new id."""
        [out], end = self.reschedule_many([mid], deliver_at_ms, delay_ms, now)
        return out, end

    def reschedule_many(
        self, mids: Sequence[MessageId], deliver_at_ms: int | None, delay_ms: int | None, now: int
    ) -> tuple[list[ScheduleOutcome], int]:
        """``reschedule`` of several pending messages in one append (each copy's
        SCHEDULE record names the message it replaces): all done, or none (an
        error raised before anything is written)."""
        st = self._state
        recs = [self._copy_of(mid, deliver_at_ms, delay_ms, now) for mid in mids]
        seqs = np.array([rec.seq for rec, _ in recs], dtype=np.uint64)
        replaces: np.ndarray | int = seqs
        at: np.ndarray | int = np.array([m.position for m in mids], dtype=np.int64)
        if len(recs) == 1:
            replaces, at = int(seqs[0]), mids[0].position
        items = Columns.of([item for _, item in recs])
        ids, dues, refused, end = self._acceptor.accept(
            items, now, replaces=replaces, replaces_pos=at, counted=False
        )
        if refused:
            raise next(iter(refused.values()))
        st.left_pending(
            seqs,
            np.array([rec.topic_id for rec, _ in recs]),
            np.array([rec.deliver_at_ms for rec, _ in recs]),
            MessageState.RESCHEDULED,
        )
        st.counters["rescheduled"] += len(recs)
        return [ScheduleOutcome(i or "", d) for i, d in zip(ids, dues, strict=True)], end

    def _copy_of(
        self, mid: MessageId, deliver_at_ms: int | None, delay_ms: int | None, now: int
    ) -> tuple[formats.Message, Prepared]:
        """The pending message ``mid``'s record and its copy at the new time, prepared."""
        st = self._state
        rec, _ = self.read(mid, "id")
        state = self.state_of(rec.seq, mid)
        if state is not MessageState.PENDING:
            raise FailedPrecondition(f"id: message is {state.name.lower()}, not pending")
        # a fresh message of this shard: not the copy a rebalance moved here; its
        # dedup hold's end and id carried on as they were (delayq's own headers)
        headers, dedup = split_dedup(formats.decode_headers(rec.headers))
        headers.pop(MOVED_FROM, None)
        req = ScheduleRequest(
            topic=st.topics.names[rec.topic_id],
            body=rec.body,
            key=rec.key,
            headers=headers,
            deliver_at_ms=deliver_at_ms,
            delay_ms=delay_ms,
        )
        return rec, prepare_copy(self._prepare, req, dedup, now)  # its key kept as it is

    def lookup(self, mid: MessageId, text: str) -> LookupResult:
        """What the message ``text`` (parsed: ``mid``) is and holds."""
        rec, _ = self.read(mid, "id")
        return self.result(rec, mid, text)

    def result(self, rec: formats.Message, mid: MessageId, text: str) -> LookupResult:
        """What the message ``text`` (parsed: ``mid``), whose SCHEDULE record ``rec``
        was read, is and holds."""
        st = self._state
        return LookupResult(
            text,
            self.state_of(rec.seq, mid),
            st.topics.names[rec.topic_id],
            rec.deliver_at_ms,
            rec.accepted_ms,
            rec.key,
            formats.decode_headers(rec.headers),
            rec.body,
        )


def _item(i: int, n: int) -> str:
    return f"ids[{i}]" if n > 1 else "id"
