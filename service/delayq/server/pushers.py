"""A node's pushers (``Pushers``): one ``Pusher`` per push group while the node
is its shard's master, none otherwise.

``run`` looks every ``PUSH_LOOK_S``: while the engine is not delivering (a
replica, fenced, its lease lapsed, closing) every pusher is stopped (its task
cancelled: requests under way aborted, their messages left in flight for the
next master). ``delivering()`` is asked on the loop before anything that goes
through the shared call pool, and again every ``PUSH_LOOK_S`` while the read of
the push groups waits for the pool: a busy pool never delays the stop. Else the
pushers are made to match ``Engine.push_groups()``: a new push group gets a
pusher, a removed one's stops, a changed target restarts its pusher, a change
of the policy's other fields (limits, backoff, pause) reaches the running pusher
in place (its counters kept). ``snapshots`` reports the running pushers for
Stats and the metrics: immutable values made on the loop at each look (at most
``PUSH_LOOK_S`` old) and swapped in whole, so any thread (the metrics' HTTP
server's) may read them; ``check_secret`` is the servicer's check of a target's
``secret_ref`` when it is set (``Calls.check_push_secret``).

Invariants: the engine's groups are read on the pool (``Calls.run``), never
under its lock on the loop; a pusher runs only while ``delivering()`` held at
the last look (and each pusher asks it again right before each request).
Not thread-safe but ``snapshots``: runs on the server's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from ..clock import Clock
from ..delivery.policy import GroupPolicy
from ..errors import DelayqError, InvalidArgument
from ..push.egress import Egress
from ..push.secrets import SecretStore
from ..push.snapshot import PushSnapshot
from ..pushurls import safe_url
from .pusher import Pusher, PushSource

__all__ = ["PUSH_LOOK_S", "Pushers"]

log = logging.getLogger("delayq.push")

PUSH_LOOK_S = 0.25  # how soon a new push group, or a change of role, is acted on

Groups = list[tuple[str, str, GroupPolicy]]


class Pushers:
    def __init__(
        self,
        *,
        source: PushSource,
        delivering: Callable[[], bool],
        push_groups: Callable[[], Awaitable[Groups]],
        clock: Clock,
        egress: Egress,
        secrets: SecretStore,
        max_connections: int,
        shards: Callable[[], int] = lambda: 1,
        lease_left: Callable[[], float | None] = lambda: None,
    ) -> None:
        """``push_groups``: the engine's push groups, read off the loop; ``shards``:
        how many shards the topics span (the shard map's count); ``lease_left``: the
        master's lease left, seconds (None: none that lapses), each request's
        timeout's cap."""
        self._lease_left = lease_left
        self._source = source
        self._delivering = delivering
        self._push_groups = push_groups
        self._clock = clock
        self._egress = egress
        self._secrets = secrets
        self._max_connections = max_connections
        self._shards = shards
        self._running: dict[tuple[str, str], tuple[Pusher, asyncio.Task[None]]] = {}
        self._published: tuple[PushSnapshot, ...] = ()  # swapped whole, on the loop

    def snapshots(self) -> list[PushSnapshot]:
        """The running pushers' reports at the last look, by topic and group; safe
        from any thread."""
        return list(self._published)

    def _publish(self) -> None:
        """Make the running pushers' reports (on the loop) and swap them in."""
        self._published = tuple(p.snapshot() for _, (p, _) in sorted(self._running.items()))

    def check_secret(self, ref: str) -> None:
        """Refuse a ``secret_ref`` that names no valid secret on this node (the
        message names the ref, never anything read)."""
        if not self._secrets.resolves(ref):
            raise InvalidArgument(
                "policy.push.secret_ref",
                f"{ref!r} names no valid secret (whsec_...) under this server's --push-secret-dir",
            )

    async def run(self, stop: asyncio.Event) -> None:
        """Keep the pushers until ``stop`` is set; then stop them all."""
        try:
            while not stop.is_set():
                try:
                    groups = await self._while_delivering() if self._delivering() else None
                    if groups is not None:
                        await self._reconcile(groups)
                    else:
                        await self._stop_all()
                except DelayqError:  # closing, or no longer master: look again
                    await self._stop_all()
                except Exception:  # a bug: the node serves on, pushes stop, said loudly
                    log.exception("the pushers failed to follow the push groups")
                    await self._stop_all()
                self._publish()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(PUSH_LOOK_S):
                        await stop.wait()
        finally:
            await self._stop_all()
            self._publish()

    async def _while_delivering(self) -> Groups | None:
        """The push groups, or None once the engine stops delivering while they
        are read (the read, waiting on the pool, is abandoned)."""
        read = asyncio.ensure_future(self._push_groups())
        try:
            while True:
                done, _ = await asyncio.wait({read}, timeout=PUSH_LOOK_S)
                if done:
                    return read.result()
                if not self._delivering():
                    return None
                self._publish()
        finally:
            if not read.done():
                read.cancel()
                await asyncio.gather(read, return_exceptions=True)

    async def _reconcile(self, groups: Groups) -> None:
        wanted = {(topic, group): policy for topic, group, policy in groups}
        for key in [k for k in self._running if k not in wanted]:
            await self._stop(key)
        for key, policy in wanted.items():
            held = self._running.get(key)
            if held is not None and held[0].target == policy.push and not held[1].done():
                held[0].policy = policy
                continue
            if held is not None:
                await self._stop(key)
            self._start(key, policy)

    def _start(self, key: tuple[str, str], policy: GroupPolicy) -> None:
        topic, group = key
        pusher = Pusher(
            topic,
            group,
            policy,
            source=self._source,
            delivering=self._delivering,
            clock=self._clock,
            egress=self._egress,
            secrets=self._secrets,
            max_connections=self._max_connections,
            shards=self._shards,
            lease_left=self._lease_left,
        )
        task = asyncio.create_task(pusher.run(), name=f"push {topic}/{group}")
        task.add_done_callback(lambda t: self._ended(key, t))
        self._running[key] = (pusher, task)
        assert policy.push is not None
        log.info("pushing %s/%s to %s", topic, group, safe_url(policy.push.url))

    def _ended(self, key: tuple[str, str], task: asyncio.Task[None]) -> None:
        """A pusher that stopped by itself failed: log it; the next look restarts it."""
        if task.cancelled():
            return
        error = task.exception()
        if error is not None and not isinstance(error, DelayqError):
            log.error("the pusher of %s/%s failed", *key, exc_info=error)

    async def _stop(self, key: tuple[str, str]) -> None:
        _, task = self._running.pop(key)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)  # its end, not its error

    async def _stop_all(self) -> None:
        for key in list(self._running):
            await self._stop(key)
