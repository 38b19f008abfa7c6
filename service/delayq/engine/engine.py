"""The Engine: one shard's timer pipeline over its files, in process.

Stages, joined by bounded hand-offs::

    accept   (caller's thread) validate; append SCHEDULE records to the CommitLog;
             put the entries on the enqueue queue (bound: enqueue_queue_messages,
             full -> Congested with a retry hint)
    enqueue  write TimerLog records, then point wheel slots at them; far-future
             messages are parked at the far end of the window (ROLL); messages of
             slots about to fire are also kept in memory (the near rows)
    scan     when a slot's start time comes, take its near rows if they are its
             whole chain, else walk the chain; drop cancelled and delivered
             messages (state map); re-park ROLL entries; push the rest into the
             release buffer (bound: release_buffer_messages)
    release  at each message's exact millisecond append DELIVER records, index them
             in the topic's ready queue and wake receivers
    flush    every flush_interval_ms: fsync, write the checkpoint, apply retention

Each stage retries only its own unfinished work: an entry leaves a queue only
once its stage has written it. With ``background=True`` every stage has a
thread; with ``background=False`` nothing runs until ``pump()`` is called, which
is how tests drive years of fake-clock time deterministically.

Locking: one lock (``_lock``) guards all in-memory state and every write to
the files. The GIL serialises Python anyway; stages hold the lock for in-memory
work and one batched write, and fsync runs outside it (group commit). Two reads
run without it: the scan walking a fired slot's chain (records that never
change) and a receive decoding the bodies it took.

Lifecycle: NEW -> RUNNING -> CLOSED. ``start()`` is idempotent; ``close()``
links what is queued, flushes and checkpoints; any call after it raises
``EngineClosed``.
"""

from __future__ import annotations

import collections
import contextlib
import enum
import fcntl
import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .. import formats
from ..clock import Clock, SystemClock, precise_waits
from ..delivery.consumers import Consumers
from ..delivery.groups import AckOutcome
from ..errors import (
    Congested,
    CorruptData,
    DelayqError,
    EngineClosed,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    StorageFull,
    no_space,
)
from ..formats.ready import ENTRY_DTYPE as READY_DTYPE
from ..formats.state import MessageState
from ..formats.timer import RECORD_DTYPE as TIMER_DTYPE
from ..formats.timer import TIMER_RECORD_SIZE, TimerRecord
from ..formats.timer import encode_many as encode_timers
from ..ids import MessageId
from ..pieces import join_rows, low, take_rows
from ..settings import EngineSettings, FlushPolicy
from ..store.checkpoint import Checkpoint, GroupCheckpoint
from ..store.commitlog import CommitLog
from ..store.segments import SegmentedLog, warm_pages
from ..store.statemap import StateMap
from ..store.timerlog import TimerLog
from ..store.wheel import TimerWheel
from .chainwalk import walk_chain
from .failures import FailureRun
from .groupcommit import GroupCommit
from .lateness import LatenessHistogram
from .pending import PENDING_DTYPE, EnqueueQueue, pending_batch
from .release import ReleaseBuffer, due_run, slot_run
from .retention import deletable_count
from .stageloop import run_stage
from .topics import TopicBook, by_topic
from .types import (
    BatchOutcome,
    CancelOutcome,
    LookupResult,
    ReceivedBatch,
    ReceivedMessage,
    ScheduleBatch,
    ScheduleOutcome,
    ScheduleRequest,
    TopicStats,
)
from .validation import (
    Columns,
    check_group,
    check_receive,
    check_topic,
    prepare,
    prepare_columns,
    resolve_due,
)
from .wheelmath import TimerKind, group_by_slot, overflowing

__all__ = ["Engine", "Lifecycle"]

log = logging.getLogger("delayq.engine")

_PENDING = int(MessageState.PENDING)
_DELIVERED = int(MessageState.DELIVERED)
_SCHEDULE = int(formats.RecordType.SCHEDULE)  # numpy compares a plain int 4x faster than an enum
# a cancel's outcome by code: 0 pending (cancelled now), 1 delivered, 2 cancelled or rescheduled
_CANCEL_OUTCOMES = (
    CancelOutcome.CANCELLED,
    CancelOutcome.ALREADY_DELIVERED,
    CancelOutcome.ALREADY_CANCELLED,
)
_RELEASE_BATCH = 8192  # DELIVER records per write: bounds how long release holds the lock
_ENQUEUE_BATCH = 16384  # entries linked per lock hold
_HELP_LINK = 8192  # queue length at which a scheduling caller links a batch itself
_LINK_GATHER_S = 0.01  # the link stage's pause between batches while work keeps coming
_LINK_URGENT_MS = 100  # a message due this soon wakes the link stage at once
_RELEASE_GATHER_AT = 64  # a release step this big (a burst) is followed by a gather:
_RELEASE_GATHER_S = 0.001  # steps of two ms of a burst cost little more than one
_RELEASE_TIMER_SLACK_NS = 1_000  # see _release_loop
# Slots this close ahead of the scan also keep their linked messages in memory (their
# pending rows): firing such a slot needs no chain walk, which cost ~20 ms of the GIL
# per slot of a few thousand messages in a server, spread over tens of ms of releases.
_NEAR_SLOTS = 32
# Slots a restart may resume before the last checkpoint's scan cursor: the scan lead
# (at most half a slot) plus the slot a late link lands in (see recovery's low slot).
_SCAN_LEAD_SLOTS = 2
_CHECKPOINT_BYTES = 32 << 20  # CommitLog growth that triggers a checkpoint early
# warm tails (see store.segments): read into the page cache ahead of the writers
_CL_WARM = 16 << 20
_TL_WARM = 4 << 20
RECEIVE_LOOK_AGAIN_S = 0.05  # a waiting receiver looks again this often (redeliveries)


def _cannot_use(data_dir: Path, exc: OSError) -> FailedPrecondition:
    """The error for a data directory whose files could not be opened or made."""
    where = f" ({exc.filename})" if exc.filename else ""
    hint = "; free space or grow the volume" if no_space(exc) else ""
    why = exc.strerror or str(exc)
    return FailedPrecondition(f"data directory {data_dir} cannot be used: {why}{where}{hint}")


