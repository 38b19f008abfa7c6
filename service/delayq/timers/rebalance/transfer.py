"""Moving messages between shards (a rebalance): ``release`` on the source, then
``import_rows`` on the target.

- ``release`` hands pending messages over to shard T: one CANCELS record with
  ``forward_to`` = 1 + T ends them here (state FORWARDED to T: ``formats.messagestate``,
  any shard the shard map allows), so this shard never delivers them; a call by
  their id here is passed on to T (``Forwarded``).
  Releasing a message already forwarded to T again is a no-op (a re-run job).
- ``import_rows`` schedules copies of released messages, each with its source id in
  the ``delayq-moved-from`` header and indexed by it (``memory.importindex``): the same source
  imported again returns the copy it already has. A message due in the past is
  due now.

Release first, import second: a message is never pending on two shards, so it is
never delivered by both; between the two steps (a job that died) it waits, and the
job's re-run imports it (the export lists forwarded messages too). Both steps are
made durable (fsynced, and held by the in-sync replicas) before they answer,
whatever the shard's flush policy. Called with the shard's lock held.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ... import formats
from ...batchops import first_of_each, take_rows
from ...errors import DelayqError, FailedPrecondition, InvalidArgument
from ...formats.headers import encode_headers
from ...formats.imports import MOVED_FROM, moved_from
from ...formats.keyheaders import split_dedup
from ...formats.messagestate import (
    BLOCKED,
    FORWARD_BASE,
    MAX_FORWARD_SHARD,
    PENDING,
    MessageState,
    forward_state,
    is_live,
)
from ...ids import MessageId
from ...types import ScheduleRequest
from ..byid import ByIdState, scheduled_heads
from ..columns import Columns, Prepare, prepare_copy
from ..memory.importindex import ImportIndex
from ..stages.accept import Acceptor

__all__ = ["ImportRow", "Moves", "ReleaseOutcome", "TransferState"]

_DELIVERED = int(MessageState.DELIVERED)


class TransferState(ByIdState, Protocol):
    """What a rebalance transfer uses of the shard's state: the by-id part (it
    cancels what it moves) and the import index."""

    imports: ImportIndex


class ReleaseOutcome(enum.Enum):
    RELEASED = "released"  # forwarded to the target (now, or by an earlier release)
    ALREADY_DELIVERED = "already_delivered"  # stays here: it was delivered first
    ALREADY_CANCELLED = "already_cancelled"  # cancelled or rescheduled first
    NOT_FOUND = "not_found"


@dataclass(frozen=True, slots=True)
class ImportRow:
    """A released message to import: its id on the source and its content."""

    source_id: str
    topic: str
    body: bytes
    deliver_at_ms: int
    key: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)


class Moves:
    def __init__(self, state: TransferState, acceptor: Acceptor, prepare: Prepare) -> None:
        """``prepare``: the engine's validation of one request (``columns.Prepare``)."""
        self._state = state
        self._acceptor = acceptor
        self._prepare = prepare

    def release(
        self,
        cols: np.ndarray,
        errors: Mapping[int, DelayqError],
        target: int,
        now: int,
    ) -> tuple[list[ReleaseOutcome | DelayqError], int]:
        """Forward the pending messages of these ids (parsed: ``cols``) to shard
        ``target``; return an outcome per id and the CommitLog end to wait for."""
        st = self._state
        if target == st.settings.shard:
            raise InvalidArgument("target", f"shard {target} is this shard")
        if not 0 <= target <= MAX_FORWARD_SHARD:
            raise InvalidArgument("target", f"shards are 0..{MAX_FORWARD_SHARD}, not {target}")
        forwarded = forward_state(target)
        out: list[ReleaseOutcome | DelayqError] = [ReleaseOutcome.NOT_FOUND] * len(cols)
        for i, exc in errors.items():
            out[i] = exc
        rows, heads = scheduled_heads(st, cols, errors)
        pos = cols[:, 2]
        state = st.states.raw_many(heads["seq"])
        hit = is_live(state) & first_of_each(heads["seq"])
        for i, s in zip(rows.tolist(), state.tolist(), strict=True):
            if s in (PENDING, BLOCKED, forwarded):
                out[i] = ReleaseOutcome.RELEASED
            elif s >= FORWARD_BASE:
                out[i] = FailedPrecondition(
                    f"ids: {MessageId(*cols[i].tolist())} was moved to shard "
                    f"{s - FORWARD_BASE}, not {target}"
                )
            elif s == _DELIVERED:
                out[i] = ReleaseOutcome.ALREADY_DELIVERED
            else:
                out[i] = ReleaseOutcome.ALREADY_CANCELLED
        if not hit.any():
            return out, 0
        gone, at = take_rows(heads, hit), pos[rows[hit]]
        st.cl.append(
            formats.encode_cancels(
                gone["seq"], at, gone["topic_id"], now, gone["deliver_at_ms"], 1 + target
            ),
            now,
        )
        st.left_pending(gone["seq"], gone["topic_id"], gone["deliver_at_ms"], forwarded)
        st.counters["released"] += len(gone)
        return out, st.cl.end

    def import_rows(
        self, rows: Sequence[ImportRow], now: int
    ) -> tuple[list[str | DelayqError], int]:
        """Schedule a copy of each row not imported before; the id of each row's copy
        (or its error) and the CommitLog end to wait for."""
        st = self._state
        here = st.settings.shard
        out: list[str | DelayqError] = [""] * len(rows)
        # ids parsed together: one at a time costs more than the rest of an import
        sources, bad = MessageId.parse_columns([r.source_id for r in rows], "messages")
        keys = [tuple(k) for k in sources.tolist()]
        fresh: dict[tuple[int, ...], int] = {}  # source -> row, first of each
        markers: list[str] = []  # each item's MOVED_FROM: its old ids
        items = []
        at: list[int] = []
        for i, r in enumerate(rows):
            try:
                if i in bad:
                    raise InvalidArgument(f"messages[{i}].source_id", bad[i].message)
                key = keys[i]
                if key[0] == here:
                    raise InvalidArgument(f"messages[{i}].source_id", "names this shard")
                had = st.imports.get(MessageId(*key))
                if had is not None:
                    out[i] = str(MessageId(here, *had))
                    continue
                if key in fresh:
                    continue  # named twice: answered with the first's copy below
                # carried on as they were (an earlier record's window, its acceptance
                # unknown here: from the copy's, as before the end was stored absolute)
                headers, dedup = split_dedup(r.headers)
                headers.pop(MOVED_FROM, None)
                req = ScheduleRequest(
                    topic=r.topic,
                    body=r.body,
                    key=r.key,
                    headers=headers,
                    deliver_at_ms=max(r.deliver_at_ms, now),
                )
                item = prepare_copy(self._prepare, req, dedup, now, f"messages[{i}].")
            except DelayqError as exc:
                out[i] = exc
                continue
            marker = moved_from(r.headers.get(MOVED_FROM, ""), r.source_id)
            items.append(item._replace(headers=item.headers + encode_headers({MOVED_FROM: marker})))
            markers.append(marker)
            fresh[key] = i
            at.append(i)
        end = 0
        if items:
            ids, _, refused, end = self._acceptor.accept(Columns.of(items), now, counted=False)
            written = [k for k in range(len(at)) if ids[k] is not None]
            copies, _ = MessageId.parse_columns([ids[k] or "" for k in written])
            for k, (_, epoch, pos) in zip(written, copies.tolist(), strict=True):
                i = at[k]
                out[i] = ids[k] or ""
                older = markers[k].split()
                for text in older[:-1]:  # moved before: rare, parsed one by one
                    st.imports.note(pos, epoch, {MOVED_FROM: text})
                st.imports.add(MessageId(*keys[i]), epoch, pos)
            for k, i in enumerate(at):
                if ids[k] is None:
                    out[i] = refused[k]
            st.counters["imported"] += len(written)
        for i in range(len(rows)):  # a source named twice: the first's answer
            if out[i] == "":
                out[i] = out[fresh[keys[i]]]
        return out, end
