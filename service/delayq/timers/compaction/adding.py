"""Adding a compaction block (``engine.Moving.add_block``, the admin ``AddBlock``): the
shard's side of ``delayq-spark compact``, which takes rolled far-future messages
out of the roll cycle (``compaction.loading`` holds them and loads them).

A call names one block, ``[start_ms, end_ms)``, and rows of this shard's pending
messages due in it (their ids, and the topic, due time and roll count the export
gave; the first two are checked against the message). The content of each
message comes from its own SCHEDULE record (in the log or kept), never from the
caller. Per row: BLOCKED (now), ALREADY_BLOCKED (by an earlier call, or named
twice), NOT_PENDING (cancelled, delivered, rescheduled or released since the
export: skipped), or an error (not this shard's, no such message, a topic or due
time other than the message's, a due time outside the block).

The messages blocked are written as BLOCK records (at most
``tuning.BLOCK_RECORD_BYTES`` of copies each, in due order) in one append, then
applied exactly as recovery and replicas apply them (``blocks.added``).

A block must start at least two windows ahead: every timer entry its messages
have then fires before the block loads (a window before its start), so none is
rolled again, and a block already loaded (its start less than a window ahead) is
never added to again (a job re-run after the load is refused). Called with the
shard's lock held; the caller makes the returned CommitLog end durable.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ... import formats
from ...batchops import first_of_each
from ...errors import DelayqError, InvalidArgument, NotFound
from ...formats.messagestate import BLOCKED, PENDING
from ...ids import MessageId
from ..memory.topics import TopicBook
from ..tuning import BLOCK_RECORD_BYTES
from .loading import LoadingState, added

__all__ = ["MAX_JOB_BYTES", "AddingState", "BlockOutcome", "BlockRow", "add_block"]

MAX_JOB_BYTES = 200  # a job's name, as stored in each BLOCK record
_SCHEDULE = int(formats.RecordType.SCHEDULE)
_MAX_ROLLS = 0xFFFF


class AddingState(LoadingState, Protocol):
    """What adding a compaction block uses of the shard's state: loading's part
    (an added block may load at once) and the topics."""

    topics: TopicBook


class BlockOutcome(enum.Enum):
    BLOCKED = "blocked"  # in the block now
    ALREADY_BLOCKED = "already_blocked"  # in a block before this row (a re-run job)
    NOT_PENDING = "not_pending"  # cancelled, delivered, rescheduled or moved: skipped


@dataclass(frozen=True, slots=True)
class BlockRow:
    """A message to put in a block: its id here, and its topic, due time and roll
    count as the export gave them (the topic and due time must be the message's)."""

    id: str
    topic: str
    deliver_at_ms: int
    roll_count: int = 0


def add_block(
    st: AddingState, job: str, start_ms: int, end_ms: int, rows: Sequence[BlockRow], now: int
) -> tuple[list[BlockOutcome | DelayqError], int]:
    """Put these rows' messages in block ``[start_ms, end_ms)``; an outcome per row
    and the CommitLog end to wait for (0: nothing written)."""
    _check_call(st, job, start_ms, end_ms, now)
    cols, errors = MessageId.parse_columns([r.id for r in rows], "rows")
    # every row starts as NOT_PENDING; those still so after the checks are looked up
    out: list[BlockOutcome | DelayqError] = [
        errors.get(i, BlockOutcome.NOT_PENDING) for i in range(len(rows))
    ]
    _check_rows(st, rows, cols[:, 0], start_ms, end_ms, out)
    at = np.array([i for i, o in enumerate(out) if o is BlockOutcome.NOT_PENDING], np.int64)
    if not len(at):
        return out, 0
    cols_read = st.cl.read_scheduled(cols[at, 2])
    heads, ok = cols_read.heads, cols_read.ok.copy()
    ok &= (heads["type"] == _SCHEDULE) & (heads["epoch"] == cols[at, 1])
    names = st.topics.names
    for k, i in enumerate(at.tolist()):
        if not ok[k]:
            out[i] = NotFound(f"rows[{i}].id", "no such message")
        elif names.get(int(heads["topic_id"][k])) != rows[i].topic:
            out[i] = InvalidArgument(f"rows[{i}].topic", "is not the message's topic")
            ok[k] = False
        elif int(heads["deliver_at_ms"][k]) != rows[i].deliver_at_ms:
            due = int(heads["deliver_at_ms"][k])
            out[i] = InvalidArgument(f"rows[{i}].deliver_at_ms", f"the message is due at {due}")
            ok[k] = False
    found = np.flatnonzero(ok)  # (the seqs of the rest are junk: never looked up)
    state = st.states.raw_many(heads["seq"][found])
    take = (state == PENDING) & first_of_each(heads["seq"][found])
    for k in found[~take & ((state == BLOCKED) | (state == PENDING))].tolist():
        out[int(at[k])] = BlockOutcome.ALREADY_BLOCKED
    picked = found[take]
    for k in picked.tolist():
        out[int(at[k])] = BlockOutcome.BLOCKED
    if not len(picked):
        return out, 0
    picked = picked[np.argsort(heads["deliver_at_ms"][picked], kind="stable")]
    rolls = [min(rows[int(at[k])].roll_count + 1, _MAX_ROLLS) for k in picked.tolist()]
    _write(st, job, start_ms, end_ms, cols_read, cols[at, 2], picked, rolls, now)
    st.counters["blocked"] += len(picked)
    return out, st.cl.end


def _check_rows(
    st: AddingState,
    rows: Sequence[BlockRow],
    shards: np.ndarray,
    start_ms: int,
    end_ms: int,
    out: list[BlockOutcome | DelayqError],
) -> None:
    """Refuse in ``out`` the rows of another shard or due outside the block."""
    me = st.settings.shard
    for i, r in enumerate(rows):
        if isinstance(out[i], DelayqError):
            continue
        if int(shards[i]) != me:
            out[i] = InvalidArgument(
                f"rows[{i}].id", f"names shard {shards[i]}; this is shard {me}"
            )
        elif not start_ms <= r.deliver_at_ms < end_ms:
            out[i] = InvalidArgument(
                f"rows[{i}].deliver_at_ms",
                f"{r.deliver_at_ms} is not in the block [{start_ms}, {end_ms})",
            )


def _check_call(st: AddingState, job: str, start_ms: int, end_ms: int, now: int) -> None:
    if not job or len(job.encode()) > MAX_JOB_BYTES:
        raise InvalidArgument("job", f"name the job (1 to {MAX_JOB_BYTES} bytes)")
    if end_ms <= start_ms:
        raise InvalidArgument("end_ms", f"{end_ms} is not after start_ms ({start_ms})")
    ahead = 2 * st.settings.window_ms
    if start_ms < now + ahead:
        raise InvalidArgument(
            "start_ms",
            f"a block must start at least two wheel windows ({ahead} ms) from now "
            f"({now}); {start_ms} is {start_ms - now} ms ahead",
        )


def _write(
    st: AddingState,
    job: str,
    start_ms: int,
    end_ms: int,
    cols: formats.MessageColumns,
    positions: np.ndarray,
    picked: np.ndarray,
    rolls: list[int],
    now: int,
) -> None:
    """Write the BLOCK records of the messages at rows ``picked`` of ``cols`` (their
    SCHEDULE records, at ``positions``), then apply them (``blocks.added``)."""
    heads = cols.heads[picked]
    rows = picked.tolist()
    copies, offsets, lengths = formats.encode_messages(
        formats.RecordType.ROLL,
        heads["seq"],
        heads["deliver_at_ms"],
        heads["accepted_ms"],
        heads["epoch"],
        heads["topic_id"],
        rolls,
        [cols.keys[k].encode() for k in rows],
        [cols.headers[k] for k in rows],
        [cols.bodies[k] for k in rows],
        heads["replaces_seq"],
        positions[picked],
    )
    ends = (offsets + lengths).tolist()
    records = [
        formats.encode_block(
            start_ms, end_ms, now, job, copies[int(offsets[a]) : ends[b - 1]], b - a
        )
        for a, b in _parts(lengths)
    ]
    base = st.cl.append(b"".join(records), now)
    for record in records:
        block, size = formats.decode(record)
        assert isinstance(block, formats.Block)
        added(st, block, base)
        base += size


def _parts(lengths: np.ndarray) -> list[tuple[int, int]]:
    """Runs ``[a, b)`` of the copies, each at most ``BLOCK_RECORD_BYTES`` (or one)."""
    out: list[tuple[int, int]] = []
    a, size = 0, 0
    for i, n in enumerate(lengths.tolist()):
        if i > a and size + n > BLOCK_RECORD_BYTES:
            out.append((a, i))
            a, size = i, 0
        size += n
    out.append((a, len(lengths)))
    return out