class Lifecycle(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    CLOSED = "closed"


class Engine:
    def __init__(
        self, settings: EngineSettings, clock: Clock | None = None, *, background: bool = True
    ) -> None:
        self.settings = settings
        self.clock: Clock = clock or SystemClock()
        self._background = background
        self._life = Lifecycle.NEW
        self._lock = threading.RLock()  # see module docstring: one lock for all state
        # One condition per waiter, all on the one lock, so each event wakes only the
        # thread that has new work (notify_all on one condition woke every stage).
        self._link_cv = threading.Condition(self._lock)
        self._scan_cv = threading.Condition(self._lock)
        self._release_cv = threading.Condition(self._lock)
        self._received_cv = threading.Condition(self._lock)  # long-polling receivers
        self._receivable_hooks: list[Callable[[], None]] = []  # see on_receivable
        self._threads: list[threading.Thread] = []
        self._link_idle = False  # the link stage sleeps with nothing queued (lock held)
        self._scan_blocked = False  # the scan waits for room in the release buffer
        # The scan stays less than a window (less the scan lead) ahead of the scan cursor
        # of the last saved checkpoint, where a restart resumes: every slot linked since
        # then stays within the wheel's two windows of that point, so no unfired slot
        # shares its place with another after a kill. Past it, the scan waits for the
        # next checkpoint (the flush stage's, or pump's own).
        self._durable_scan_from = 0  # set on open
        self._scan_awaits_checkpoint = False
        self._released_last = 0  # messages the last release step delivered
        # when the release stage next wakes (None: idle); read without the lock by
        # the chain walk, to let release run first once it is due (see chainwalk)
        self._release_wake_ms: int | None = None
        self._fill_bound = 0  # >= the count of the fullest wheel slot (set on open)
        self._fill_checked_ms = 0  # when the wheel was last passed for that bound
        self._flush_soon = threading.Event()  # wakes the flush stage before its interval
        self._warm_soon = threading.Event()  # a log has a new warm tail to read in
        self._checkpointed_end = 0  # CommitLog end covered by the last checkpoint
        # every SCHEDULE record of a seq below this is in a deleted CommitLog segment
        # (seqs ascend with positions); learnt from deletions, so 0 after a start
        self._schedules_gone_below = 0
        # one checkpoint at a time (the flush stage's and a caller's): they write the
        # same file, and retention deletes segments outside the engine lock
        self._checkpoint_lock = threading.Lock()
        self._stop = False
        # in-memory state, filled by _open()
        self._enqueue_q = EnqueueQueue()
        self._release = ReleaseBuffer()
        self._scan_cursor = 0
        # lowest slot fired but not yet in the release buffer (its chain is read with
        # the lock let go): a checkpoint must not resume the scan past it
        self._reading_slot: int | None = None
        # slot -> its linked messages as pending rows, for slots within
        # _NEAR_SLOTS of the scan (see _keep_near); at most release_buffer_messages
        self._near: dict[int, list[np.ndarray]] = {}
        self._near_rows = 0
        self._next_seq = 1
        self.topics = TopicBook()
        self.counters: collections.Counter[str] = collections.Counter()
        self.lateness_histogram = LatenessHistogram()  # of released messages
        self.recovery: dict[str, Any] = {}

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Engine:
        with self._lock:
            if self._life is Lifecycle.RUNNING:
                return self
            if self._life is Lifecycle.CLOSED:
                raise EngineClosed("engine was closed; open a new Engine")
            self._open()
            self._life = Lifecycle.RUNNING
        if self._background:
            for name, loop in (
                ("enqueue", self._enqueue_loop),
                ("scan", self._scan_loop),
                ("release", self._release_loop),
                ("flush", self._flush_loop),
                ("warm", self._warm_loop),
            ):
                t = threading.Thread(target=loop, name=f"delayq-{name}", daemon=True)
                t.start()
                self._threads.append(t)
        return self

    @property
    def running(self) -> bool:
        """Opened (recovered) and not closed: calls are taken."""
        return self._life is Lifecycle.RUNNING and not self._stop

    def __enter__(self) -> Engine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> dict[str, int]:
        """Stop the stages, link what is queued, flush and checkpoint.

        Returns what was left undelivered in memory (it is safe on disk and
        resumes on the next open)."""
        with self._lock:
            if self._life is not Lifecycle.RUNNING:
                self._life = Lifecycle.CLOSED
                return {}
        self._stop_threads()
        try:
            with self._lock:
                while self._enqueue_q and self._link_step():
                    pass
            self.checkpoint()
        except Exception:  # a full disk, say: close as a kill would, nothing is lost
            log.exception("closing without a final checkpoint; the next start replays the log")
            with contextlib.suppress(OSError):
                self._cl.sync()  # what was written is safe from a power loss too, if it can be
            killed = True
        else:
            killed = False
        with self._lock:
            left = {"enqueue_queue": len(self._enqueue_q), "release_buffer": len(self._release)}
            self._close_files(killed=killed)
        log.info("engine closed", extra={"left": left})
        return left

    def abandon(self) -> None:
        """Drop the engine as if its process had been killed: no flush, no checkpoint.

        Everything already written stays in the OS page cache, exactly as after
        SIGKILL. For crash tests and tools; the engine is CLOSED afterwards."""
        self._stop_threads()
        with self._lock:
            self._close_files(killed=True)

    def _stop_threads(self) -> None:
        with self._lock:
            self._stop = True
            for cv in (self._link_cv, self._scan_cv, self._release_cv, self._received_cv):
                cv.notify_all()
        self._flush_soon.set()
        self._warm_soon.set()
        for t in self._threads:
            t.join()

    def _close_files(self, *, killed: bool = False) -> None:
        self._life = Lifecycle.CLOSED
        self._cl.close(cut_tail=not killed)  # a kill leaves the warm tails, as SIGKILL does
        self._tl.close(cut_tail=not killed)
        self._wheel.close()
        self._states.close()
        self.consumers.close(write_tails=not killed)  # a kill loses what is in memory
        os.close(self._lock_fd)

    def _check_running(self) -> None:
        if not self.running:
            raise EngineClosed("engine is not running")

    def _open(self) -> None:
        from .recovery import recover

        s = self.settings
        d = Path(s.data_dir)
        try:
            d.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(d / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:  # a file in the way, no permission, a read-only disk
            raise _cannot_use(d, exc) from exc
        self._dir = d
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(self._lock_fd)
            raise FailedPrecondition(
                f"data directory {d} is in use by another delayq process"
            ) from exc
        # A failed open (corrupt data, another shard's directory, ...) closes what it
        # opened and lets go of the lock: the directory can be opened again at once.
        try:
            with contextlib.ExitStack() as undo:
                undo.callback(os.close, self._lock_fd)
                now = self.clock.now_ms()
                warm = self._warm_soon.set
                self._cl = CommitLog(
                    d / "commitlog", s.commitlog_segment_bytes, warm_bytes=_CL_WARM, on_cold=warm
                )
                undo.callback(self._cl.close, cut_tail=False)
                self._tl = TimerLog(
                    d / "timerlog", s.timerlog_segment_bytes, warm_bytes=_TL_WARM, on_cold=warm
                )
                undo.callback(self._tl.close, cut_tail=False)
                self._wheel = TimerWheel(d / "timerwheel", 2 * s.window_slots, s.precision_ms, now)
                undo.callback(self._wheel.close)
                self._states = StateMap(d / "state", now)
                undo.callback(self._states.close)
                (d / "ready").mkdir(exist_ok=True)
                self.consumers = Consumers(d / "ready", self._cl, s.shard, self._quarantine)
                undo.callback(self.consumers.close, write_tails=False)
                self.recovery = recover(self)
                self._cl.log.prepare(now)
                self._tl.log.prepare(now)
                self._states.prepare(self._next_seq)
                undo.pop_all()
        except OSError as exc:  # no space, no permission, an I/O error: one clear line
            raise _cannot_use(d, exc) from exc
        self._checkpointed_end = self._cl.end
        self._durable_scan_from = self._scan_cursor  # where a restart would resume now
        self._fill_bound = self._wheel.max_num_all()
        self._commit = GroupCommit(self._prepare_commit, self._cl.end)
        log.info("engine open", extra={"data_dir": str(d), "recovery": self.recovery})

    # ------------------------------------------------------------------ accept
    def schedule(self, requests: Sequence[ScheduleRequest]) -> list[ScheduleOutcome]:
        """Schedule a batch; one outcome per request (an id, or a per-item error).

        Raises ``Congested`` (nothing written) when the enqueue queue is full."""
        reqs = list(requests)
        ats = [r.deliver_at_ms for r in reqs]
        delays = [r.delay_ms for r in reqs]
        # both given is an error ``prepare`` words; None is "not given" (0 in columns)
        both = [
            i
            for i, (a, d) in enumerate(zip(ats, delays, strict=True))
            if a is not None and d is not None
        ]
        batch = ScheduleBatch(
            topic=[r.topic for r in reqs],
            bodies=[r.body for r in reqs],
            deliver_at_ms=[a or 0 for a in ats] if any(a is not None for a in ats) else None,
            delay_ms=[d or 0 for d in delays] if any(d is not None for d in delays) else None,
            keys=[r.key for r in reqs],
            headers=[r.headers for r in reqs],
        )
        return self._schedule(batch, reqs.__getitem__, both).outcomes()

    def schedule_batch(
        self, batch: ScheduleBatch, *, row: Callable[[int], ScheduleRequest] | None = None
    ) -> BatchOutcome:
        """Schedule many messages given as columns (the bulk fast path): same rules,
        ids and errors as ``schedule``, without an object per message. ``row(i)``,
        if given, is message i as a request, for the rows the fast checks leave to
        full validation (default: rebuilt from the columns, 0 meaning "not given").

        Raises ``InvalidArgument`` for a malformed batch (columns of different
        lengths, an invalid single topic) and ``Congested`` when the queue is full."""
        return self._schedule(batch, row, ())

    def _schedule(
        self,
        batch: ScheduleBatch,
        row: Callable[[int], ScheduleRequest] | None,
        suspects: Sequence[int],
    ) -> BatchOutcome:
        now = self.clock.now_ms()
        cols, invalid = prepare_columns(batch, now, self.settings, row, suspects)
        errors: dict[int, DelayqError] = dict(invalid)
        with self._lock:
            self._check_running()
            ids, dues, refused, end = self._accept(cols, now)
            if len(self._enqueue_q) >= _HELP_LINK:
                self._help_link()
        self._made_durable(end)
        if cols.origin is None and not refused:
            return BatchOutcome(ids, dues, errors)
        n = len(batch.bodies)
        rows = range(n) if cols.origin is None else cols.origin.tolist()
        all_ids: list[str | None] = [None] * n
        all_dues = [0] * n
        for k, i in enumerate(rows):  # rows refused by validation keep None and 0
            all_ids[i], all_dues[i] = ids[k], dues[k]
            if k in refused:
                errors[i] = refused[k]
        return BatchOutcome(all_ids, all_dues, errors)

    def _help_link(self) -> None:
        """Caller runs (lock held): locks are not fair, so a busy producer could starve
        the link thread; once the queue is long the producer links a batch itself.
        Its own messages are accepted by then, so a failure here must not fail its
        call: the batch stays queued and the link stage retries (and logs) it."""
        try:
            self._link_step()
        except Exception:
            log.debug("linking on a caller's thread failed; the link stage retries", exc_info=True)

    def _accept(
        self, cols: Columns, now: int, replaces: int = 0, replaces_pos: int = -1
    ) -> tuple[list[str | None], list[int], dict[int, DelayqError], int]:
        """Append SCHEDULE records for validated rows and queue them (lock held).
        Returns an id per row (None where refused), the rows' due times, the
        refusals by row, and the CommitLog end to wait for."""
        s = self.settings
        n = len(cols.bodies)
        if not n:
            return [], [], {}, 0
        if n > s.enqueue_queue_messages:
            raise InvalidArgument(
                "messages",
                f"a batch of {n} can never fit the accept queue "
                f"({s.enqueue_queue_messages} messages); send smaller batches",
            )
        if len(self._enqueue_q) + n > s.enqueue_queue_messages:
            self.counters["congested_queue"] += n
            self._link_cv.notify()  # drain now, not after the link stage's gather
            raise Congested(
                f"enqueue queue full ({len(self._enqueue_q)} messages waiting)",
                retry_after_ms=max(10, s.flush_interval_ms // 10),
            )
        all_dues = cols.deliver_at_ms.tolist()
        refused = self._over_slot_limit(cols.deliver_at_ms, now)
        keep = cols
        if refused:
            mask = np.ones(n, dtype=bool)
            mask[list(refused)] = False
            if not mask.any():
                return [None] * n, all_dues, refused, 0
            keep = cols.take(np.flatnonzero(mask))._replace(origin=None)
        dues = keep.deliver_at_ms
        new_topics: dict[str, int] = {}
        tids: int | list[int] = self._topic_ids_of(keep.topics, new_topics)
        m = len(keep.bodies)
        seqs = np.arange(self._next_seq, self._next_seq + m, dtype=np.uint64)
        buf, offsets, sizes = formats.encode_messages(
            formats.RecordType.SCHEDULE,
            seqs,
            dues,
            now,
            s.epoch,
            tids,
            0,
            keep.keys,
            keep.headers,
            keep.bodies,
            replaces,
            replaces_pos,
            keep.body_sizes,
        )
        # TOPIC records of new topics go first
        prefix = b"".join(formats.encode_topic(t, name) for name, t in new_topics.items())
        try:
            base = self._cl.append(prefix + buf if prefix else buf, now) + len(prefix)
        except StorageFull:
            self.counters["congested_disk"] += m
            raise
        # written: only now do the seqs and new topics exist (a failed append left no
        # gap of seqs that would read as pending forever, no topic without its record)
        self._next_seq += m
        for name, topic_id in new_topics.items():
            self.topics.define(topic_id, name)
        if self._cl.end - self._checkpointed_end > _CHECKPOINT_BYTES:
            self._flush_soon.set()
        positions = offsets + base
        self._enqueue_q.put(pending_batch(positions, sizes, seqs, tids, dues))
        self.topics.accepted(tids, dues, now)
        ids: list[str | None] = list(MessageId.texts(s.shard, s.epoch, positions, ascending=True))
        self.counters["scheduled"] += m
        if self._link_idle or int(np.minimum.reduce(dues)) < now + _LINK_URGENT_MS:
            self._link_cv.notify()  # else the link stage, gathering, comes in its own time
        if refused:
            it = iter(ids)
            ids = [None if i in refused else next(it) for i in range(n)]
        return ids, all_dues, refused, self._cl.end

    def _topic_ids_of(self, topics: str | list[str], new: dict[str, int]) -> int | list[int]:
        """Topic ids (one, or one per row). Topics not seen before get the next ids,
        listed in ``new``: the caller defines them once their TOPIC records are written."""
        known = self.topics.ids
        for name in (topics,) if isinstance(topics, str) else set(topics):
            if name not in known:
                new[name] = self.topics.next_id() + len(new)
        if new:
            known = {**known, **new}
        if isinstance(topics, str):
            return known[topics]
        first = known[topics[0]]
        tids = list(map(known.__getitem__, topics))
        return first if tids.count(first) == len(tids) else tids

    def _over_slot_limit(self, dues: np.ndarray, now: int) -> dict[int, DelayqError]:
        """Refusals for messages whose wheel slot would pass ``slot_limit``, by index.
        Rolled messages are counted where they finally land, not here."""
        s = self.settings
        if self._fill_bound + len(dues) <= s.slot_limit:
            return {}  # the common case: even the fullest slot could take them all
        now_slot = now // s.precision_ms
        if int(low(dues)) // s.precision_ms >= now_slot + s.window_slots:
            return {}  # all beyond the window: rolled, counted where they land
        # The bound only grows as slots fill; a full pass of the wheel lowers it again.
        # A roll slot may hold more than the limit (its messages are re-parked, not
        # released) and keeps the bound high until it fires: then the exact check
        # below is what decides, and the pass is repeated at most once a second.
        if now - self._fill_checked_ms >= 1000:
            self._fill_bound, self._fill_checked_ms = self._wheel.max_num_all(), now
        slots = np.maximum(dues // s.precision_ms, now_slot)
        inside = np.nonzero(slots < now_slot + s.window_slots)[0]
        if not len(inside):
            return {}
        if self._wheel.max_num(slots[inside]) + len(inside) <= s.slot_limit:
            return {}  # even all of them in one slot would fit
        over = overflowing(
            slots[inside], now_slot, lambda uniq: self._wheel.read_many(uniq)[2], s.slot_limit
        )
        refused: dict[int, DelayqError] = {}
        for i in inside[over].tolist():
            why = f"the wheel slot of {int(dues[i])} is full (limit {s.slot_limit} messages)"
            refused[i] = Congested(why, s.precision_ms)
        self.counters["congested_slot"] += len(refused)
        return refused

    def _made_durable(self, end: int) -> None:
        if end and self.settings.flush is FlushPolicy.SYNC:
            self._commit.wait_durable(end)

    def _prepare_commit(self) -> tuple[int, list[int]]:
        with self._lock:
            return self._cl.end, self._cl.log.take_unsynced()

    # ------------------------------------------------------------------ cancel / lookup
    def _read_message(
        self, mid: MessageId, field: str, *, payload: bool = True
    ) -> tuple[formats.Message, int]:
        """The SCHEDULE record an id names (lock held); NotFound otherwise."""
        if mid.shard != self.settings.shard:
            raise NotFound(
                field,
                f"message id belongs to shard {mid.shard}; this is shard {self.settings.shard}",
            )
        try:
            rec, size = self._cl.read(mid.position, payload=payload)
        except CorruptData as exc:
            gone = mid.position < self._cl.log.start  # its segment was deleted, it not kept
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

    def cancel(self, ids: Sequence[str]) -> list[CancelOutcome | DelayqError]:
        """Cancel messages by id; durable once this returns. One outcome per id.
        Vectorised: ids parsed, records read (one pread per span), states checked
        and CANCEL records written for the whole batch at once."""
        now = self.clock.now_ms()
        s = self.settings
        cols, errors = MessageId.parse_columns(ids)
        out: list[CancelOutcome | DelayqError] = [CancelOutcome.NOT_FOUND] * len(ids)
        for i, exc in errors.items():
            out[i] = exc
        end = 0
        with self._lock:
            self._check_running()
            shard, epoch, pos = cols.T
            live = shard == s.shard
            if errors:
                live[list(errors)] = False
            rows = np.flatnonzero(live)
            heads, ok = self._cl.read_heads(pos[rows])
            ok &= (heads["type"] == _SCHEDULE) & (heads["epoch"] == epoch[rows])
            if not ok.all():
                rows, heads = rows[ok], take_rows(heads, ok)
            state = self._states.raw_many(heads["seq"])
            hit = state == _PENDING
            seqs = heads["seq"].tolist()
            if len(set(seqs)) < len(seqs):  # named twice: the first cancels, the rest see it
                first = np.zeros(len(rows), dtype=bool)
                first[np.unique(heads["seq"], return_index=True)[1]] = True
                hit &= first
            every = len(rows) > 0 and bool(hit.all())
            if every and len(rows) == len(ids):  # the usual call: every id cancels here
                out[:] = [CancelOutcome.CANCELLED] * len(ids)
            else:
                codes = np.where(hit, 0, np.where(state == _DELIVERED, 1, 2)).tolist()
                for i, code in zip(rows.tolist(), codes, strict=True):
                    out[i] = _CANCEL_OUTCOMES[code]
            if every or hit.any():
                if every:
                    gone, at = heads, pos[rows]
                else:
                    gone, at = take_rows(heads, hit), pos[rows[hit]]
                self._cl.append(
                    formats.encode_cancels(
                        gone["seq"], at, gone["topic_id"], now, gone["deliver_at_ms"]
                    ),
                    now,
                )
                end = self._cl.end
                self._left_pending(
                    gone["seq"], gone["topic_id"], gone["deliver_at_ms"], MessageState.CANCELLED
                )
                self.counters["cancelled"] += len(gone)
        self._made_durable(end)
        return out

    def _left_pending(
        self, seqs: np.ndarray, tids: np.ndarray, dues: np.ndarray, state: MessageState
    ) -> None:
        """Account for pending messages leaving by cancel or reschedule (lock held)."""
        self._states.set_many(seqs, state)
        self.topics.left(tids, dues, cancelled=state is MessageState.CANCELLED)

    def _left_pending_one(self, seq: int, tid: int, due: int, state: MessageState) -> None:
        self._left_pending(np.array([seq]), np.array([tid]), np.array([due]), state)

    def reschedule(
        self, message_id: str, *, deliver_at_ms: int | None = None, delay_ms: int | None = None
    ) -> ScheduleOutcome:
        """Atomically cancel a pending message and schedule its copy at a new time.

        One SCHEDULE record carries both (``replaces_seq``), so a crash leaves
        either the old or the new message pending, never both or neither.
        Returns the new id. Raises NotFound / FailedPrecondition / InvalidArgument."""
        mid = MessageId.parse(message_id, "id")
        now = self.clock.now_ms()
        resolve_due(deliver_at_ms, delay_ms, now, self.settings)  # argument errors come first
        with self._lock:
            self._check_running()
            rec, _ = self._read_message(mid, "id")
            state = self._states.get(rec.seq)
            if state is not MessageState.PENDING:
                raise FailedPrecondition(f"id: message is {state.name.lower()}, not pending")
            req = ScheduleRequest(
                topic=self.topics.names[rec.topic_id],
                body=rec.body,
                key=rec.key,
                headers=formats.decode_headers(rec.headers),
                deliver_at_ms=deliver_at_ms,
                delay_ms=delay_ms,
            )
            item = prepare(req, now, self.settings)
            ids, dues, refused, end = self._accept(
                Columns.of([item]), now, replaces=rec.seq, replaces_pos=mid.position
            )
            if refused:
                raise refused[0]
            result = ScheduleOutcome(ids[0], dues[0])
            self._left_pending_one(
                rec.seq, rec.topic_id, rec.deliver_at_ms, MessageState.RESCHEDULED
            )
            self.counters["rescheduled"] += 1
        self._made_durable(end)
        return result

    def lookup(self, message_id: str) -> LookupResult:
        mid = MessageId.parse(message_id, "id")
        with self._lock:
            self._check_running()
            rec, _ = self._read_message(mid, "id")
            state = self._states.get(rec.seq)
            topic = self.topics.names[rec.topic_id]
        return LookupResult(
            message_id,
            state,
            topic,
            rec.deliver_at_ms,
            rec.accepted_ms,
            rec.key,
            formats.decode_headers(rec.headers),
            rec.body,
        )

    # ------------------------------------------------------------------ enqueue stage
    def _link_step(self) -> bool:
        """Link up to one batch of queued entries into the wheel (lock held)."""
        batch = self._enqueue_q.peek(_ENQUEUE_BATCH)
        if batch is None:
            return False
        self._link(batch, self.clock.now_ms())  # raises before changing anything if it fails
        self._enqueue_q.drop(len(batch))  # only now: a retry redoes nothing that succeeded
        return True

    def _link(self, batch: np.ndarray, now: int) -> None:
        """Write TimerLog records for ``batch`` (a PENDING_DTYPE array), then point
        the wheel at them. Vectorised: records are grouped by slot, each group
        chained onto its slot's current head."""
        s = self.settings
        p, w = s.precision_ms, s.window_slots
        pending = self._states.raw_many(batch["seq"]) == _PENDING
        todo = batch if pending.all() else take_rows(batch, pending)  # read only below
        n = len(todo)
        if not n:
            return
        cursor = self._scan_cursor
        # Plan against the scan cursor, not the wall clock: while the scan catches up
        # (after downtime or a clock jump) every slot used stays within two windows of
        # the cursor, so no unfired slot is overwritten by a later lap.
        ref_slot = min(now, cursor * p) // p
        target = todo["deliver_at_ms"] // p
        inside = target < ref_slot + w
        slots = np.where(inside, np.maximum(target, ref_slot), ref_slot + w - 1)
        order, uniq, starts, counts = group_by_slot(slots, ref_slot)
        todo, slots, inside = take_rows(todo, order), slots[order], inside[order]
        first0, last0, num0 = self._wheel.read_many(uniq)
        pos0 = self._tl.log.reserve(n * TIMER_RECORD_SIZE, now)
        pos = pos0 + TIMER_RECORD_SIZE * np.arange(n, dtype=np.int64)
        recs = np.empty(n, dtype=TIMER_DTYPE)
        prev = np.empty(n, dtype=np.int64)
        prev[1:] = pos[:-1]
        prev[starts] = last0  # each group hangs off its slot's current head
        recs["prev"] = prev
        recs["slot"] = slots
        recs["cl_pos"] = todo["cl_pos"]
        recs["cl_size"] = todo["cl_size"]
        recs["topic_id"] = todo["topic_id"]
        recs["deliver_at_ms"] = todo["deliver_at_ms"]
        recs["seq"] = todo["seq"]
        rank = np.arange(n) - np.repeat(starts, counts)
        recs["chain_index"] = np.repeat(num0, counts) + rank
        recs["roll_count"] = todo["roll_count"]
        recs["kind"] = np.where(inside, int(TimerKind.NORMAL), int(TimerKind.ROLL))
        self._tl.append(encode_timers(recs), now)  # records first, then the slots pointing at them
        nums = num0 + counts
        self._wheel.update_many(
            uniq, np.where(first0 >= 0, first0, pos[starts]), pos[starts + counts - 1], nums
        )
        self._fill_bound = max(self._fill_bound, int(nums.max()))
        self._keep_near(todo, slots, inside, (uniq, starts, counts), cursor)
        late = slots < cursor  # slots that already fired: straight to release
        if late.any():
            self._release.push_run(due_run(take_rows(todo, late), slots[late]))
            self._release_cv.notify()
        self.counters["linked"] += n

    def _keep_near(
        self,
        todo: np.ndarray,
        slots: np.ndarray,
        inside: np.ndarray,
        groups: tuple[np.ndarray, np.ndarray, np.ndarray],
        cursor: int,
    ) -> None:
        """Keep the pending rows of messages just linked into slots that fire
        soon (``todo`` ordered by slot; ``groups``: its distinct slots, ascending, with
        where each one's rows start and how many there are). Volatile: a slot whose
        rows in memory are not all of its chain (linked before a restart, before it
        came near, while memory was full, or holding a parked ROLL) is walked."""
        uniq, starts, counts = groups
        first, end = np.searchsorted(uniq, (cursor, cursor + _NEAR_SLOTS)).tolist()
        if first == end:
            return
        lo, hi = int(starts[first]), int(starts[end - 1] + counts[end - 1])
        if self._near_rows + hi - lo > self.settings.release_buffer_messages:
            return
        rows = todo[lo:hi].copy()  # not a view: the far rows of the batch are not kept
        whole = bool(inside[lo:hi].all())  # else a ROLL shares a slot: keep only the others
        spans = (uniq[first:end].tolist(), starts[first:end].tolist(), counts[first:end].tolist())
        for slot, start, count in zip(*spans, strict=True):
            part = rows[start - lo : start - lo + count]
            if not whole and not inside[start : start + count].all():
                continue
            self._near.setdefault(slot, []).append(part)
            self._near_rows += count

    # ------------------------------------------------------------------ scan stage
    def _scan_step(self) -> bool:
        """Fire every slot that starts within ``scan_lead_ms`` (lock held). False when
        idle. Firing early is safe: release waits for each message's own ms, a
        message linked later into a fired slot goes straight to release, and a
        cancel after the fire is honoured by release's state check."""
        now = self.clock.now_ms()
        now_slot = (now + self.settings.scan_lead_ms) // self.settings.precision_ms
        progressed = False
        limit = self.settings.release_buffer_messages
        queued = len(self._release)
        fired: list[tuple[int, int, int, list[np.ndarray]]] = []
        self._scan_blocked = self._scan_awaits_checkpoint = False
        horizon = self._durable_scan_from + max(1, self.settings.window_slots - _SCAN_LEAD_SLOTS)
        while self._scan_cursor <= now_slot:
            slot = self._scan_cursor
            if slot >= horizon:  # a window ahead of the last checkpoint: wait for the next
                self._scan_awaits_checkpoint = True
                self._flush_soon.set()
                break
            entry = self._wheel.get(slot)
            if entry is not None and entry.num:
                if queued and queued + entry.num > limit:
                    self._scan_blocked = True  # full: wait for release to drain it
                    break
                queued += entry.num
                fired.append((slot, entry.last, entry.num, self._take_near(slot)))
            # first: what links into a fired slot from now on goes straight to release
            self._scan_cursor = slot + 1
            progressed = True
        if fired:
            # The chains are read with the lock let go: the TimerLog records behind a
            # fired slot never change, and a big slot (a burst) takes tens of ms to
            # walk, which would hold up the release of messages due meanwhile.
            self._reading_slot = fired[0][0]
            self._lock.release()
            try:
                chains = [self._fired_rows(*f) for f in fired]
            finally:
                self._lock.acquire()
                self._reading_slot = None  # the runs reach the release buffer before unlock
            for due, rolled, problems in chains:
                for pos, why in problems:
                    self._quarantine("timerlog", pos, why)
                pending = self._states.raw_many(due["seq"]) == _PENDING
                self._release.push_run(take_rows(due, pending), True)
                rolled = take_rows(rolled, self._states.raw_many(rolled["seq"]) == _PENDING)
                if len(rolled):
                    fields = list(TimerRecord._fields)
                    self._roll([TimerRecord(*r) for r in rolled[fields].tolist()], now)
        if progressed:
            self._release_cv.notify()  # the release stage may have new, earlier deadlines
        return progressed

    def _take_near(self, slot: int) -> list[np.ndarray]:
        """Remove and return a slot's rows kept in memory (lock held)."""
        rows = self._near.pop(slot, [])
        self._near_rows -= sum(map(len, rows))
        return rows

    def _fired_rows(
        self, slot: int, last: int, num: int, near: list[np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray, list[tuple[int, str]]]:
        """A fired slot's messages as ``_read_chain`` returns them: from memory when
        its rows there are its whole chain (``num`` records), else from its chain."""
        if sum(map(len, near)) != num:
            return self._read_chain(slot, last, num)
        rows = join_rows(near, PENDING_DTYPE)
        return slot_run(rows, slot), np.empty(0, dtype=TIMER_DTYPE), []

    def _read_chain(
        self, slot: int, last: int, num: int
    ) -> tuple[np.ndarray, np.ndarray, list[tuple[int, str]]]:
        """Walk a fired slot's chain (see ``chainwalk``; no lock needed). Returns its
        NORMAL entries as a release-buffer run in due order, its ROLL records, and
        the problems to quarantine."""
        recs, problems = walk_chain(self._tl.log, slot, last, num, self._release_is_due)
        rolled = recs["kind"] == int(TimerKind.ROLL)
        if rolled.any():
            normal, parked = take_rows(recs, ~rolled), take_rows(recs, rolled)
        else:
            normal, parked = recs, recs[:0]
        return slot_run(normal, slot), parked, problems

    def _roll(self, due: list[TimerRecord], now: int) -> None:
        """Re-append parked messages (a fresh CommitLog copy each hop, so old
        segments can be retired) and link them at their next slot. One batched
        read and one batched encode for the whole fired slot."""
        msgs: list[formats.Message] = []
        kept: list[TimerRecord] = []
        for rec, msg in zip(due, self._cl.read_many([r.cl_pos for r in due]), strict=True):
            if not isinstance(msg, formats.Message) or msg.seq != rec.seq:
                why = msg if isinstance(msg, CorruptData) else "not the timer's message"
                self._quarantine("commitlog", rec.cl_pos, f"roll of seq {rec.seq}: {why}")
                continue
            msgs.append(msg)
            kept.append(rec)
        if not msgs:
            return
        rolls = [min(m.roll_count + 1, 0xFFFF) for m in msgs]
        buf, offsets, sizes = formats.encode_messages(
            formats.RecordType.ROLL,
            [m.seq for m in msgs],
            [m.deliver_at_ms for m in msgs],
            [m.accepted_ms for m in msgs],
            [m.epoch for m in msgs],
            [m.topic_id for m in msgs],
            rolls,
            [m.key.encode() for m in msgs],
            [m.headers for m in msgs],
            [m.body for m in msgs],
            [m.replaces_seq for m in msgs],
            [
                m.origin_pos if m.type is formats.RecordType.ROLL else r.cl_pos
                for m, r in zip(msgs, kept, strict=True)
            ],
        )
        base = self._cl.append(buf, now)
        self._enqueue_q.put(  # linked by the enqueue stage; a failed link retries them
            pending_batch(
                offsets + base,
                sizes,
                [m.seq for m in msgs],
                [m.topic_id for m in msgs],
                [m.deliver_at_ms for m in msgs],
                rolls,
            )
        )
        self.counters["rolled"] += len(msgs)

    def _quarantine(self, where: str, pos: int, why: str) -> None:
        """Report a record that cannot be read; it is skipped, never retried forever."""
        self.counters["quarantined"] += 1
        entry = {"at_ms": self.clock.now_ms(), "file": where, "position": pos, "error": why}
        log.error("quarantined unreadable record", extra=entry)
        with open(self._dir / "quarantine.log", "a") as fh:
            fh.write(json.dumps(entry) + "\n")

    # ------------------------------------------------------------------ release stage
    def _release_step(self) -> bool:
        """Deliver everything due now (lock held). False when nothing was due."""
        now = self.clock.now_ms()
        due = self._release.pop_due(now, _RELEASE_BATCH)
        if not len(due):
            return False
        if self._scan_blocked:  # room now; only then: a wake-up per step costs the GIL
            self._scan_cv.notify()
        live = take_rows(due, self._states.raw_many(due["seq"]) == _PENDING)
        # cancelled while waiting, or another copy was (or is being) delivered. Copies
        # of one message share its due time, and pop_due sorts by (due, seq): they
        # are neighbours, so one comparison finds them and the due order is kept.
        seq = live["seq"]
        repeat = seq[1:] == seq[:-1]
        if repeat.any():
            live = take_rows(live, np.concatenate(([True], ~repeat)))
        self._released_last = len(live)
        if not len(live):
            return True
        try:
            # what can fail comes first (a topic's first ready queue file is made here;
            # appends to one only go to memory), then the facts, then the state
            queues = [
                (self.consumers.ready_index(tid, now), tid, mask)
                for tid, mask in by_topic(live["topic_id"])
            ]
            self._cl.append(formats.encode_delivers(live, now), now)
        except BaseException:
            self._release.push_run(due)  # nothing was delivered: all of it again on the retry
            raise
        for queue, tid, mask in queues:
            rows = live if isinstance(mask, slice) else take_rows(live, mask)
            count = len(rows)
            entries = np.empty(count, dtype=READY_DTYPE)
            entries["seq"] = rows["seq"]
            entries["body_pos"] = rows["cl_pos"]
            entries["body_size"] = rows["cl_size"]
            entries["deliver_at_ms"] = rows["deliver_at_ms"]
            entries["delivered_ms"] = now
            queue.append_many(entries)
            self.topics.delivered(tid, rows["deliver_at_ms"])
        self._states.set_many(live["seq"], MessageState.DELIVERED)
        if early := self.lateness_histogram.add(now - live["deliver_at_ms"]):
            self.counters["early"] += early  # must never happen; counted so tests see it
        self.counters["delivered"] += len(live)
        self._wake_receivers()
        return True

    # ------------------------------------------------------------------ consumers
    def receive(
        self,
        topic: str,
        group: str,
        *,
        max_messages: int = 32,
        invisible_ms: int = 30_000,
        wait_ms: int = 0,
        auto_ack: bool = False,
    ) -> list[ReceivedMessage]:
        """Hand out up to ``max_messages`` deliverable messages to ``group``; wait up to
        ``wait_ms`` for the first one. Unacked messages come back after ``invisible_ms``.
        ``auto_ack``: acked as handed out (at-most-once; no receipts, no redelivery),
        durable once this returns like an ``ack``."""
        return self.receive_batch(
            topic,
            group,
            max_messages=max_messages,
            invisible_ms=invisible_ms,
            wait_ms=wait_ms,
            auto_ack=auto_ack,
        ).messages()

    def receive_batch(
        self,
        topic: str,
        group: str,
        *,
        max_messages: int = 32,
        invisible_ms: int = 30_000,
        wait_ms: int = 0,
        auto_ack: bool = False,
    ) -> ReceivedBatch:
        """``receive`` with the messages as columns (no object per message)."""
        check_topic(topic)
        check_group(group)
        check_receive(max_messages, invisible_ms, wait_ms)
        deadline = self.clock.now_ms() + wait_ms
        with self._lock:
            while True:
                self._check_running()
                topic_id = self.topics.ids.get(topic)
                now = self.clock.now_ms()
                taken = None
                if topic_id is not None:
                    taken = self.consumers.take(
                        topic_id,
                        group,
                        now,
                        max_messages,
                        invisible_ms,
                        self.settings.max_inflight_per_group,
                        auto_ack,
                    )
                if taken is not None:
                    break
                if not self._background or now >= deadline:
                    return ReceivedBatch(topic, [], [], [], [], [], [], [], [])
                self._received_cv.wait(min(self.clock.timeout_s(deadline), RECEIVE_LOOK_AGAIN_S))
            end = 0
            if auto_ack:
                end = self.consumers.write_acks(
                    taken.topic_id, group, taken.offsets, now, attempts=taken.attempts
                )
                self.counters["acked"] += len(taken.offsets)
        self._made_durable(end)
        got, unreadable = self.consumers.materialise(topic, taken)
        if unreadable and not taken.acked:  # acked away so that they do not come back forever
            with self._lock:
                self.consumers.ack_unreadable(
                    taken.topic_id, group, unreadable, self.clock.now_ms()
                )
        return got

    def on_receivable(self, hook: Callable[[], None]) -> Callable[[], None]:
        """Call ``hook`` whenever messages may have become receivable (after each
        release step and each nack); return a function that removes it. For waiters
        outside the engine's threads, such as an event loop: the hook runs on an
        engine thread with the engine lock held, so it must be quick and must not
        call the engine. Messages coming back after their invisibility are not
        signalled: waiters look again every ``RECEIVE_LOOK_AGAIN_S``, as ``receive`` does."""
        with self._lock:
            self._receivable_hooks.append(hook)

        def remove() -> None:
            with self._lock:
                self._receivable_hooks.remove(hook)

        return remove

    def _wake_receivers(self) -> None:
        self._received_cv.notify_all()
        for hook in self._receivable_hooks:
            hook()

    def ack(
        self, topic: str, group: str, receipts: Sequence[str]
    ) -> list[AckOutcome | DelayqError]:
        """Acknowledge received messages; durable once this returns."""
        return self._settle(topic, group, receipts, None)

    def change_invisibility(
        self, topic: str, group: str, receipts: Sequence[str], invisible_ms: int
    ) -> list[AckOutcome | DelayqError]:
        """Move the redelivery time of received messages (0: redeliver now, a nack)."""
        if not 0 <= invisible_ms <= 12 * 3_600_000:
            raise InvalidArgument("invisible_ms", f"must be 0..43200000, got {invisible_ms}")
        return self._settle(topic, group, receipts, invisible_ms)

    def _settle(
        self, topic: str, group: str, receipts: Sequence[str], invisible_ms: int | None
    ) -> list[AckOutcome | DelayqError]:
        check_topic(topic)
        check_group(group)
        end = 0
        with self._lock:
            self._check_running()
            now = self.clock.now_ms()
            topic_id = self.topics.ids.get(topic)
            out, acked = self.consumers.settle(topic_id, group, receipts, now, invisible_ms)
            if acked.offsets and topic_id is not None:
                end = self.consumers.write_acks(
                    topic_id, group, acked.offsets, now, attempts=acked.attempts
                )
                self.counters["acked"] += len(acked.offsets)
            if invisible_ms is not None:
                self._wake_receivers()
        self._made_durable(end)
        return out

    # ------------------------------------------------------------------ stats
    def stats(self, topic: str | None = None) -> list[TopicStats]:
        """Per-topic counts and due-time histogram; ``topic`` None: every topic."""
        with self._lock:
            self._check_running()
            now = self.clock.now_ms()
            names = [topic] if topic is not None else sorted(self.topics.ids)
            out = []
            for name in names:
                tid = self.topics.ids.get(name)
                if tid is None:
                    raise NotFound("topic", f"unknown topic {name!r}")
                idx = self.consumers.ready.get(tid)
                length = idx.length if idx else 0
                groups = self.consumers.groups.get(tid, {})
                out.append(
                    TopicStats(
                        name,
                        *self.topics.counts(tid),
                        {g: st.backlog(length) for g, st in groups.items()},
                        self.topics.due_counts(tid).histogram(now),
                    )
                )
            return out

    def lateness(self) -> dict[str, int]:
        """Release lateness so far (p50/p99 as bucket upper bounds, ms) and how far
        the oldest due, unreleased message is behind now (``release_lag_ms``)."""
        hist = self.lateness_snapshot()
        with self._lock:
            head = self._release.next_due_ms()
            now = self.clock.now_ms()
        lag = max(0, now - head) if head is not None else 0
        p50, p99 = hist.percentile(0.5), hist.percentile(0.99)
        return {"p50": p50, "p99": p99, "release_lag_ms": lag, "count": hist.count}

    def lateness_snapshot(self) -> LatenessHistogram:
        """A copy of the release lateness histogram, its counts and sum taken together
        (under the lock: the release stage adds to both)."""
        with self._lock:
            return self.lateness_histogram.copy()

    @property
    def group_commit(self) -> GroupCommit:
        """The CommitLog's group commit: its durable position and fsync counts."""
        return self._commit

    def pending_by_topic(self) -> dict[str, int]:
        """Pending messages per topic name (cheap: no due-time histograms)."""
        with self._lock:
            return self.topics.pending_by_name()

    def gauges(self) -> dict[str, int]:
        """Queue depths and positions, for metrics."""
        with self._lock:
            now_slot = self.clock.now_ms() // self.settings.precision_ms
            return {
                "enqueue_queue": len(self._enqueue_q),
                "release_buffer": len(self._release),
                "near_rows": self._near_rows,
                "scan_lag_slots": max(0, now_slot - self._scan_cursor + 1),
                "pending": self.topics.total_pending(),
                "commitlog_end": self._cl.end,
                "timerlog_end": self._tl.end,
            }

    # ------------------------------------------------------------------ driving the stages
    def pump(self) -> None:
        """Run every stage until nothing is left to do at the clock's current time.

        For engines made with ``background=False`` (tests, tools)."""
        with self._lock:
            self._check_running()
            while True:
                while self._link_step() | self._scan_step() | self._release_step():
                    pass
                if not self._scan_awaits_checkpoint:
                    return
                self.checkpoint()  # no flush stage here: the scan waits for one

    def _stage_loop(
        self,
        cv: threading.Condition,
        step: Callable[[], bool],
        next_ms: Callable[[], int | None],
        gather_s: float | Callable[[], float] = 0.0,
        idle: Callable[[bool], None] | None = None,
    ) -> None:
        """One stage's thread: ``step`` until close (see ``stageloop``)."""
        run_stage(
            cv,
            step,
            stopped=lambda: self._stop,
            next_ms=next_ms,
            timeout_s=self.clock.timeout_s,
            gather_s=gather_s,
            idle=idle,
            name=threading.current_thread().name.removeprefix("delayq-"),
            on_failure=lambda: self.counters.update(("stage_failures",)),
        )

    def _enqueue_loop(self) -> None:
        # After each link, gather for _LINK_GATHER_S: link batches stay big (its numpy
        # work is per batch). Accept wakes the stage early only when it is idle or a
        # message is due within _LINK_URGENT_MS (its slot may be about to fire).
        def idle(flag: bool) -> None:
            self._link_idle = flag

        self._stage_loop(self._link_cv, self._link_step, lambda: None, _LINK_GATHER_S, idle)

    def _scan_loop(self) -> None:
        p = self.settings.precision_ms
        lead = self.settings.scan_lead_ms

        def next_ms() -> int | None:  # blocked: until release or a checkpoint wakes it
            if self._scan_blocked or self._scan_awaits_checkpoint:
                return None
            return self._scan_cursor * p - lead

        self._stage_loop(self._scan_cv, self._scan_step, next_ms)

    def _release_loop(self) -> None:
        # This stage's waits end at due times: they must not run the kernel's default
        # timer slack (up to 50 µs) late. Only its own thread is changed.
        if not precise_waits(_RELEASE_TIMER_SLACK_NS):
            log.debug("timer slack left at the default: release may wake up to 50 µs late")

        # In a burst (a big step), gather a millisecond between steps: a step's fixed
        # cost is most of its cost at ~100 messages, and the receivers' calls halve
        # too. A trickle of messages is still released at each one's own ms.
        def gather() -> float:
            return _RELEASE_GATHER_S if self._released_last >= _RELEASE_GATHER_AT else 0.0

        def next_ms() -> int | None:
            self._release_wake_ms = due = self._release.next_due_ms()
            return due

        self._stage_loop(self._release_cv, self._release_step, next_ms, gather)

    def _release_is_due(self) -> bool:
        """Whether the release stage is past its wake-up time (it is waiting for the
        GIL or the lock). Read without the lock: a stale answer costs one nap or one
        forced switch, nothing else."""
        wake = self._release_wake_ms
        return wake is not None and wake <= self.clock.now_ms()

    def _flush_loop(self) -> None:
        # every flush interval, or sooner once the CommitLog grew by _CHECKPOINT_BYTES:
        # what a restart replays stays bounded however fast messages arrive
        interval = self.settings.flush_interval_ms / 1000.0
        failures = FailureRun(log, "checkpoint")
        while True:
            self._flush_soon.wait(interval)
            self._flush_soon.clear()
            with self._lock:
                if self._stop:
                    return
            try:
                self.checkpoint()
                # the CommitLog pages read through its maps count in this process's
                # RSS until unmapped: keep them to what was read since the last flush
                self._cl.log.drop_views()
            except Exception as exc:  # keep flushing; a failing disk shows in logs and metrics
                failures.failed(exc, interval)
                self.counters["checkpoint_failures"] += 1
            else:
                failures.succeeded()

    def _warm_loop(self) -> None:
        """Read the logs' new warm tails into the page cache, off the writers' path
        (see store.segments): the reads let go of the GIL and the lock is not held."""
        while True:
            self._warm_soon.wait(1.0)
            self._warm_soon.clear()
            with self._lock:
                if self._stop:
                    return
                cold = self._cl.log.take_cold() + self._tl.log.take_cold()
            for fd, start, end in cold:
                warm_pages(fd, start, end)

    # ------------------------------------------------------------------ checkpoint
    def checkpoint(self) -> Checkpoint:
        """fsync everything and atomically write a checkpoint; then apply retention."""
        with self._checkpoint_lock:
            return self._checkpoint()

    def _checkpoint(self) -> Checkpoint:
        with self._lock:
            self._expire_ready()
            ckpt = self._snapshot()
            # the ready queues as of the snapshot go to their files now; the fsyncs of
            # those and the TimerLog run without the lock
            fds = self._tl.log.take_unsynced()
            fds += [fd for r in self.consumers.ready.values() if (fd := r.write_tail()) >= 0]
            # then the mapped files (after the TimerLog their slots point into)
            fds += [self._wheel.fd, *self._states.take_dirty()]
        self._commit.wait_durable(ckpt.applied_end)
        for fd in fds:
            os.fsync(fd)
        ckpt.save(self._dir / "checkpoint.json")
        with self._lock:  # a restart resumes the scan there now
            self._durable_scan_from = ckpt.scan_from_slot
            if self._scan_awaits_checkpoint:
                self._scan_cv.notify()
        self._checkpointed_end = ckpt.applied_end
        self.counters["checkpoints"] += 1
        self._retention(ckpt)
        return ckpt

    def _snapshot(self) -> Checkpoint:
        s = self.settings
        # the scan resumes at the first slot whose messages are not all released:
        # those waiting in the release buffer and those whose chain is being read
        lows = [self._release.lowest_slot(), self._reading_slot, self._scan_cursor]
        scan_from = min(x for x in lows if x is not None)
        ckpt = Checkpoint(
            shard=s.shard,
            epoch=s.epoch,
            written_ms=self.clock.now_ms(),
            replay_from=self._enqueue_q.head_pos() or self._cl.end,
            applied_end=self._cl.end,
            timerlog_end=self._tl.end,
            scan_from_slot=scan_from,
            next_seq=self._next_seq,
            ready_len={str(k): r.length for k, r in self.consumers.ready.items()},
            ready_floor={str(k): r.floor for k, r in self.consumers.ready.items() if r.floor},
            groups={
                str(tid): {
                    g: GroupCheckpoint(st.committed, sorted(st.acked)) for g, st in gs.items()
                }
                for tid, gs in self.consumers.groups.items()
            },
        )
        self.topics.save_to(ckpt)
        return ckpt

    def _expire_ready(self) -> None:
        """Expire ready entries delivered more than the retention period ago (lock
        held): no group can receive them any more, whether it acked them or not."""
        lost = self.consumers.expire_before(self.clock.now_ms() - self.settings.retention_ms)
        for (tid, group), count in lost.items():
            self.counters["expired"] += count
            topic = self.topics.names.get(tid, str(tid))
            log.warning(
                "messages expired before their group acked them",
                extra={"topic": topic, "group": group, "count": count},
            )

    def _retention(self, ckpt: Checkpoint) -> None:
        """Delete sealed segments nothing can need any more (see ``retention``), keeping
        the records of CommitLog segments' still-pending messages (see ``keptrecords``),
        and give back the blocks of expired ready entries (the checkpoint has their floor)."""
        s = self.settings
        now = self.clock.now_ms()
        fired_by = ckpt.scan_from_slot * s.precision_ms - s.window_ms - s.precision_ms
        kept_by = now - s.window_ms - s.retention_ms

        def deletable(seglog: SegmentedLog, before: int, upto: int) -> list[int]:
            segs = seglog.segments
            done = deletable_count([(g.base, g.created_ms) for g in segs], before, upto)
            return [seg.base for seg in segs[:done]]

        with self._lock:
            for base in deletable(self._tl.log, fired_by, ckpt.timerlog_end):
                self._tl.log.delete_segment(base)
                self.counters["timerlog_segments_deleted"] += 1
            self.consumers.release_blocks()
            bases = deletable(self._cl.log, min(fired_by, kept_by), ckpt.replay_from)
        if bases:
            self._delete_commitlog(bases, now)
        self._retire_states(ckpt)

    def _delete_commitlog(self, bases: list[int], now: int) -> None:
        """Delete these CommitLog segments, keeping their pending messages' records;
        then drop the kept records no longer needed."""
        kept = self._cl.kept
        count = kept.count
        for base in bases:  # sealed segments: read without the lock, which each check takes
            done, seq_end = self._cl.keep_pending(base, now, self._still_pending)
            with self._lock:
                kept.install(done)
                self._cl.log.delete_segment(base)
            self._schedules_gone_below = max(self._schedules_gone_below, seq_end)
            self.counters["commitlog_segments_deleted"] += 1
        self.counters["records_kept"] += kept.count - count
        # now and then (segments went): drop what no longer needs keeping
        count = kept.count
        rewritten = kept.retire(self._still_pending, now - self.settings.retention_ms, now)
        with self._lock:
            for done in rewritten:
                kept.install(done)
        self.counters["kept_records_retired"] += count - kept.count

    def _retire_states(self, ckpt: Checkpoint) -> None:
        """Retire the state-map chunks of messages all done that no id can name any
        more: their SCHEDULE records are in deleted segments and not kept (see
        ``StateMap.sweep``; this checkpoint's fsyncs are done)."""
        below = min(ckpt.next_seq, self._schedules_gone_below)
        with self._lock:
            retired = self._states.sweep(below, self._cl.kept.chunks)
        self.counters["state_chunks_retired"] += len(retired)

    def _still_pending(self, seqs: np.ndarray) -> np.ndarray:
        with self._lock:
            pending: np.ndarray = self._states.raw_many(seqs) == _PENDING
            return pending
