"""The engine's core (``EngineCore``): one shard's lifecycle and the rules every
call shares, under which the facade's sides (``engine``, ``replica``, ``moves``,
``observing``) work.

With ``background=True`` every stage has a thread; with ``background=False``
nothing runs until ``pump()`` is called, which is how tests drive years of
fake-clock time deterministically. One lock guards the shard's state (see
``timers.wakeups.Wakeups``); calls hold it for in-memory work and one batched
write, and wait for fsync (``flush=sync``) outside it.

Lifecycle: NEW -> RUNNING -> CLOSED. ``start()`` is idempotent; ``close()``
links what is queued, flushes and checkpoints; any call after it raises
``EngineClosed``. A write is admitted only from a master in office
(``_admit``) and acknowledged only if it still is once durable (``_acked``).
"""

from __future__ import annotations

import collections
import contextlib
import enum
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Self

from ..clock import Clock, ShardClock
from ..delivery.consumers import Consumers
from ..delivery.receiving import Receiving
from ..epochs import EpochHistory
from ..errors import EngineClosed
from ..ids import MessageId
from ..replication import transitions
from ..role import Role
from ..settings import EngineSettings, FlushPolicy
from ..store import receiptkey
from ..store.checkpoint import Checkpoint
from ..store.commitlog import CommitLog
from ..store.growth import LogGrowth
from ..store.quarantine import Quarantine
from ..timers.byid import ById
from ..timers.columns import Prepared
from ..timers.lifecycle.newepoch import begin_epoch
from ..timers.lifecycle.opening import open_shard
from ..timers.pipeline import Stages
from ..timers.rebalance.transfer import Moves
from ..timers.stages.accept import Acceptor
from ..timers.stages.groupcommit import GroupCommit
from ..timers.state import ShardState
from ..timers.wakeups import Wakeups
from ..types import (
    ScheduleRequest,
)
from .validation import prepare

__all__ = ["EngineCore", "Lifecycle", "parse_ids"]

log = logging.getLogger("delayq.engine")


class Lifecycle(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    CLOSED = "closed"


class EngineCore:
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
        # told of every CommitLog append (the replication stream awaits it); one for
        # the engine's life, handed to each CommitLog it opens (a rewind opens anew)
        self.log_growth = LogGrowth(lambda: self.commitlog_end)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Self:
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
        st.cl.on_append = self.log_growth.notify
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
        return st.office.epoch if st is not None else self.settings.epoch

    @property
    def epochs(self) -> EpochHistory:
        """The shard's epoch history (epoch -> first CommitLog position written in it)."""
        st = getattr(self, "_state", None)
        return st.office.epochs if st is not None else EpochHistory()

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

    def __enter__(self) -> Self:
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

    def checkpoint(self) -> Checkpoint:
        """fsync everything and atomically write a checkpoint; then apply retention."""
        return self._stages.checkpoint.checkpoint()

    def _check_running(self) -> None:
        if not self.running:
            raise EngineClosed("engine is not running")

    def _admit(self, what: str) -> int:
        """Under the lock: refuse unless this node may ack ``what`` now; the epoch
        it is admitted in (for ``_acked``)."""
        self._check_running()
        transitions.refuse_unless_master(self._state, what, self.master_address)
        return self._state.office.epoch

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

    def _local_ids(self, ids: Sequence[str]) -> list[str]:
        """``ids`` with those of messages moved here (ids the import index knows: of
        other shards, or of this one for a message that left and came back) replaced
        by the id of their copy here."""
        st, shard = self._state, self.settings.shard
        if not len(st.imports):
            return list(ids)
        out = list(ids)
        for i, mid in enumerate(parse_ids(ids)):
            if mid is not None:  # (one of this shard's own: a message that came back)
                had = st.imports.get(mid)
                if had is not None:
                    out[i] = str(MessageId(shard, *had))
        return out

    def _refuse_unless_master(self, what: str) -> None:
        with self._lock:
            self._check_running()
            transitions.refuse_unless_master(self._state, what, self.master_address)


def parse_ids(texts: Sequence[str]) -> list[MessageId | None]:
    """The ids parsed together (None where malformed: the call names it later)."""
    cols, errors = MessageId.parse_columns(texts)
    return [None if i in errors else MessageId(*c) for i, c in enumerate(cols.tolist())]
