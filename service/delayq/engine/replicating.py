"""The engine's part that replication drives (``Replicating``): the node's role,
epoch and lease on the shard's state (``timers.lifecycle.roles``), the master's
reads of its log for the stream (``store.chunks``) and its growth, which the
stream awaits (``store.growth``), a replica's writes of its
master's (``timers.lifecycle.replicated``), the receipt key, the sync-ack wait
and the rewind of a diverged log (``timers.lifecycle.rewind``).

It satisfies ``replication.ports.ReplicaEngine`` structurally: replication sits
above the engine and reaches it through that protocol only; nothing here imports
replication. What it answers whatever the lifecycle (role, epoch, log end) comes
from the shard last opened, or before the first open from the settings and the
role it will start in.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from ..clock import Clock, ShardClock
from ..epochs import EpochHistory
from ..errors import FailedPrecondition
from ..role import Role
from ..settings import EngineSettings
from ..store import receiptkey
from ..store.chunks import CHUNK_BYTES, read_chunk
from ..store.growth import LogGrowth
from ..timers.lifecycle import roles
from ..timers.lifecycle.newepoch import begin_epoch
from ..timers.lifecycle.replicated import apply_chunk
from ..timers.lifecycle.rewind import rewind_dir
from .lifecycle import ShardLife

__all__ = ["Replicating"]

log = logging.getLogger("delayq.engine")


class Replicating:
    """Thread-safe: role changes and applies take the shard's lock; the log's
    reads need none (records before its end never change)."""

    def __init__(self, life: ShardLife) -> None:
        self._life = life
        self.settings: EngineSettings = life.setup.settings
        self.clock: Clock = life.setup.clock
        # told of every CommitLog append, whatever its write path; one for the
        # engine's life (the stream's readers wait on it across a rewind's reopen)
        self.log_growth = LogGrowth(lambda: self.commitlog_end)
        life.setup.on_append = self.log_growth.notify

    # ------------------------------------------------------------------ what it is
    @property
    def running(self) -> bool:
        """Opened (recovered) and not closed: calls are taken."""
        return self._life.running

    @property
    def master_address(self) -> str:
        """A replica's master, named to the calls it refuses ("" while none is known)."""
        return self._life.setup.master_address

    @master_address.setter
    def master_address(self, address: str) -> None:
        self._life.setup.master_address = address

    @property
    def role(self) -> Role:
        """The node's role now (a ``StrEnum``: ``"master"`` or ``"replica"``)."""
        sh = self._life.last
        return sh.state.office.role if sh is not None else self._life.start_role

    @property
    def epoch(self) -> int:
        """The epoch new records and ids are written in: the higher of
        ``settings.epoch`` and the one the data directory last recorded."""
        sh = self._life.last
        return sh.state.office.epoch if sh is not None else self.settings.epoch

    @property
    def epochs(self) -> EpochHistory:
        """The shard's epoch history (epoch -> first CommitLog position written in it)."""
        sh = self._life.last
        return sh.state.office.epochs if sh is not None else EpochHistory()

    @property
    def commitlog_end(self) -> int:
        """Bytes of CommitLog written (0 before the engine is open)."""
        sh = self._life.last
        return sh.state.cl.end if sh is not None else 0

    @property
    def flushed(self) -> int:
        """CommitLog bytes known fsynced."""
        sh = self._life.last
        return sh.commit.durable if sh is not None else 0

    @property
    def fenced(self) -> bool:
        sh = self._life.last
        return sh is not None and sh.state.office.fenced

    def delivering(self) -> bool:
        """A master that may ack and deliver now (not fenced, lease running)."""
        sh = self._life.last
        return sh is not None and self.running and sh.state.office.delivering()

    def lease_left_s(self) -> float | None:
        """Seconds a master's lease has left (0 once lapsed); None: not a master, or
        a lease that never lapses."""
        sh = self._life.last
        if sh is None or sh.state.office.lease_until is None or self.role is not Role.MASTER:
            return None
        left: float = sh.state.office.lease_until - self.clock.monotonic_s()
        return max(0.0, left)

    def lease_bounded(self) -> bool:
        """A master whose lease can lapse (a control plane keeps it)."""
        sh = self._life.last
        return sh is not None and sh.state.office.lease_until is not None

    # ------------------------------------------------------------------ roles
    def start_as_replica(self) -> None:
        """Open (``Engine.start``) as a replica: nothing fires or is acked until a
        ``promote``. Call before ``start``."""
        self._life.start_role = Role.REPLICA

    def begin_epoch(self, epoch: int) -> None:
        """Write in ``epoch`` from now on (a new master's fencing token): recorded,
        fsynced, from the CommitLog's end, before anything is written in it. The
        same epoch again does nothing; a lower one is ``FailedPrecondition``."""
        with self._life.held() as sh:
            begin_epoch(sh.state, epoch)

    def promote(
        self, epoch: int, lease_until: float | None = None, *, index_limit: int | None = None
    ) -> None:
        """Become the master in ``epoch`` (above this node's): see
        ``timers.lifecycle.roles``. ``lease_until``: its lease's deadline on
        ``clock.monotonic_s`` (None: no lease, it never lapses; one already past:
        it acks nothing until renewed). ``index_limit``: sync replication's
        (``set_index_limit``), taken in the same step as the role, so nothing of
        the new epoch is indexed before it."""
        with self._life.held() as sh:
            roles.promote(sh.state, epoch, lease_until, index_limit)
        log.warning("promoted to master", extra={"epoch": epoch, "shard": self.settings.shard})

    def follow(self) -> None:
        """Stop acking and delivering; apply a master's log from now on."""
        with self._life.held() as sh:
            roles.follow(sh.state)

    def fence(self) -> None:
        """Stop acking and delivering now (until a promotion or a follow)."""
        with self._life.held() as sh:
            roles.fence(sh.state)

    def renew_lease(self, until: float | None) -> None:
        """A master may ack and deliver until ``until`` on ``clock.monotonic_s``
        (None: for good); a deadline before the one it holds changes nothing."""
        with self._life.held() as sh:
            roles.renew(sh.state, until)

    def hold_clock_back(self, ms: int) -> None:
        """Fire due times ``ms`` later from now on (``clock.ShardClock``; a no-op on
        any other clock, as tests' fake ones)."""
        if isinstance(self.clock, ShardClock) and ms > 0:
            self.clock.hold_back(ms)
            log.warning("clock held back", extra={"held_back_ms": self.clock.held_back_ms})

    # ------------------------------------------------------------------ sync replication
    def set_index_limit(self, pos: int | None) -> None:
        """Sync replication: index for delivery only records before ``pos`` (the
        high-water mark); None: all."""
        with self._life.lock:
            st = self._life.latest().state
            if pos != st.office.index_limit:
                st.office.index_limit = pos
                st.wakeups.link.notify()

    def set_ack_wait(self, wait: Callable[[int], None] | None) -> None:
        """Sync replication: ``wait(end)`` runs after a write's local fsync and
        returns once the in-sync replicas hold it (or raises ``Unavailable``)."""
        self._life.setup.ack_wait = wait

    # ------------------------------------------------------------------ the stream
    def read_log(self, pos: int, max_bytes: int = CHUNK_BYTES) -> tuple[int, bytes]:
        """A master: the next replication chunk after ``pos`` (``store.chunks``)."""
        st = self._life.latest().state
        return read_chunk(st.cl.log, st.cl.end, pos, st.office.epochs, max_bytes)

    def apply_replicated(self, pos: int, data: bytes, history: EpochHistory) -> int:
        """A replica: write its master's records ``data`` at ``pos`` and apply them
        (``timers.lifecycle.replicated``); return how many records."""
        with self._life.held() as sh:
            if sh.state.office.role is not Role.REPLICA:
                raise FailedPrecondition("only a replica applies a master's log")
            return apply_chunk(sh.state, sh.consumers, pos, data, history)

    def sync_log(self) -> int:
        """fsync the CommitLog up to its end now (group commit); return that end."""
        sh = self._life.latest()
        end = sh.state.cl.end
        sh.commit.wait_durable(end)
        return end

    @property
    def receipt_key(self) -> bytes:
        """The shard's secret for receipt MACs (``receipts``), sent to its replicas."""
        return self._life.latest().consumers.receipts.key

    def adopt_receipt_key(self, key: bytes) -> None:
        """A replica: check receipts under its master's ``key`` from now on, saved
        (fsynced) first, so that once promoted it takes the receipts its old master
        handed out. The same key again does nothing."""
        with self._life.held() as sh:
            if sh.state.office.role is not Role.REPLICA:
                raise FailedPrecondition("only a replica takes its master's receipt key")
            if key != sh.consumers.receipts.key:
                path = Path(self.settings.data_dir) / receiptkey.RECEIPT_KEY_FILE
                receiptkey.save(path, key, self.clock.now_ms())
                sh.consumers.use_receipt_key(key)

    def rewind(self, pos: int) -> int:
        """Cut the log at ``pos`` and rebuild what derives from it
        (``timers.lifecycle.rewind``), then run again as a replica; return the bytes
        cut. Calls meanwhile are refused as during an open."""
        settings = self.settings

        def cut() -> int:
            n = rewind_dir(Path(settings.data_dir), pos, settings.commitlog_segment_bytes)
            log.warning("log cut back to the divergence point", extra={"at": pos, "bytes_cut": n})
            return n

        return self._life.reopen(cut)
