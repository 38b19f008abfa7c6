"""The Engine: one shard, in process. The facade the server (and embedders) talk
to; the only module that joins the timer pipeline (``timers``: accept, link,
scan, release, checkpoint, each a module) and the delivery side (``delivery``).

With ``background=True`` every stage has a thread; with ``background=False``
nothing runs until ``pump()`` is called, which is how tests drive years of
fake-clock time deterministically. One lock guards the shard's state (see
``timers.state.Wakeups``); calls hold it for in-memory work and one batched
write, and wait for fsync (``flush=sync``) outside it.

Lifecycle: NEW -> RUNNING -> CLOSED. ``start()`` is idempotent; ``close()``
links what is queued, flushes and checkpoints; any call after it raises
``EngineClosed``.
"""

from __future__ import annotations

import collections
import contextlib
import enum
import logging
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import Any

from ..clock import Clock, ShardClock
from ..delivery.consumers import Consumers
from ..delivery.receiving import Receiving
from ..delivery.types import AckOutcome, ReceivedBatch, ReceivedMessage
from ..epochs import EpochHistory
from ..errors import DelayqError, EngineClosed, FailedPrecondition, NotFound, quote
from ..ids import MessageId
from ..names import check_topic
from ..replication import transitions
from ..replication.apply import apply_chunk
from ..replication.chunks import CHUNK_BYTES, read_chunk
from ..replication.rewind import rewind_dir
from ..role import Role
from ..settings import EngineSettings, FlushPolicy
from ..store import receiptkey
from ..store.checkpoint import Checkpoint
from ..store.commitlog import CommitLog
from ..store.quarantine import Quarantine
from ..timers.byid import ById
from ..timers.columns import Prepared
from ..timers.compaction.adding import BlockOutcome, BlockRow, add_block
from ..timers.lifecycle.opening import begin_epoch, open_shard
from ..timers.memory.lateness import LatenessHistogram
from ..timers.pipeline import Stages
from ..timers.rebalance import snapshot
from ..timers.rebalance.transfer import ImportRow, Moves, ReleaseOutcome
from ..timers.stages.accept import Acceptor
from ..timers.stages.groupcommit import GroupCommit
from ..timers.state import ShardState, Wakeups
from ..timers.tuning import HELP_LINK
from ..types import (
    BatchOutcome,
    CancelOutcome,
    LookupResult,
    ScheduleBatch,
    ScheduleOutcome,
    ScheduleRequest,
    TopicStats,
)
from .inspection import Inspection
from .validation import batch_of, prepare, prepare_columns, resolve_due

__all__ = ["Engine", "Lifecycle"]

log = logging.getLogger("delayq.engine")


