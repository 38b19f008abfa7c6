"""The engine's writes of messages by clients (``Accepting``): schedule (one
message each, or a batch as columns; a row asking for a key or dedup check goes
through ``timers.keyschedule``), the copies the engine makes of stored messages
(a dead letter's: ``schedule_copies``, checked as a copy), by id cancel,
reschedule and lookup, and by key (topic, key) lookup, cancel and reschedule.

Client input is validated here, at the boundary (``validation``), before the
shard's lock is taken; each write is admitted from a master in office, written
in one batch under the lock, and acknowledged once durable outside it
(``shard.OpenShard.admit``/``acked``). An id of a message a rebalance moved here
answers with its copy here (``local_ids``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..argchecks import check_topic
from ..errors import DelayqError, Forwarded, InvalidArgument
from ..ids import MessageId
from ..timers.columns import Columns, Prepared, prepare_copy
from ..timers.tuning import HELP_LINK
from ..types import (
    BatchOutcome,
    CancelOutcome,
    LookupResult,
    ScheduleBatch,
    ScheduleOutcome,
    ScheduleRequest,
)
from .keychecks import check_key
from .lifecycle import ShardLife
from .shard import OpenShard
from .validation import batch_of, prepare, prepare_columns, resolve_due

__all__ = ["Accepting", "parse_ids"]


class Accepting:
    """Thread-safe: each call takes the shard's lock for its write."""

    def __init__(self, life: ShardLife) -> None:
        self._life = life
        self._settings = life.setup.settings
        self._clock = life.setup.clock

    # ------------------------------------------------------------------ schedule
    def schedule(self, requests: Sequence[ScheduleRequest]) -> list[ScheduleOutcome]:
        """See ``Engine.schedule``."""
        reqs = list(requests)
        batch, suspects = batch_of(reqs)
        return self._schedule(batch, reqs.__getitem__, suspects).outcomes()

    def schedule_batch(self, batch: ScheduleBatch) -> BatchOutcome:
        """See ``Engine.schedule_batch``."""
        return self._schedule(batch, None, ())

    def _schedule(
        self,
        batch: ScheduleBatch,
        row: Callable[[int], ScheduleRequest] | None,
        suspects: Sequence[int],
    ) -> BatchOutcome:
        now = self._clock.now_ms()
        cols, invalid = prepare_columns(batch, now, self._settings, row, suspects)
        return self._write(len(batch.bodies), cols, dict(invalid), now)

    def schedule_copies(self, requests: Sequence[ScheduleRequest]) -> list[ScheduleOutcome]:
        """New messages the engine makes of stored ones (a dead letter's copy):
        checked as a copy is (``timers.columns.prepare_copy``), their topic, key and
        body kept as stored, unchecked (a firing's body may be empty, or longer
        than ``max_body_bytes`` now allows), their headers and due time checked."""
        now = self._clock.now_ms()
        settings = self._settings

        def check(req: ScheduleRequest, now_ms: int, prefix: str = "") -> Prepared:
            return prepare(req, now_ms, settings, prefix)

        items: list[Prepared] = []
        rows: list[int] = []
        errors: dict[int, DelayqError] = {}
        for i, req in enumerate(requests):
            try:
                items.append(prepare_copy(check, req, b"", now, f"messages[{i}]."))
                rows.append(i)
            except DelayqError as exc:
                errors[i] = exc
        cols = Columns.of(items)
        if errors:
            cols = cols._replace(origin=np.array(rows, dtype=np.int64))
        return self._write(len(requests), cols, errors, now, counted=False).outcomes()

    def _write(
        self,
        n: int,
        cols: Columns,
        errors: dict[int, DelayqError],
        now: int,
        counted: bool = True,
    ) -> BatchOutcome:
        """Write the prepared rows ``cols`` of a batch of ``n`` (``errors``: the rows
        refused before); their outcomes. ``counted``: as ``scheduled`` (a client's
        batch; a dead letter's copies are ``dead_lettered``)."""
        if cols.checked:
            return self._schedule_checked(n, cols, errors, now, counted)
        with self._life.held() as sh:
            epoch = sh.admit("messages")
            ids, dues, refused, end = sh.accept.accept(cols, now, counted=counted)
            if len(sh.state.enqueue_q) >= HELP_LINK:
                sh.stages.link.help()
        sh.acked(end, epoch, "messages")
        if cols.origin is None and not refused:
            return BatchOutcome(ids, dues, errors)
        rows = None if cols.origin is None else cols.origin.tolist()
        return BatchOutcome.spread(n, rows, ids, dues, errors, refused)

    def _schedule_checked(
        self, n: int, cols: Columns, errors: dict[int, DelayqError], now: int, counted: bool
    ) -> BatchOutcome:
        """A batch some of whose rows ask for a key or dedup check (``KeySchedule``)."""
        with self._life.held() as sh:
            epoch = sh.admit("messages")
            got = sh.keyschedule.schedule(cols, now, counted)
            if len(sh.state.enqueue_q) >= HELP_LINK:
                sh.stages.link.help()
        sh.acked(got.end, epoch, "messages")
        if cols.origin is None:  # row k is message k
            errors.update(got.errors)
            return BatchOutcome(got.ids, got.deliver_at_ms, errors, got.outcomes)
        rows = cols.origin.tolist()
        ids: list[str | None] = [None] * n
        dues = [0] * n
        outcomes = {}
        for k, i in enumerate(rows):
            ids[i], dues[i] = got.ids[k], got.deliver_at_ms[k]
            if k in got.errors:
                errors[i] = got.errors[k]
            if k in got.outcomes:
                outcomes[i] = got.outcomes[k]
        return BatchOutcome(ids, dues, errors, outcomes)

    # ------------------------------------------------------------------ by id
    def cancel(self, ids: Sequence[str]) -> list[CancelOutcome | DelayqError]:
        """See ``Engine.cancel``."""
        now = self._clock.now_ms()
        with self._life.held() as sh:
            epoch = sh.admit("ids")
            local = local_ids(sh, ids)
            cols, errors = MessageId.parse_columns(local)
            out, end = sh.byid.cancel(local, cols, errors, now)
        sh.acked(end, epoch, "ids")
        return out

    def reschedule(
        self, message_id: str, *, deliver_at_ms: int | None = None, delay_ms: int | None = None
    ) -> ScheduleOutcome:
        """See ``Engine.reschedule``."""
        MessageId.parse(message_id, "id")
        now = self._clock.now_ms()
        resolve_due(deliver_at_ms, delay_ms, now, self._settings)  # argument errors come first
        with self._life.held() as sh:
            epoch = sh.admit("id")
            mid = MessageId.parse(local_ids(sh, [message_id])[0], "id")
            result, end = sh.byid.reschedule(mid, deliver_at_ms, delay_ms, now)
        sh.acked(end, epoch, "id")
        return result

    def lookup(self, message_id: str) -> LookupResult:
        """See ``Engine.lookup``."""
        MessageId.parse(message_id, "id")
        with self._life.held() as sh:
            local = local_ids(sh, [message_id])[0]
            return sh.byid.lookup(MessageId.parse(local, "id"), local)

    # ------------------------------------------------------------------ by key
    def lookup_key(self, topic: str, key: str) -> list[LookupResult | Forwarded]:
        """See ``Engine.lookup_key``."""
        _check_by_key(topic, [key])
        now = self._clock.now_ms()
        with self._life.held() as sh:
            return sh.bykey.lookup(topic, key, now)

    def cancel_keys(
        self, topic: str, keys: Sequence[str], moved: list[tuple[int, Forwarded]] | None = None
    ) -> list[int | DelayqError]:
        """See ``Engine.cancel_keys``."""
        check_topic(topic, "topic")
        out: list[int | DelayqError] = [0] * len(keys)
        good: list[int] = []  # rows of well-formed keys; a malformed one: its error
        for i, key in enumerate(keys):
            try:
                check_key(key, f"keys[{i}]")
                good.append(i)
            except InvalidArgument as exc:
                out[i] = exc
        now = self._clock.now_ms()
        handed: list[tuple[int, Forwarded]] = []
        with self._life.held() as sh:
            epoch = sh.admit("keys")
            counts, end = sh.bykey.cancel(topic, [keys[i] for i in good], now, handed)
        sh.acked(end, epoch, "keys")
        for i, n in zip(good, counts, strict=True):
            out[i] = n
        if moved is not None:
            moved += [(good[k], f) for k, f in handed]
        return out

    def reschedule_key(
        self, topic: str, key: str, *, deliver_at_ms: int | None = None, delay_ms: int | None = None
    ) -> list[ScheduleOutcome | Forwarded]:
        """See ``Engine.reschedule_key``."""
        _check_by_key(topic, [key])
        now = self._clock.now_ms()
        resolve_due(deliver_at_ms, delay_ms, now, self._settings)  # argument errors come first
        with self._life.held() as sh:
            epoch = sh.admit("key")
            outs, end = sh.bykey.reschedule(topic, key, deliver_at_ms, delay_ms, now)
        sh.acked(end, epoch, "key")
        return outs


def _check_by_key(topic: str, keys: Sequence[str]) -> None:
    """A by-key call's arguments: a valid topic and keys (``keychecks.check_key``)."""
    check_topic(topic, "topic")
    for i, key in enumerate(keys):
        check_key(key, "key" if len(keys) == 1 else f"keys[{i}]")


def local_ids(sh: OpenShard, ids: Sequence[str]) -> list[str]:
    """``ids`` with those of messages moved here (ids the import index knows: of
    other shards, or of this one for a message that left and came back) replaced
    by the id of their copy here. Lock held."""
    st, shard = sh.state, sh.setup.settings.shard
    if not len(st.imports):
        return list(ids)
    out = list(ids)
    for i, mid in enumerate(parse_ids(ids)):
        if mid is not None:  # (one of this shard's own: a message that came back)
            had = st.imports.get(mid)
            if had is not None:
                out[i] = str(MessageId(shard, *had))
    return out


def parse_ids(texts: Sequence[str]) -> list[MessageId | None]:
    """The ids parsed together (None where malformed: the call names it later)."""
    cols, errors = MessageId.parse_columns(texts)
    return [None if i in errors else MessageId(*c) for i, c in enumerate(cols.tolist())]
