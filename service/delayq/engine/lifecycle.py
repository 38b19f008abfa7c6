"""The engine's lifecycle over its shard (``ShardLife``): NEW -> RUNNING ->
CLOSED, and the one place a part gets the opened shard.

``start()`` opens (recovers) the shard, an ``OpenShard``, and is idempotent;
``close()`` links what is queued, flushes and checkpoints; any call after it
raises ``EngineClosed``. A part reaches the shard only through ``held()`` (the
lock taken, the shard running, else ``EngineClosed``) or ``opened()`` (the same
check, for a caller that holds the lock or needs none): "not open yet" is that
one explicit check, never an attribute that may be missing. ``last`` is the
shard last opened (None before the first open), for what is answered whatever
the lifecycle (a node's role, epoch and log end).

``reopen`` is a replica's rewind: close without a checkpoint, change the closed
data directory, open again as a replica with a fresh lock; calls meanwhile are
refused as during an open, and a ``close()`` meanwhile is final (the rewind then
raises ``EngineClosed`` instead of opening again). A caller that waited for the
old lock across a rewind takes the new one before it gets the shard. With
``background=True`` every stage has a thread; with ``background=False`` nothing
runs until ``pump()``.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import threading
from collections.abc import Callable, Iterator

from ..errors import EngineClosed
from ..role import Role
from ..timers.lifecycle import roles
from ..timers.wakeups import Wakeups
from .shard import OpenShard, ShardSetup

__all__ = ["Lifecycle", "ShardLife"]

log = logging.getLogger("delayq.engine")


class Lifecycle(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    CLOSED = "closed"


class ShardLife:
    """Thread-safe: transitions take the shard's lock."""

    def __init__(self, setup: ShardSetup) -> None:
        self.setup = setup
        self.start_role = Role.MASTER  # what ``start`` opens as (``start_as_replica``)
        self._life = Lifecycle.NEW
        self._wake = Wakeups()
        self._shard: OpenShard | None = None
        self._closed = False  # close() or abandon() was called: nothing opens again

    @property
    def lock(self) -> threading.RLock:
        """The shard's one lock (``timers.wakeups``); a new one after a rewind."""
        return self._wake.lock

    @property
    def running(self) -> bool:
        """Opened (recovered) and not closed: calls are taken."""
        return self._life is Lifecycle.RUNNING and not self._wake.stopped

    @property
    def last(self) -> OpenShard | None:
        """The shard last opened, running or not (None: never opened)."""
        return self._shard

    def opened(self) -> OpenShard:
        """The running shard; ``EngineClosed`` when it is not (not yet, or no more)."""
        if self._shard is None or not self.running:
            raise EngineClosed("engine is not running")
        return self._shard

    def latest(self) -> OpenShard:
        """The shard last opened, running or closed (what it held stays readable
        once closed: metrics read it while it closes); ``EngineClosed`` before the
        first open."""
        if self._shard is None:
            raise EngineClosed("engine is not open yet")
        return self._shard

    @contextlib.contextmanager
    def held(self) -> Iterator[OpenShard]:
        """The running shard with its lock held (``opened`` under ``lock``)."""
        while True:
            lock = self.lock
            with lock:
                if lock is self.lock:  # else a rewind swapped it while this waited
                    yield self.opened()
                    return

    def check_running(self) -> None:
        self.opened()

    # ------------------------------------------------------------------ transitions
    def start(self) -> None:
        with self.lock:
            if self._life is Lifecycle.RUNNING:
                return
            if self._life is Lifecycle.CLOSED:
                raise EngineClosed("engine was closed; open a new Engine")
            shard = self._shard = OpenShard(self.setup, self._wake, self.check_running)
            if self.start_role is Role.REPLICA:
                roles.follow(shard.state)
            self._life = Lifecycle.RUNNING
        if self.setup.background:
            shard.stages.start()

    def close(self) -> dict[str, int]:
        """See ``Engine.close``."""
        with self.lock:
            self._closed = True
            shard = self._shard
            if self._life is not Lifecycle.RUNNING or shard is None:
                self._life = Lifecycle.CLOSED
                return {}
        self._stop_stages(shard)
        st = shard.state
        try:
            with self.lock:
                while st.enqueue_q and shard.stages.link.step():
                    pass
            shard.stages.checkpoint.checkpoint()
        except Exception:  # a full disk, say: close as a kill would, nothing is lost
            log.exception("closing without a final checkpoint; the next start replays the log")
            with contextlib.suppress(OSError):
                st.cl.sync()  # what was written is safe from a power loss too, if it can be
            killed = True
        else:
            killed = False
        with self.lock:
            left = {"enqueue_queue": len(st.enqueue_q), "release_buffer": len(st.release)}
            self._close_files(shard, killed=killed)
        log.info("engine closed", extra={"left": left})
        return left

    def abandon(self) -> None:
        """See ``Engine.abandon``."""
        with self.lock:
            self._closed = True
        shard = self._shard
        if shard is None:
            self._life = Lifecycle.CLOSED
            return
        self._stop_stages(shard)
        with self.lock:
            self._close_files(shard, killed=True)

    def reopen(self, change: Callable[[], int]) -> int:
        """Close the running shard (no checkpoint: what derives from the log is
        about to be rebuilt), run ``change`` on the closed data directory, and open
        it again as a replica; return what ``change`` returned."""
        with self.held() as shard:
            self._life = Lifecycle.NEW
        shard.stages.stop()
        with self.lock:
            shard.receiving.wake_waiters()
            self._close_files(shard, killed=False)
        out = change()
        with self.lock:  # the old lock: a close() meanwhile has taken it
            if self._closed:
                raise EngineClosed("engine closed while its log was rewound")
            self._wake = Wakeups()
            self._life = Lifecycle.NEW
        self.start_role = Role.REPLICA
        self.start()
        return out

    def _stop_stages(self, shard: OpenShard) -> None:
        shard.stages.stop()
        with self.lock:
            shard.receiving.wake_waiters()  # waiting receivers see the engine stopped

    def _close_files(self, shard: OpenShard, *, killed: bool) -> None:
        self._life = Lifecycle.CLOSED
        shard.close_files(killed=killed)
