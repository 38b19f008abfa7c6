"""What every handler of the ``delayq.v1.DelayQueue`` servicer stands on
(``EngineCalls``, the base of its handler groups ``producing`` and ``consuming``):
the engine and the shard map it serves by, the pool engine calls run on, and
``_call``, the one place a delayq error becomes a gRPC status.

Invariants: an engine call that may block (an fsync) runs on the pool, never on
the event loop; one that cannot runs on the loop (``inline``: with async flush
every write). A ``WrongShard`` is answered only after the map file has been
read again (a newer map may say otherwise), and counted in
``Topology.refused``. A batch holds at most ``MAX_BATCH`` items. Any other
exception ends the call INTERNAL, logged (``server.internal``, around every
handler of the server).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeVar

import grpc

from ..engine import Engine
from ..errors import DelayqError, InvalidArgument, WrongShard
from ..settings import FlushPolicy
from ..tls import TlsConfig
from .forwarding import Forwarder
from .ownership import Mode, check_ids
from .readysignal import ReadySignal
from .statuscodes import abort_with
from .topology import Topology

__all__ = ["MAX_BATCH", "EngineCalls", "Runner"]

T = TypeVar("T")

MAX_BATCH = 10_000


class Runner(Protocol):
    """How a handler runs an engine call (``EngineCalls._run``, or ``_call`` bound
    to its context)."""

    async def __call__(self, fn: Callable[[], T], *, inline: bool = ...) -> T: ...


class EngineCalls:
    def __init__(
        self,
        engine: Engine,
        topology: Topology,
        advertise: str,
        *,
        threads: int = 64,
        peer_tls: TlsConfig | None = None,
    ) -> None:
        """``peer_tls``: how calls forwarded to other shards are made (``tls``)."""
        self._engine = engine
        self._topology = topology
        self._shard = engine.settings.shard
        self._advertise = advertise
        # With async flush no write waits for an fsync, so short engine calls run on the
        # event loop itself: the hop to a pool thread cost more than the call.
        self._inline_writes = engine.settings.flush is FlushPolicy.ASYNC
        # Each engine call that may block holds one thread, never the event loop.
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="delayq-rpc")
        self._forwarder = Forwarder(topology, self._shard, peer_tls)
        self._ready = ReadySignal(asyncio.get_running_loop())
        self._unhook = engine.on_receivable(self._ready.fire)

    def shutdown(self) -> None:
        self._unhook()
        self._pool.shutdown(wait=True, cancel_futures=True)

    async def close_channels(self) -> None:
        """Close the channels calls were passed on through (after ``shutdown``)."""
        await self._forwarder.close()

    async def _run(self, fn: Callable[[], T], *, inline: bool = False) -> T:
        """Run an engine call (on the loop when ``inline``, else on the pool), its
        delayq error raised as is; a ``WrongShard`` only once the map file was read
        again (and counted in ``Topology.refused``). The protocol front-ends
        (``delayq.rocketmq``) answer by it in their own way."""
        for first in (True, False):
            try:
                if inline:
                    return fn()
                return await asyncio.get_running_loop().run_in_executor(self._pool, fn)
            except WrongShard as exc:
                # another shard's, by this node's map: the file may hold a newer one
                # this node has not read yet (a client that has it would be refused
                # until then): read it now, and answer by it when it changed
                if first and type(exc) is WrongShard and self._topology.reload_now():
                    continue
                self._topology.refused += 1
                raise
        raise AssertionError("unreachable: the second pass returns or raises")

    async def _call(
        self, context: grpc.aio.ServicerContext, fn: Callable[[], T], *, inline: bool = False
    ) -> T:
        """``_run``, its delayq error turned into a gRPC status (others:
        ``server.internal``)."""
        try:
            return await self._run(fn, inline=inline)
        except DelayqError as exc:
            await abort_with(context, exc)
        raise AssertionError("unreachable: abort raises")

    def _owns_ids(self, ids: list[str], field: str, mode: Mode) -> None:
        check_ids(self._topology.map, self._shard, ids, field, self._engine.imported, mode)

    @staticmethod
    def _batch_size(n: int, field: str) -> None:
        if n > MAX_BATCH:
            raise InvalidArgument(field, f"{n} items; at most {MAX_BATCH} per call")
