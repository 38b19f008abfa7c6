"""This node's part in its shard, as the admin service drives it: role commands
with epochs, the master's lease and followers, the replica's follower loop.

Invariants: ``epoch`` (the highest epoch this node has been told of or written
in) only rises, and a command below it is refused (FAILED_PRECONDITION); a
master's lease, once a control plane keeps it, lapses unless renewed by a
``Status`` probe of the node's own epoch that hands back one of its answers'
tokens (``replication.lease``: the lease counts from that answer, so it lapses
here before the control plane counts it gone, whatever the probe's delay); a
node that follows runs exactly one follower loop, to the master it was last
told of, and role commands (Promote, Follow, Fence) run one at a time and to
their end even when their caller stops waiting. The lease, the followers'
liveness and the skew's window are timed on the engine's clock
(``Clock.monotonic_s``): a ``FakeClock`` drives them all.

A master never kept (started as master, no probe yet) has no lease and never
lapses; the first probe with a lease bounds it, from that probe's arrival (which
precedes the answer the control plane then counts from), and its answers say so
(``leased``). A ``Promote`` with a lease takes office with the lease its token
grants (lapsed when none: the next probe grants it).

Stepping down (``step_down``, on SIGTERM): a master that a control plane keeps
(it has renewed its lease) fences itself at once, so it acks and delivers
nothing more, and answers until the next ``Status`` probe has seen it fenced
(at most ``STEP_DOWN_S``): the control plane then promotes a replica without
waiting out the lease, and a deleted master pod hands over in a probe round.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

from ..errors import FailedPrecondition
from ..role import Role
from ..tls import TlsConfig
from .follow import follow_master
from .followers import Followers
from .lease import LeaseTokens
from .ports import ReplicaEngine
from .skew import ClockSkew

__all__ = ["STEP_DOWN_S", "ShardNode"]

log = logging.getLogger("delayq.replication")

STEP_DOWN_S = 1.5
"""How long a stepping-down master waits for the control plane to see it fenced."""


E = TypeVar("E", bound=ReplicaEngine)


class ShardNode(Generic[E]):
    def __init__(
        self,
        engine: E,
        *,
        name: str,
        address: str,
        admin_address: str = "",
        replication: str = "async",
        min_insync: int = 2,
        ack_timeout_s: float = 3.0,
        follow: str = "",
        replica: bool = False,
        on_master: Callable[[str], None] = lambda address: None,
        tls: TlsConfig | None = None,
    ) -> None:
        """``address``: the public one (clients'); ``admin_address``: the admin
        service's, which replicas follow. ``follow``: start as a replica of the
        master at that admin address; ``replica``: start as a replica of no one
        yet (until a Follow or Promote)."""
        self.engine = engine
        self.name = name
        self.address = address
        self.admin_address = admin_address or address
        self.replication = replication
        self.min_insync = min_insync if replication == "sync" else 1
        self._ack_timeout_s = ack_timeout_s
        # the master's admin address (this one's, as master; "" while none is known)
        self.master = follow or ("" if replica else self.admin_address)
        self._told_epoch = 0
        self.failovers = 0
        self.last_failover_ms = 0
        """Wall time (ms) of the last promotion this process took; 0: none."""
        self.streaming = False  # a replica: its stream is up
        self.closing = False  # the server stops: streams to replicas end
        self._kept = False  # a control plane has renewed this master's lease
        self.tokens = LeaseTokens(engine.clock)  # the clock the engine checks the lease by
        self.skew = ClockSkew()  # how far this clock may run ahead of the master's
        self._probes = asyncio.Event()  # set by every Status probe
        self.followers = Followers(
            name,
            lambda: engine.flushed,
            clock=engine.clock,
            min_insync=self.min_insync,
            on_high_water=self._marked,
        )
        self._follower: asyncio.Task[None] | None = None
        self._follower_stop = asyncio.Event()
        self._commands = asyncio.Lock()  # role commands run one at a time, whole
        self._on_master = on_master  # told the master's public address when it changes
        self._tls = tls  # how the master's admin port is dialled (None: plaintext)
        if follow or replica:
            engine.start_as_replica()
            self._set_master(self.master, "")  # its public one: from its stream
        else:
            self._set_master(self.master, address)

    # -- life ----------------------------------------------------------------
    def started(self) -> None:
        """The engine is open: take up the role."""
        if self.engine.role is Role.REPLICA:
            if self.master:
                self._run_follower()
        else:
            self._as_master()

    async def step_down(self) -> bool:
        """Leave on purpose (module notes); False when there is nothing to hand
        over (not a master, already fenced, or no control plane keeps it)."""
        if self.engine.role is not Role.MASTER or self.engine.fenced or not self._kept:
            return False
        await asyncio.to_thread(self.engine.fence)
        self._changed()
        self._probes.clear()
        log.info("stepping down: fenced, waiting for the control plane's probe")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._probes.wait(), STEP_DOWN_S)
            await asyncio.sleep(0.05)  # its answer on the wire
        return True

    async def stop(self) -> None:
        """End the follower loop and the streams to replicas (before the server's
        grace period, which would otherwise wait for them)."""
        self.closing = True
        self._changed()
        await self._stop_follower()

    @property
    def epoch(self) -> int:
        return max(self.engine.epoch, self._told_epoch)

    def check_epoch(self, epoch: int, what: str, *, above: bool = False) -> None:
        mine = self.epoch
        if epoch < mine or (above and epoch == mine):
            need = "above" if above else "at least"
            raise FailedPrecondition(
                f"{what}: epoch {epoch} is stale; this node is at epoch {mine} (need {need} it)"
            )

    # -- commands ------------------------------------------------------------
    async def promote(
        self, epoch: int, insync: frozenset[str], lease_ms: int, token: int = 0
    ) -> None:
        """Take office in ``epoch``; ``lease_ms`` > 0: with the lease ``token``
        grants (module notes), 0: with none (no control plane keeps this node)."""
        await self._whole(self._promote(epoch, insync, lease_ms, token))

    async def follow(self, epoch: int, master: str) -> None:
        """Follow the master at ``master`` (its admin address) in ``epoch``."""
        await self._whole(self._follow(epoch, master))

    async def fence(self, epoch: int) -> None:
        await self._whole(self._fence(epoch))

    async def _whole(self, command: Coroutine[Any, Any, None]) -> None:
        """Run a role command to its end, one at a time, even when its caller stops
        waiting (the RPC's deadline passed, or its client went away): a command cut
        in the middle (a Follow between stopping the old follower loop and starting
        the new one) would leave the node told of a master it does not follow, which
        its Status then reports as done. The caller gets its outcome if it waits."""

        async def in_turn() -> None:
            async with self._commands:
                try:
                    await command
                finally:  # idle streams and sync acks look at the role again now
                    self._changed()

        task = asyncio.ensure_future(in_turn())
        task.add_done_callback(_outcome_read)
        await asyncio.shield(task)

    async def _promote(
        self, epoch: int, insync: frozenset[str], lease_ms: int, token: int = 0
    ) -> None:
        self.check_epoch(epoch, "promote", above=True)
        await self._stop_follower()
        # never fire before the clock of the master this node took over from said
        self.engine.hold_clock_back(self.skew.ahead_ms(self.engine.clock.monotonic_s()))
        lease: float | None = None
        if lease_ms:
            lease = self.tokens.deadline(token, lease_ms) or 0.0  # 0.0: lapsed
        # The new epoch's book of followers, the sync ack wait and the index limit are
        # in place when the engine takes the role, not after: a write (or a link step)
        # run the moment it has would otherwise be acknowledged on this node's fsync
        # alone and indexed for delivery before any replica holds it.
        self.followers.forget()
        self.followers.tell_insync(insync)
        sync = self.replication == "sync"
        if sync:
            self.engine.set_ack_wait(self._wait_insync)
        try:
            await asyncio.to_thread(
                self.engine.promote,
                epoch,
                lease,
                index_limit=self.followers.high_water if sync else None,
            )
        except BaseException:
            if self.engine.role is not Role.MASTER:
                self.engine.set_ack_wait(None)
            raise
        self._told_epoch = epoch
        self.failovers += 1
        self.last_failover_ms = self.engine.clock.now_ms()
        self._kept = self._kept or bool(lease_ms)
        self._set_master(self.admin_address, self.address)
        self._as_master()

    async def _follow(self, epoch: int, master: str) -> None:
        self.check_epoch(epoch, "follow")
        self._told_epoch = epoch
        if self.engine.role is Role.MASTER:
            await asyncio.to_thread(self.engine.follow)  # (no index limit on a replica)
            self.engine.set_ack_wait(None)
            self.followers.forget()
        elif master == self.master and self._follower is not None and not self._follower.done():
            return  # already following it
        self._set_master(master, "")
        await self._stop_follower()
        self._run_follower()

    async def _fence(self, epoch: int) -> None:
        self.check_epoch(epoch, "fence")
        self._told_epoch = epoch
        await asyncio.to_thread(self.engine.fence)

    def probed(self, epoch: int, lease_ms: int, insync: frozenset[str], token: int = 0) -> None:
        """A control plane's ``Status``: renew a master's lease from the answer
        ``token`` names (module notes) and take its in-sync set, only when the
        master writes in the probe's epoch (a stale master that heard of a later
        epoch is never renewed; a probe tells no node an epoch: Promote, Follow and
        Fence do)."""
        master = self.engine.role is Role.MASTER
        if epoch and epoch == self.engine.epoch and master and lease_ms > 0:
            until = self.tokens.deadline(token, lease_ms, bounded=self.engine.lease_bounded())
            if until is not None:
                self.engine.renew_lease(until)
            self.followers.tell_insync(insync)
            self._kept = True
        self._probes.set()

    def _changed(self) -> None:
        """The role or ``closing`` changed: what waits on them looks again now (idle
        streams to replicas, ``server.admin``; sync acks, ``Followers.wait``)."""
        self.engine.log_growth.notify()
        self.followers.wake()

    # -- roles ---------------------------------------------------------------
    def _set_master(self, admin: str, public: str) -> None:
        """The master is at ``admin`` (its admin address) and serves clients at
        ``public`` ("": not known yet; its stream names it)."""
        self.master = admin
        self._public_master(public)

    def _public_master(self, address: str) -> None:
        self.engine.master_address = address
        if address:
            self._on_master(address)

    def _as_master(self) -> None:
        if self.replication == "sync":
            self.engine.set_ack_wait(self._wait_insync)
            # the mark as of now, passed on under the book's lock: a mark a report
            # raised meanwhile is never overwritten by an older one read here
            self.followers.announce()

    def _wait_insync(self, end: int) -> None:
        self.followers.wait(end, self._ack_timeout_s, self._acks_for_s)

    def _acks_for_s(self) -> float | None:
        """Seconds this master may still ack (0: none; None: while nothing changes)."""
        if not self.engine.delivering():
            return 0.0
        return self.engine.lease_left_s()

    def _marked(self, high_water: int) -> None:
        if self.replication == "sync" and self.engine.role is Role.MASTER:
            self.engine.set_index_limit(high_water)

    def _run_follower(self) -> None:
        def streaming(up: bool) -> None:
            self.streaming = up

        self._follower_stop = stop = asyncio.Event()
        self._follower = asyncio.create_task(
            follow_master(
                self.engine,
                self.master,
                self.name,
                lambda: self.epoch,
                streaming,
                stop,
                self._public_master,
                self._tls,
                self.skew,
            )
        )

    async def _stop_follower(self) -> None:
        """Stop the follower loop and wait until it ended: no chunk is applied after
        this returns. (Cancelled again each second: grpc.aio may swallow a cancel;
        the stop event ends the loop at its next step either way.)"""
        task, self._follower = self._follower, None
        self.streaming = False
        if task is None:
            return
        self._follower_stop.set()
        while not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=1.0)
        with contextlib.suppress(asyncio.CancelledError):
            task.result()


def _outcome_read(task: asyncio.Task[None]) -> None:
    """A role command whose caller stopped waiting: its error is its caller's to
    see, or nobody's (not asyncio's "never retrieved" report)."""
    if not task.cancelled():
        task.exception()
