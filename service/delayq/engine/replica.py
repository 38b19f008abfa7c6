"""The engine's replication side (``ReplicaSide``): the node's role and lease as
``replication.node`` drives it (``replication.ports.ReplicaEngine``), and the
stream's reads and writes of the log (chunks, apply, rewind, the receipt key).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from ..clock import ShardClock
from ..epochs import EpochHistory
from ..errors import FailedPrecondition
from ..replication import transitions
from ..replication.apply import apply_chunk
from ..replication.chunks import CHUNK_BYTES, read_chunk
from ..replication.rewind import rewind_dir
from ..role import Role
from ..store import receiptkey
from ..timers.wakeups import Wakeups
from .core import EngineCore, Lifecycle

__all__ = ["ReplicaSide"]

log = logging.getLogger("delayq.engine")


class ReplicaSide(EngineCore):
    # ------------------------------------------------------------------ roles
    @property
    def role(self) -> Role:
        """The node's role now (a ``StrEnum``: ``"master"`` or ``"replica"``)."""
        st = getattr(self, "_state", None)
        role: Role = st.office.role if st is not None else self._start_role
        return role

    @property
    def fenced(self) -> bool:
        st = getattr(self, "_state", None)
        return st is not None and st.office.fenced

    def delivering(self) -> bool:
        """A master that may ack and deliver now (not fenced, lease running)."""
        st = getattr(self, "_state", None)
        return st is not None and self.running and st.office.delivering()

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

    def lease_left_s(self) -> float | None:
        """Seconds a master's lease has left (0 once lapsed); None: not a master, or
        a lease that never lapses."""
        st = getattr(self, "_state", None)
        if st is None or st.office.lease_until is None or self.role is not Role.MASTER:
            return None
        left: float = st.office.lease_until - self.clock.monotonic_s()
        return max(0.0, left)

    def lease_bounded(self) -> bool:
        """A master whose lease can lapse (a control plane keeps it)."""
        st = getattr(self, "_state", None)
        return st is not None and st.office.lease_until is not None

    def set_index_limit(self, pos: int | None) -> None:
        """Sync replication: index for delivery only records before ``pos`` (the
        high-water mark); None: all."""
        with self._lock:
            st = self._state
            if pos != st.office.index_limit:
                st.office.index_limit = pos
                st.wakeups.link.notify()

    def set_ack_wait(self, wait: Callable[[int], None] | None) -> None:
        """Sync replication: ``wait(end)`` runs after a write's local fsync and
        returns once the in-sync replicas hold it (or raises ``Unavailable``)."""
        self._ack_wait = wait

    def read_log(self, pos: int, max_bytes: int = CHUNK_BYTES) -> tuple[int, bytes]:
        """A master: the next replication chunk after ``pos`` (``replication.chunks``)."""
        st = self._state
        return read_chunk(st.cl.log, st.cl.end, pos, st.office.epochs, max_bytes)

    def apply_replicated(self, pos: int, data: bytes, history: EpochHistory) -> int:
        """A replica: write its master's records ``data`` at ``pos`` and apply them
        (``replication.apply``); return how many records."""
        with self._lock:
            self._check_running()
            st = self._state
            if st.office.role is not Role.REPLICA:
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
            if self._state.office.role is not Role.REPLICA:
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
        """Cut the log at ``pos`` and rebuild what derives from it (``replication.rewind``),
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
