"""The opened shard (``OpenShard``): what the engine's parts share once its data
directory is open, and the rules every acking call shares.

An ``OpenShard`` exists only for an opened (recovered) shard: its state and
files (``timers.state.ShardState``), the one lock and the stages' wake-ups, the
delivery side (``Consumers`` and the consumer calls, ``Receiving``), the timer
stages (the release stage's firer of recurring schedules: ``firing``), the
by-id, by-key and move operations over them, and the CommitLog's group commit.
``lifecycle.ShardLife`` opens one and hands it to a part only while it runs; a
rewind opens a new one. What outlives an open (settings, clock, the
event counters, the receivable hooks, what replication set, the topics' shard
count) is ``ShardSetup``.

The rules: a write is admitted only from a master in office (``admit``, with
the lock held) and acknowledged only if it still is once durable (``acked``,
without it): fsynced when ``flush=sync`` (or always, for moves) and held by the
in-sync replicas in sync replication (``ShardSetup.ack_wait``).
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..clock import Clock
from ..delivery.consumers import Consumers
from ..delivery.grouppolicies import GroupPolicies
from ..delivery.receiving import Receiving
from ..settings import EngineSettings, FlushPolicy
from ..store import receiptkey
from ..store.commitlog import CommitLog
from ..store.quarantine import Quarantine
from ..timers.byid import ById
from ..timers.bykey import ByKey
from ..timers.columns import Prepared
from ..timers.lifecycle import roles
from ..timers.lifecycle.keyrecovery import close_keys
from ..timers.lifecycle.opening import open_shard
from ..timers.memory.lateness import LatenessHistogram
from ..timers.pipeline import Stages
from ..timers.rebalance.transfer import Moves
from ..timers.stages.accept import Acceptor
from ..timers.stages.groupcommit import GroupCommit
from ..timers.state import ShardState
from ..timers.wakeups import Wakeups
from ..types import ScheduleRequest
from .firing import Firer
from .validation import prepare

__all__ = ["OpenShard", "ShardSetup"]

log = logging.getLogger("delayq.engine")


@dataclass(eq=False)
class ShardSetup:
    """What an engine keeps across the opens of its shard (a rewind reopens it)."""

    settings: EngineSettings
    clock: Clock
    background: bool  # False: nothing runs until ``pump()`` (tests drive a fake clock)
    counters: collections.Counter[str] = field(default_factory=collections.Counter)
    # see Engine.on_receivable: called by the consumer calls' wake, lock held
    receivable_hooks: list[Callable[[], None]] = field(default_factory=list)
    # sync replication: after the local fsync, wait for the in-sync replicas
    ack_wait: Callable[[int], None] | None = None
    master_address: str = ""  # a replica's master, named to calls it refuses
    # told of every CommitLog append (``Replicating.log_growth``: the replication
    # stream's readers wait on it); handed to each CommitLog opened (a rewind reopens)
    on_append: Callable[[], None] | None = None
    topic_shards: int = 1  # how many shards the topics span (``Engine.set_topic_shards``)
    # the map's shards listed and not leaving, and joining (``Engine.set_map_shards``)
    listed: frozenset[int] | None = None
    joining: frozenset[int] | None = None
    # how late recurring schedules' firings were written after their nominal time
    # (``firing.Firer``; written ahead: 0)
    schedule_lateness: LatenessHistogram = field(default_factory=LatenessHistogram)


class OpenShard:
    """One opened shard; not thread-safe itself: its callers hold ``lock`` for all
    but ``acked``/``made_durable`` (which wait for fsync outside it)."""

    def __init__(
        self, setup: ShardSetup, wakeups: Wakeups, check_running: Callable[[], None]
    ) -> None:
        """Open and recover the shard in ``setup.settings.data_dir`` (``open_shard``);
        ``check_running`` raises unless the engine takes calls (the consumer calls
        look again while they wait)."""
        self.setup = setup
        settings, clock = setup.settings, setup.clock

        def consumers(ready_dir: Path, cl: CommitLog, quarantine: Quarantine) -> Consumers:
            key_file = Path(settings.data_dir) / receiptkey.RECEIPT_KEY_FILE
            key = receiptkey.load_or_create(key_file, clock.now_ms())
            policies = GroupPolicies(settings, seed=settings.shard)  # the jitter's RNG
            return Consumers(ready_dir, cl, settings.shard, quarantine, key, policies)

        st, self.consumers = open_shard(
            settings, clock, wakeups, consumers, setup.counters, (setup.listed, setup.joining)
        )
        self.consumers.policies.set_shards(setup.topic_shards)
        if setup.on_append is not None:
            st.cl.on_append = setup.on_append
        self.state: ShardState = st
        self.lock: threading.RLock = wakeups.lock
        self.receiving = Receiving(
            self.consumers,
            lock=self.lock,
            clock=clock,
            counters=st.counters,
            topic_id=st.topics.ids.get,
            made_durable=self.made_durable,
            check_running=check_running,
            wait=setup.background,
            hooks=setup.receivable_hooks,
        )
        self.accept = Acceptor(st)

        def check(req: ScheduleRequest, now_ms: int, prefix: str = "") -> Prepared:
            return prepare(req, now_ms, settings, prefix)  # client input: this boundary's

        self.byid = ById(st, self.accept, check)
        self.bykey = ByKey(st, self.accept, self.byid)
        self.moves = Moves(st, self.accept, check)
        self.commit = GroupCommit(self._prepare_commit, st.cl.end)
        firer = Firer(st, self.accept, self.bykey, setup.schedule_lateness)
        self.stages = Stages.build(
            st, self.consumers, self.receiving.wake, self.commit.wait_durable, firer
        )
        log.info("engine open", extra={"data_dir": str(st.files.dir), "recovery": st.recovery})

    def admit(self, what: str) -> int:
        """Under the lock: refuse unless this node may ack ``what`` now; the epoch
        it is admitted in (for ``acked``)."""
        roles.refuse_unless_master(self.state, what, self.setup.master_address)
        return self.state.office.epoch

    def acked(self, end: int, epoch: int, what: str, *, always: bool = False) -> None:
        """Make a write admitted in ``epoch`` durable (``made_durable``), then check
        again that it may be acknowledged (``roles.refuse_unless_still``)."""
        self.made_durable(end, always=always)
        if end:
            with self.lock:
                roles.refuse_unless_still(self.state, what, epoch, self.setup.master_address)

    def made_durable(self, end: int, *, always: bool = False) -> None:
        """Wait until ``end`` is fsynced (``flush=sync``, or ``always``) and held by
        the in-sync replicas (sync replication)."""
        if end and (always or self.setup.settings.flush is FlushPolicy.SYNC):
            self.commit.wait_durable(end)
        wait = self.setup.ack_wait
        if end and wait is not None:
            wait(end)

    def close_files(self, *, killed: bool) -> None:
        """Close the consumers' and the shard's files (lock held); ``killed``: as a
        kill would, what is in memory only is lost."""
        try:
            if not killed:
                close_keys(self.state)
            self.consumers.close(write_tails=not killed)
        finally:
            self.state.files.close(killed=killed)

    def _prepare_commit(self) -> tuple[int, list[int]]:
        with self.lock:
            cl = self.state.cl
            return cl.end, cl.log.take_unsynced()
