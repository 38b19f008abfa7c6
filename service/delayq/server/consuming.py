"""The consumer's calls of a node (``Consuming``, ``Calls.consuming``): the long
poll of a receive and the settling calls (ack, change of invisibility, nack,
re-timing, dead letters, renewals), in the engine's own values and errors, for
every protocol the node speaks.

A pusher uses the same calls: ``take`` (one look, no wait), ``wait_ready`` (the
engine's signal), ``ack`` and ``nack`` (with Retry-After's least wait).

Invariants: receivers wait on the loop (``ReadySignal``, woken by the engine),
never inside the engine: a look that filled its batch is followed by another at
once, any other by a wait for the engine's signal or ``RECEIVE_LOOK_AGAIN_S``
(redeliveries are not signalled). Settling calls of many callers are gathered
(``Calls.settles``: one engine call per topic, group and kind); a settling call's
receipts are this shard's (checked under the map) before the engine sees them.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

from ..engine import RECEIVE_LOOK_AGAIN_S, AckOutcome, Engine, ReceivedBatch, check_receive
from ..errors import DelayqError
from .batches import Settle
from .groupcalls import Runs
from .readysignal import ReadySignal

__all__ = ["Consuming"]

T = TypeVar("T")

_LOOKED: contextvars.ContextVar[asyncio.Event | None] = contextvars.ContextVar(
    "delayq_looked", default=None
)
"""The signal's generation a task's last ``take`` looked after (None: not counted)."""


class _ByMap(Protocol):
    """``Calls._by_map``: an attempt, once more after a re-read of the shard map."""

    def __call__(self, attempt: Callable[[], Awaitable[T]]) -> Awaitable[T]: ...


class Consuming:
    def __init__(
        self,
        engine: Engine,
        *,
        run: Runs,
        by_map: _ByMap,
        settles: Callable[[Settle], Awaitable[list[Any]]],
        check_batch: Callable[[int, str], None],
        inline_writes: bool,
    ) -> None:
        """``run``, ``by_map`` and ``check_batch``: ``Calls``'; ``settles``: the
        gathering of settling calls."""
        self._engine = engine
        self.run = run
        self._by_map = by_map
        self._settles = settles
        self._check_batch = check_batch
        self._inline_writes = inline_writes
        self._ready = ReadySignal(asyncio.get_running_loop())
        self._unhook = engine.on_receivable(self._ready.fire)

    def shutdown(self) -> None:
        self._unhook()

    def _receive(
        self, topic: str, group: str, max_messages: int, invisible_ms: int, auto_ack: bool
    ) -> ReceivedBatch:
        """One engine receive of what is ready."""
        return self._engine.receive_batch(
            topic, group, max_messages=max_messages, invisible_ms=invisible_ms, auto_ack=auto_ack
        )

    async def looks(
        self,
        topic: str,
        group: str,
        *,
        max_messages: int,
        invisible_ms: int,
        wait_ms: int,
        auto_ack: bool = False,
        stream: bool = False,
    ) -> AsyncGenerator[ReceivedBatch, None]:
        """Look for what is ready again and again, yielding each look's batch: at once
        after a look that filled its batch (more may be ready), else after the engine's
        signal, or ``RECEIVE_LOOK_AGAIN_S`` (redeliveries are not signalled). A single
        receive (not ``stream``) stops once ``wait_ms`` has passed; a stream never
        does, and ``wait_ms`` only bounds each wait. Bad arguments fail first. The take
        runs on the loop unless an auto-ack must wait for an fsync.

        The caller is counted in ``waiting`` for the whole run and takes each look's
        generation before the look (see ``ReadySignal``): a release between a look and
        the next wait ends that generation, so a stream waits right after a short
        look instead of looking again first (half its looks were empty)."""
        await self.run(lambda: check_receive(max_messages, invisible_ms, wait_ms), inline=True)
        inline = self._inline_writes  # a receive writes too: acks, dead letters
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_ms / 1000
        take = functools.partial(self._receive, topic, group, max_messages, invisible_ms, auto_ack)
        self._ready.waiting += 1
        try:
            while True:
                fired = self._ready.generation()  # before the look: see ReadySignal
                got = await self.run(take, inline=inline)
                yield got
                left = wait_ms / 1000 if stream else deadline - loop.time()
                if left <= 0:
                    return
                if len(got.ids) < max_messages:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(min(left, RECEIVE_LOOK_AGAIN_S)):
                            await fired.wait()
        finally:
            self._ready.waiting -= 1

    async def take(
        self, topic: str, group: str, max_messages: int, invisible_ms: int
    ) -> ReceivedBatch:
        """One look at what is ready, without waiting (a pusher's receive), on the pool
        or the loop as ``looks`` runs its takes. The calling task is counted a waiter
        from its first take to the end of its next ``wait_ready``, and the signal's
        generation is taken before each look (``ReadySignal``'s rule), so a release
        between the look and the wait is not missed. (A task cancelled before its
        wait leaves the count one high: the signal then also fires for nobody, one
        hop to the loop a release, and still misses no one.)"""
        await self.run(lambda: check_receive(max_messages, invisible_ms, 0), inline=True)
        if _LOOKED.get() is None:
            self._ready.waiting += 1
        _LOOKED.set(self._ready.generation())
        take = functools.partial(self._receive, topic, group, max_messages, invisible_ms, False)
        return await self.run(take, inline=self._inline_writes)

    async def wait_ready(self, timeout_s: float) -> None:
        """Until the engine signalled something ready (a release, a nack, a resume)
        since the calling task's last ``take``, or ``timeout_s`` has passed
        (redeliveries are not signalled)."""
        fired = _LOOKED.get()
        if fired is None:
            fired = self._ready.generation()
            self._ready.waiting += 1
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await fired.wait()
        finally:
            self._ready.waiting -= 1
            _LOOKED.set(None)

    async def _settle(self, asked: Settle) -> list[Any]:
        """The outcomes of settling ``asked.receipts``, once they are this shard's,
        gathered with concurrent settling calls."""
        self._check_batch(len(asked.receipts), asked.field)
        return await self._by_map(lambda: self._settles(asked))

    async def ack(
        self, topic: str, group: str, receipts: Sequence[str], field: str = "receipts"
    ) -> list[AckOutcome | DelayqError]:
        """Acknowledge received messages, one outcome per receipt."""
        settle = functools.partial(self._engine.ack, topic, group)
        return await self._settle(Settle(("ack", topic, group), receipts, field, settle))

    async def change_invisibility(
        self, topic: str, group: str, receipts: Sequence[str], invisible_ms: int
    ) -> list[AckOutcome | DelayqError]:
        """Move received messages' redelivery time (0: now), one outcome per receipt."""
        e = self._engine
        settle = functools.partial(e.change_invisibility, topic, group, invisible_ms=invisible_ms)
        key = ("invisible", topic, group, invisible_ms)
        return await self._settle(Settle(key, receipts, "receipts", settle))

    async def nack(
        self, topic: str, group: str, receipts: Sequence[str], at_least_ms: int = 0
    ) -> list[AckOutcome | DelayqError]:
        """ "Failed, try later": each message visible again after its group's backoff,
        or ``at_least_ms`` when longer (a push target's Retry-After)."""
        settle = functools.partial(self._engine.nack, topic, group, at_least_ms=at_least_ms)
        key = ("nack", topic, group, at_least_ms)
        return await self._settle(Settle(key, receipts, "receipts", settle))

    async def retime(
        self, topic: str, group: str, receipts: Sequence[str], invisible_ms: int
    ) -> list[str | AckOutcome | DelayqError]:
        """``change_invisibility`` handing a new receipt for each message re-timed."""
        settle = functools.partial(self._engine.retime, topic, group, invisible_ms=invisible_ms)
        key = ("retime", topic, group, invisible_ms)
        return await self._settle(Settle(key, receipts, "receipts", settle))

    async def dead_letter(
        self, topic: str, group: str, receipts: Sequence[str]
    ) -> list[AckOutcome | DelayqError]:
        """Send received messages to their group's dead-letter topic now."""
        settle = functools.partial(self._engine.dead_letter, topic, group)
        key = ("dead_letter", topic, group)
        return await self._settle(Settle(key, receipts, "receipts", settle))

    async def ack_own(
        self, topic: str, group: str, receipts: Sequence[str]
    ) -> list[AckOutcome | DelayqError]:
        """Acknowledge messages this node just handed out (those a tag filter skips):
        its own receipts, unchecked, so a map switched since the take refuses nothing."""
        return await self.run(
            lambda: self._engine.ack(topic, group, receipts), inline=self._inline_writes
        )

    async def renew(
        self, topic: str, group: str, receipts: Sequence[str], invisible_ms: int
    ) -> list[AckOutcome | DelayqError]:
        """Keep messages this node handed out invisible longer (a server-side renewal:
        its own receipts, any number of them)."""
        return await self.run(
            lambda: self._engine.change_invisibility(topic, group, receipts, invisible_ms),
            inline=self._inline_writes,
        )
