"""The node's calls by topic and key (``KeyCalls``, part of ``calls``): Lookup,
Cancel and Reschedule of every pending message of a key, at the key's shard alone
(``ownership.check_key_owner``: another shard refuses with WRONG SHARD and the
client routes; while a finishing rebalance holds the key, the servicer waits for
the map to switch, ``Calls.until_unheld``).

A message of the key that a rebalance under way handed over to a joining shard
(its map not switched yet) still holds the key here: the engine answers it as
``Forwarded`` (``timers.bykey``), and the call about it is passed on to that
shard by its id here (``forwarding``), as calls by id are, so a key is found,
cancelled and moved whole from its first hand-over until the map switches (or a
job that died runs again). A lookup leaves out what the other shard answers
ended or NOT_FOUND, and a message named twice (moved back here).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import grpc

from ..engine import CancelOutcome, Engine, LookupResult, MessageState, ScheduleOutcome
from ..errors import DelayqError, Forwarded, NotFound
from .forwarding import Forwarder
from .groupcalls import Runs
from .ownership import check_key_owner
from .statuscodes import PassedOn
from .topology import Topology

__all__ = ["KeyCalls"]


class KeyCalls:
    def __init__(
        self,
        engine: Engine,
        topology: Topology,
        run: Runs,
        forwarder: Forwarder,
        check_batch: Callable[[int, str], None],
        inline_writes: bool,
    ) -> None:
        """``run``: ``Calls.run`` (the pool, the map's re-read on a wrong shard);
        ``forwarder``: the node's, for the messages handed over; ``check_batch``:
        ``Calls.check_batch``; ``inline_writes``: writes run on the loop (async flush)."""
        self._engine = engine
        self._topology = topology
        self._shard = engine.settings.shard
        self._run = run
        self._forwarder = forwarder
        self._check_batch = check_batch
        self._inline_writes = inline_writes

    async def lookup(
        self, topic: str, key: str, timeout_s: float | None = None
    ) -> list[LookupResult]:
        """The pending messages of ``topic`` with ``key``, oldest first (``NotFound``
        when none); the engine's call reads their records: on the pool, off the loop."""

        def run() -> list[LookupResult | Forwarded]:
            check_key_owner(self._topology.map, self._shard, [key], "key", self._topology.moving())
            return self._engine.lookup_key(topic, key)

        out: list[LookupResult] = []
        for got in await self._run(run):
            if isinstance(got, Forwarded):
                try:
                    got = await self._forwarder.lookup(got.target, got.id, timeout_s)
                except PassedOn as exc:
                    if exc.code is grpc.StatusCode.NOT_FOUND:
                        continue  # gone meanwhile (retention)
                    raise
                if got.state is not MessageState.PENDING or got.id in {r.id for r in out}:
                    continue  # ended meanwhile, or named twice (moved back here)
            out.append(got)
        if not out:
            raise NotFound("key", f"no pending message of topic {topic!r} has this key")
        return out

    async def cancel(
        self, topic: str, keys: Sequence[str], timeout_s: float | None = None
    ) -> list[int | DelayqError | PassedOn]:
        """Cancel every pending message of ``topic`` with each key: how many, per key
        (a key whose handed-over message's shard failed: that error)."""
        self._check_batch(len(keys), "keys")
        moved: list[tuple[int, Forwarded]] = []

        def run() -> list[int | DelayqError]:
            check_key_owner(self._topology.map, self._shard, keys, "keys", self._topology.moving())
            return self._engine.cancel_keys(topic, keys, moved)

        out: list[int | DelayqError | PassedOn] = list(
            await self._run(run, inline=self._inline_writes)
        )
        if moved:
            asked = [(j, f.id, f.target) for j, (_, f) in enumerate(moved)]
            answers = await self._forwarder.cancel(asked, timeout_s)
            for j, (k, _) in enumerate(moved):
                got, count = answers.get(j), out[k]
                if isinstance(got, PassedOn):
                    if got.code is not grpc.StatusCode.NOT_FOUND:
                        out[k] = got
                elif got is CancelOutcome.CANCELLED and isinstance(count, int):
                    out[k] = count + 1
        return out

    async def reschedule(
        self,
        topic: str,
        key: str,
        *,
        deliver_at_ms: int | None,
        delay_ms: int | None,
        timeout_s: float | None = None,
    ) -> list[ScheduleOutcome]:
        """Move every pending message of ``topic`` with ``key`` to a new time: their
        new ids, oldest first (``NotFound`` when none)."""

        def run() -> list[ScheduleOutcome | Forwarded]:
            check_key_owner(self._topology.map, self._shard, [key], "key", self._topology.moving())
            return self._engine.reschedule_key(
                topic, key, deliver_at_ms=deliver_at_ms, delay_ms=delay_ms
            )

        out: list[ScheduleOutcome] = []
        for got in await self._run(run, inline=self._inline_writes):
            if isinstance(got, Forwarded):
                got = await self._forwarder.reschedule(
                    got.target, got.id, deliver_at_ms, delay_ms, timeout_s
                )
            out.append(got)
        return out