class Lifecycle(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    CLOSED = "closed"


class Engine:
    def __init__(
        self, settings: EngineSettings, clock: Clock | None = None, *, background: bool = True
    ) -> None:
        self.settings = settings
        self.clock: Clock = clock or ShardClock()
        self._background = background
        self._life = Lifecycle.NEW
        self._wake = Wakeups()
        self._lock = self._wake.lock
        self._receivable_hooks: list[Callable[[], None]] = []  # see on_receivable
        self._counters: collections.Counter[str] = collections.Counter()
        self.recovery: dict[str, Any] = {}
        # sync replication: after the local fsync, wait for the in-sync replicas
        self._ack_wait: Callable[[int], None] | None = None
        self._start_role: Role = Role.MASTER
        self.master_address = ""  # a replica's master, named to calls it refuses

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Engine:
        with self._lock:
            if self._life is Lifecycle.RUNNING:
                return self
            if self._life is Lifecycle.CLOSED:
                raise EngineClosed("engine was closed; open a new Engine")
            self._open()
            if self._start_role is Role.REPLICA:
                transitions.follow(self._state)
            self._life = Lifecycle.RUNNING
        if self._background:
            self._stages.start()
        return self

    def start_as_replica(self) -> None:
        """Open (``start``) as a replica: nothing fires or is acked until a
        ``promote``. Call before ``start``."""
        self._start_role = Role.REPLICA

    def _open(self) -> None:
        def consumers(ready_dir: Path, cl: CommitLog, quarantine: Quarantine) -> Consumers:
            key_file = Path(self.settings.data_dir) / receiptkey.RECEIPT_KEY_FILE
            key = receiptkey.load_or_create(key_file, self.clock.now_ms())
            return Consumers(ready_dir, cl, self.settings.shard, quarantine, key)

        st, self.consumers = open_shard(
            self.settings, self.clock, self._wake, consumers, self._counters
        )
        self._state: ShardState = st
        self._receiving = Receiving(
            self.consumers,
            lock=self._lock,
            clock=self.clock,
            settings=self.settings,
            counters=st.counters,
            topic_id=st.topics.ids.get,
            made_durable=self._made_durable,
            check_running=self._check_running,
            wait=self._background,
            hooks=self._receivable_hooks,
        )
        self._accept = Acceptor(st)
        settings = self.settings

        def check(req: ScheduleRequest, now_ms: int, prefix: str = "") -> Prepared:
            return prepare(req, now_ms, settings, prefix)  # client input: this boundary's

        self._byid = ById(st, self._accept, check)
        self._moves = Moves(st, self._accept, check)
        self._commit = GroupCommit(self._prepare_commit, st.cl.end)
        wait = self._commit.wait_durable
        self._stages = Stages.build(st, self.consumers, self._receiving.wake, wait)
        self.recovery = st.recovery
        log.info("engine open", extra={"data_dir": str(st.files.dir), "recovery": self.recovery})

    @property
    def epoch(self) -> int:
        """The epoch new records and ids are written in: the higher of
        ``settings.epoch`` and the one the data directory last recorded."""
        st = getattr(self, "_state", None)
        return st.epoch if st is not None else self.settings.epoch

    @property
    def epochs(self) -> EpochHistory:
        """The shard's epoch history (epoch -> first CommitLog position written in it)."""
        st = getattr(self, "_state", None)
        return st.epochs if st is not None else EpochHistory()

    def begin_epoch(self, epoch: int) -> None:
        """Write in ``epoch`` from now on (a new master's fencing token): recorded,
        fsynced, from the CommitLog's end, before anything is written in it. The
        same epoch again does nothing; a lower one is ``FailedPrecondition``."""
        with self._lock:
            self._check_running()
            begin_epoch(self._state, epoch)

    @property
    def commitlog_end(self) -> int:
        """Bytes of CommitLog written (0 before the engine is open)."""
        st = getattr(self, "_state", None)
        return st.cl.end if st is not None else 0

    @property
    def running(self) -> bool:
        """Opened (recovered) and not closed: calls are taken."""
        return self._life is Lifecycle.RUNNING and not self._wake.stopped

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
        self._stop_stages()
        st = self._state
        try:
            with self._lock:
                while st.enqueue_q and self._stages.link.step():
                    pass
            self.checkpoint()
        except Exception:  # a full disk, say: close as a kill would, nothing is lost
            log.exception("closing without a final checkpoint; the next start replays the log")
            with contextlib.suppress(OSError):
                st.cl.sync()  # what was written is safe from a power loss too, if it can be
            killed = True
        else:
            killed = False
        with self._lock:
            left = {"enqueue_queue": len(st.enqueue_q), "release_buffer": len(st.release)}
            self._close_files(killed=killed)
        log.info("engine closed", extra={"left": left})
        return left

    def abandon(self) -> None:
        """Drop the engine as if its process had been killed: no flush, no checkpoint.

        Everything already written stays in the OS page cache, exactly as after
        SIGKILL. For crash tests and tools; the engine is CLOSED afterwards."""
        self._stop_stages()
        with self._lock:
            self._close_files(killed=True)

    def _stop_stages(self) -> None:
        self._stages.stop()
        with self._lock:
            self._receiving.wake_waiters()  # waiting receivers see the engine stopped

    def _close_files(self, *, killed: bool) -> None:
        self._life = Lifecycle.CLOSED
        try:
            self.consumers.close(write_tails=not killed)  # a kill loses what is in memory
        finally:
            self._state.files.close(killed=killed)

    def _check_running(self) -> None:
        if not self.running:
            raise EngineClosed("engine is not running")

    # ------------------------------------------------------------------ schedule
    def schedule(self, requests: Sequence[ScheduleRequest]) -> list[ScheduleOutcome]:
        """Schedule a batch; one outcome per request (an id, or a per-item error).

        Raises ``Congested`` (nothing written) when the enqueue queue is full."""
        reqs = list(requests)
        batch, suspects = batch_of(reqs)
        return self._schedule(batch, reqs.__getitem__, suspects).outcomes()

    def schedule_batch(self, batch: ScheduleBatch) -> BatchOutcome:
        """Schedule many messages given as columns (the bulk fast path): same rules,
        ids and errors as ``schedule``, without an object per message (0 in a time
        column means "not given").

        Raises ``InvalidArgument`` for a malformed batch (columns of different
        lengths, an invalid single topic) and ``Congested`` when the queue is full."""
        return self._schedule(batch, None, ())

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
            epoch = self._admit("messages")
            ids, dues, refused, end = self._accept.accept(cols, now)
            if len(self._state.enqueue_q) >= HELP_LINK:
                self._stages.link.help()
        self._acked(end, epoch, "messages")
        if cols.origin is None and not refused:
            return BatchOutcome(ids, dues, errors)
        rows = None if cols.origin is None else cols.origin.tolist()
        return BatchOutcome.spread(len(batch.bodies), rows, ids, dues, errors, refused)

    def _admit(self, what: str) -> int:
        """Under the lock: refuse unless this node may ack ``what`` now; the epoch
        it is admitted in (for ``_acked``)."""
        self._check_running()
        transitions.refuse_unless_master(self._state, what, self.master_address)
        return self._state.epoch

    def _acked(self, end: int, epoch: int, what: str, *, always: bool = False) -> None:
        """Make a write admitted in ``epoch`` durable (``_made_durable``), then check
        again that it may be acknowledged (``transitions.refuse_unless_still``)."""
        self._made_durable(end, always=always)
        if end:
            with self._lock:
                transitions.refuse_unless_still(self._state, what, epoch, self.master_address)

    def _made_durable(self, end: int, *, always: bool = False) -> None:
        """Wait until ``end`` is fsynced (``flush=sync``, or ``always``) and held by
        the in-sync replicas (sync replication)."""
        if end and (always or self.settings.flush is FlushPolicy.SYNC):
            self._commit.wait_durable(end)
        if end and self._ack_wait is not None:
            self._ack_wait(end)

    def _prepare_commit(self) -> tuple[int, list[int]]:
        with self._lock:
            cl = self._state.cl
            return cl.end, cl.log.take_unsynced()

    # ------------------------------------------------------------------ by id
    def cancel(self, ids: Sequence[str]) -> list[CancelOutcome | DelayqError]:
        """Cancel messages by id; durable once this returns. One outcome per id (a
        ``Forwarded`` error for one a rebalance moved away: the server passes it on)."""
        now = self.clock.now_ms()
        with self._lock:
            epoch = self._admit("ids")
            local = self._local_ids(ids)
            cols, errors = MessageId.parse_columns(local)
            out, end = self._byid.cancel(local, cols, errors, now)
        self._acked(end, epoch, "ids")
        return out

    def reschedule(
        self, message_id: str, *, deliver_at_ms: int | None = None, delay_ms: int | None = None
    ) -> ScheduleOutcome:
        """Atomically cancel a pending message and schedule its copy at a new time:
        a crash leaves either the old or the new message pending, never both or
        neither. Returns the new id. Raises NotFound / FailedPrecondition /
        InvalidArgument."""
        MessageId.parse(message_id, "id")
        now = self.clock.now_ms()
        resolve_due(deliver_at_ms, delay_ms, now, self.settings)  # argument errors come first
        with self._lock:
            epoch = self._admit("id")
            mid = MessageId.parse(self._local_ids([message_id])[0], "id")
            result, end = self._byid.reschedule(mid, deliver_at_ms, delay_ms, now)
        self._acked(end, epoch, "id")
        return result

    def lookup(self, message_id: str) -> LookupResult:
        """What the message is and holds; an id a rebalance moved here from another
        shard answers with the copy here (its id: the result's ``id``)."""
        MessageId.parse(message_id, "id")
        with self._lock:
            self._check_running()
            local = self._local_ids([message_id])[0]
            return self._byid.lookup(MessageId.parse(local, "id"), local)

    # ------------------------------------------------------------------ rebalance
    def imported(self, ids: Sequence[str]) -> list[bool]:
        """Which of these ids (of other shards) name messages moved here."""
        with self._lock:
            self._check_running()
            shard, index = self.settings.shard, self._state.imports
            return [
                m is not None and m.shard != shard and index.get(m) is not None
                for m in _parsed(ids)
            ]

    def _local_ids(self, ids: Sequence[str]) -> list[str]:
        """``ids`` with those of messages moved here (ids the import index knows: of
        other shards, or of this one for a message that left and came back) replaced
        by the id of their copy here."""
        st, shard = self._state, self.settings.shard
        if not len(st.imports):
            return list(ids)
        out = list(ids)
        for i, mid in enumerate(_parsed(ids)):
            if mid is not None:  # (one of this shard's own: a message that came back)
                had = st.imports.get(mid)
                if had is not None:
                    out[i] = str(MessageId(shard, *had))
        return out

    def release(self, ids: Sequence[str], target: int) -> list[ReleaseOutcome | DelayqError]:
        """Hand these pending messages over to shard ``target`` (``timers.rebalance.transfer``);
        durable (fsynced, and held by the in-sync replicas) once this returns."""
        now = self.clock.now_ms()
        cols, errors = MessageId.parse_columns(ids)
        with self._lock:
            epoch = self._admit("ids")
            out, end = self._moves.release(cols, errors, target, now)
        self._acked(end, epoch, "ids", always=True)
        return out

    def import_messages(self, rows: Sequence[ImportRow]) -> list[str | DelayqError]:
        """Schedule copies of messages released by another shard, at most one per
        source id (``timers.rebalance.transfer``); durable once this returns. The copy's id (or
        an error) per row."""
        now = self.clock.now_ms()
        with self._lock:
            epoch = self._admit("messages")
            out, end = self._moves.import_rows(rows, now)
        self._acked(end, epoch, "messages", always=True)
        return out

    # ------------------------------------------------------------------ compaction
    def add_block(
        self, job: str, start_ms: int, end_ms: int, rows: Sequence[BlockRow]
    ) -> list[BlockOutcome | DelayqError]:
        """Take these pending messages of this shard, due in ``[start_ms, end_ms)``,
        out of the roll cycle into a compaction block, loaded into the wheel when
        the block comes within a window (``timers.compaction``).
        An outcome (or error) per row; durable (fsynced, and held by the in-sync
        replicas) once this returns. ``InvalidArgument`` (nothing written) for a
        bad ``job``, ``end_ms`` or a ``start_ms`` less than two windows ahead."""
        now = self.clock.now_ms()
        with self._lock:
            epoch = self._admit("rows")
            out, end = add_block(self._state, job, start_ms, end_ms, rows, now)
        self._acked(end, epoch, "rows", always=True)
        return out

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
        self._refuse_unless_master("topic")
        return self._receiving.receive(topic, group, max_messages, invisible_ms, wait_ms, auto_ack)

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

    def ack(
        self, topic: str, group: str, receipts: Sequence[str]
    ) -> list[AckOutcome | DelayqError]:
        """Acknowledge received messages; durable once this returns."""
        self._refuse_unless_master("receipts")
        return self._receiving.settle(topic, group, receipts, None)

    def change_invisibility(
        self, topic: str, group: str, receipts: Sequence[str], invisible_ms: int
    ) -> list[AckOutcome | DelayqError]:
        """Move the redelivery time of received messages (0: redeliver now, a nack)."""
        self._refuse_unless_master("receipts")
        return self._receiving.settle(topic, group, receipts, invisible_ms)

    def _refuse_unless_master(self, what: str) -> None:
        with self._lock:
            self._check_running()
            transitions.refuse_unless_master(self._state, what, self.master_address)

    # ------------------------------------------------------------------ roles
    @property
    def role(self) -> Role:
        """The node's role now (a ``StrEnum``: ``"master"`` or ``"replica"``)."""
        st = getattr(self, "_state", None)
        role: Role = st.role if st is not None else self._start_role
        return role

    @property
    def fenced(self) -> bool:
        st = getattr(self, "_state", None)
        return st is not None and st.fenced

    def delivering(self) -> bool:
        """A master that may ack and deliver now (not fenced, lease running)."""
        st = getattr(self, "_state", None)
        return st is not None and self.running and st.delivering()

    def promote(
        self, epoch: int, lease_until: float | None = None, *, index_limit: int | None = None
    ) -> None:
        """Become the master in ``epoch`` (above this node's): see ``replication.transitions``.
        ``lease_until``: its lease's deadline on ``clock.monotonic_s`` (None: no lease,
        it never lapses; one already past: it acks nothing until renewed).
        ``index_limit``: sync replication's (``set_index_limit``), taken in the same
        step as the role, so nothing of the new epoch is indexed before it."""
        with self._lock:
            self._check_running()
            transitions.promote(self._state, epoch, lease_until, index_limit)
        log.warning("promoted to master", extra={"epoch": epoch, "shard": self.settings.shard})

    def follow(self) -> None:
        """Stop acking and delivering; apply a master's log from now on."""
        with self._lock:
            self._check_running()
            transitions.follow(self._state)

    def fence(self) -> None:
        """Stop acking and delivering now (until a promotion or a follow)."""
        with self._lock:
            self._check_running()
            transitions.fence(self._state)

    def renew_lease(self, until: float | None) -> None:
        """A master may ack and deliver until ``until`` on ``clock.monotonic_s``
        (None: for good); a deadline before the one it holds changes nothing."""
        with self._lock:
            self._check_running()
            transitions.renew(self._state, until)

    def hold_clock_back(self, ms: int) -> None:
        """Fire due times ``ms`` later from now on (``clock.ShardClock``; a no-op on
        any other clock, as tests' fake ones)."""
        if isinstance(self.clock, ShardClock) and ms > 0:
            self.clock.hold_back(ms)
            log.warning("clock held back", extra={"held_back_ms": self.clock.held_back_ms})

    def lease_bounded(self) -> bool:
        """A master whose lease can lapse (a control plane keeps it)."""
        st = getattr(self, "_state", None)
        return st is not None and st.lease_until is not None

    def set_index_limit(self, pos: int | None) -> None:
        """Sync replication: index for delivery only records before ``pos`` (the
        high-water mark); None: all."""
        with self._lock:
            st = self._state
            if pos != st.index_limit:
                st.index_limit = pos
                st.wakeups.link.notify()

    def set_ack_wait(self, wait: Callable[[int], None] | None) -> None:
        """Sync replication: ``wait(end)`` runs after a write's local fsync and
        returns once the in-sync replicas hold it (or raises ``Unavailable``)."""
        self._ack_wait = wait

    def read_log(self, pos: int, max_bytes: int = CHUNK_BYTES) -> tuple[int, bytes]:
        """A master: the next replication chunk after ``pos`` (``replication.chunks``)."""
        st = self._state
        return read_chunk(st.cl.log, st.cl.end, pos, st.epochs, max_bytes)

    def apply_replicated(self, pos: int, data: bytes, history: EpochHistory) -> int:
        """A replica: write its master's records ``data`` at ``pos`` and apply them
        (``timers.replicated``); return how many records."""
        with self._lock:
            self._check_running()
            st = self._state
            if st.role is not Role.REPLICA:
                raise FailedPrecondition("only a replica applies a master's log")
            return apply_chunk(st, self.consumers, pos, data, history)

    @property
    def receipt_key(self) -> bytes:
        """The shard's secret for receipt MACs (``receipts``), sent to its replicas."""
        return self.consumers.receipts.key

    def adopt_receipt_key(self, key: bytes) -> None:
        """A replica: check receipts under its master's ``key`` from now on, saved
        (fsynced) first, so that once promoted it takes the receipts its old master
        handed out. The same key again does nothing."""
        with self._lock:
            self._check_running()
            if self._state.role is not Role.REPLICA:
                raise FailedPrecondition("only a replica takes its master's receipt key")
            if key != self.consumers.receipts.key:
                path = Path(self.settings.data_dir) / receiptkey.RECEIPT_KEY_FILE
                receiptkey.save(path, key, self.clock.now_ms())
                self.consumers.use_receipt_key(key)

    @property
    def flushed(self) -> int:
        """CommitLog bytes known fsynced."""
        return self._commit.durable if hasattr(self, "_commit") else 0

    def sync_log(self) -> int:
        """fsync the CommitLog up to its end now (group commit); return that end."""
        end = self.commitlog_end
        self._commit.wait_durable(end)
        return end

    def rewind(self, pos: int) -> int:
        """Cut the log at ``pos`` and rebuild what derives from it (``timers.rewind``),
        then run again as a replica; return the bytes cut. Calls meanwhile are
        refused as during an open."""
        with self._lock:
            self._check_running()
            self._life = Lifecycle.NEW
        self._stages.stop()
        with self._lock:
            self._receiving.wake_waiters()
            self._close_files(killed=False)
        cut = rewind_dir(Path(self.settings.data_dir), pos, self.settings.commitlog_segment_bytes)
        log.warning("log cut back to the divergence point", extra={"at": pos, "bytes_cut": cut})
        self._wake = Wakeups()
        self._lock = self._wake.lock
        self._life = Lifecycle.NEW
        self._start_role = Role.REPLICA
        self.start()
        return cut

    # ------------------------------------------------------------------ export
    def begin_export(self, partition_bytes: int, since: int = 0) -> snapshot.ExportSnapshot:
        """A snapshot of the pending messages (``timers.rebalance.snapshot``), in partitions of
        about ``partition_bytes`` of log (from ``since``, an earlier snapshot's
        position, when given); ``end_export`` it when read."""
        with self._lock:
            self._check_running()
        return snapshot.take(self._state, partition_bytes, since)

    def export(
        self, snap: snapshot.ExportSnapshot, start: int, end: int, rows: int
    ) -> Generator[snapshot.ExportRows, None, None]:
        """The pending messages of partition ``[start, end)`` of ``snap``, ``rows`` a batch."""
        self._check_running()
        return snapshot.read_partition(self._state, snap, start, end, rows)

    @staticmethod
    def end_export(snap: snapshot.ExportSnapshot) -> None:
        """Done with ``snap``: retention may delete what it read."""
        snapshot.release(snap)

    # ------------------------------------------------------------------ observing
    @property
    def counters(self) -> collections.Counter[str]:
        """Event counts since start (scheduled, delivered, ...), for metrics."""
        return self._counters

    def stats(self, topic: str | None = None) -> list[TopicStats]:
        """Per-topic counts and due-time histogram; ``topic`` None: every topic."""
        if topic is not None:
            check_topic(topic)
        with self._lock:
            self._check_running()
            book = self._state.topics
            now = self.clock.now_ms()
            names = [topic] if topic is not None else sorted(book.ids)
            out = []
            for name in names:
                tid = book.ids.get(name)
                if tid is None:
                    raise NotFound("topic", f"unknown topic {quote(name)}")
                out.append(
                    TopicStats(
                        name,
                        *book.counts(tid),
                        self.consumers.backlogs(tid),
                        book.due_counts(tid).histogram(now),
                    )
                )
            return out

    def lateness(self) -> dict[str, int]:
        """Release lateness so far (p50/p99 as bucket upper bounds, ms) and how far
        the oldest due, unreleased message is behind now (``release_lag_ms``)."""
        hist = self.lateness_snapshot()
        with self._lock:
            head = self._state.release.next_due_ms()
            now = self.clock.now_ms()
        lag = max(0, now - head) if head is not None else 0
        p50, p99 = hist.percentile(0.5), hist.percentile(0.99)
        return {"p50": p50, "p99": p99, "release_lag_ms": lag, "count": hist.count}

    def lateness_snapshot(self) -> LatenessHistogram:
        """A copy of the release lateness histogram, its counts and sum taken together
        (under the lock: the release stage adds to both)."""
        with self._lock:
            return self._state.lateness.copy()

    @property
    def group_commit(self) -> GroupCommit:
        """The CommitLog's group commit: its durable position and fsync counts."""
        return self._commit

    def pending_by_topic(self) -> dict[str, int]:
        """Pending messages per topic name (cheap: no due-time histograms)."""
        with self._lock:
            return self._state.topics.pending_by_name()

    def gauges(self) -> dict[str, int]:
        """Queue depths and positions, for metrics."""
        with self._lock:
            return self._stages.gauges()

    def inspect(self) -> Inspection:
        """A look inside the running shard, for tests and tools (see ``inspection``)."""
        self._check_running()
        return Inspection(self._state, self._stages)

    # ------------------------------------------------------------------ driving
    def pump(self) -> None:
        """Run every stage until nothing is left to do at the clock's current time.

        For engines made with ``background=False`` (tests, tools)."""
        with self._lock:
            self._check_running()
            self._stages.pump()

    def checkpoint(self) -> Checkpoint:
        """fsync everything and atomically write a checkpoint; then apply retention."""
        return self._stages.checkpoint.checkpoint()


def _parsed(texts: Sequence[str]) -> list[MessageId | None]:
    """The ids parsed together (None where malformed: the call names it later)."""
    cols, errors = MessageId.parse_columns(texts)
    return [None if i in errors else MessageId(*c) for i, c in enumerate(cols.tolist())]
