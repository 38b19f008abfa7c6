"""Concurrent calls gathered into one engine call (``Gathering``), and the merge of
their schedule batches (``merged``, ``split``: every column, the keys' ``if_exists``
and dedup ones too, and the outcomes' ``key_outcomes``).

Natural batching, no timer: a call queues its item and waits; the first item a
quiet ``Gathering`` gets starts a drain, which runs on the next turn of the event
loop and takes everything queued by then (up to ``most`` weight) as one batch;
items that arrive while a batch runs (on the pool, waiting for an fsync) form the
next. At low load a batch is one call (no added latency); under load batches grow
by themselves.

Invariants: each caller gets its own answer, in the order of its items: an answer
that is an exception is raised to that caller alone; an exception of the whole
batch's ``run`` is raised to every caller of that batch. A batch holds at least
one item, and more only while their weights sum to at most ``most``. A caller
cancelled while its batch runs is not answered (its item may still take effect,
as an engine call begun before a cancellation does). One drain runs at a time.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

import numpy as np

from ..engine import BatchOutcome, ScheduleBatch
from ..errors import DelayqError

__all__ = ["Gathering", "merged", "renumbered", "split", "whole"]

In = TypeVar("In")
Out = TypeVar("Out")
T = TypeVar("T")


Run = Callable[[list[In]], Awaitable[Sequence[Out | Exception]]]
"""Answers a batch of items, one answer (or error) per item, in order."""


class Gathering(Generic[In, Out]):
    def __init__(self, run: Run[In, Out], weight: Callable[[In], int], most: int) -> None:
        self._run = run
        self._weight = weight
        self._most = most
        self._queue: deque[tuple[In, asyncio.Future[Out]]] = deque()
        self._drain: asyncio.Task[None] | None = None
        self._running: list[asyncio.Future[Out]] = []  # the answers of the batch running
        self.batches = 0
        """Batches run so far (each answering one or more callers)."""
        self.items = 0
        """Items answered so far."""

    async def __call__(self, item: In) -> Out:
        """``item``'s answer, from the batch it is gathered into."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Out] = loop.create_future()
        self._queue.append((item, answer))
        if self._drain is None:
            self._drain = loop.create_task(self._drained())
        return await answer

    def close(self) -> None:
        """Stop draining: callers still queued, and those of the batch running, are
        cancelled; a later call starts a new drain."""
        if self._drain is not None:
            self._drain.cancel()
            self._drain = None
        for answer in self._running:
            answer.cancel()
        while self._queue:
            self._queue.popleft()[1].cancel()

    def _take(self) -> list[tuple[In, asyncio.Future[Out]]]:
        batch = [self._queue.popleft()]
        total = self._weight(batch[0][0])
        while self._queue:
            w = self._weight(self._queue[0][0])
            if total + w > self._most:
                break
            total += w
            batch.append(self._queue.popleft())
        return batch

    async def _drained(self) -> None:
        try:
            while self._queue:
                batch = self._take()
                waiting = [(item, answer) for item, answer in batch if not answer.done()]
                if not waiting:
                    continue
                self._running = [answer for _, answer in waiting]
                try:
                    outs = await self._run([item for item, _ in waiting])
                except Exception as exc:
                    for _, answer in waiting:
                        if not answer.done():
                            answer.set_exception(exc)
                    continue
                self.batches += 1
                self.items += len(waiting)
                for (_, answer), out in zip(waiting, outs, strict=True):
                    if answer.done():
                        continue
                    if isinstance(out, Exception):
                        answer.set_exception(out)
                    else:
                        answer.set_result(out)
        finally:
            self._running = []
            if self._drain is asyncio.current_task():
                self._drain = None


def renumbered(exc: DelayqError, at: int, to: int, n: int) -> DelayqError:
    """``exc``, the error of item ``at`` of a merged call, named as its caller's own
    call of ``n`` items names its item ``to``: ``receipts[at]`` becomes
    ``receipts[to]``, ``ids[at]`` becomes ``ids[to]``, or ``id`` in a call of one id
    (as the engine names it). Other errors are returned as they are."""
    field = getattr(exc, "field", None)
    if not isinstance(field, str):
        return exc
    head, sep, tail = field.partition(f"[{at}]")
    if not sep:
        return exc
    new = "id" + tail if n == 1 and head == "ids" else f"{head}[{to}]{tail}"
    exc.field = new  # type: ignore[attr-defined]
    text = str(exc.args[0]) if exc.args else ""
    if text.startswith(field):
        exc.args = (new + text[len(field) :], *exc.args[1:])
    return exc


def _column(
    batches: Sequence[ScheduleBatch], pick: Callable[[ScheduleBatch], object]
) -> np.ndarray | None:
    """One int64 column of ``batches`` concatenated (0 where a batch has none), or None
    when none has it."""
    cols = [pick(b) for b in batches]
    if all(c is None for c in cols):
        return None
    return np.concatenate(
        [
            np.zeros(len(b.bodies), np.int64) if c is None else np.asarray(c, np.int64)
            for b, c in zip(batches, cols, strict=True)
        ]
    )


def merged(batches: Sequence[ScheduleBatch]) -> ScheduleBatch:
    """One batch of ``batches``' rows, in order (each batch's columns as long as its
    bodies: see ``whole``)."""
    if len(batches) == 1:
        return batches[0]
    first = batches[0].topic
    topic: str | list[str]
    if isinstance(first, str) and all(b.topic == first for b in batches):
        topic = first
    else:
        topic = []
        for b in batches:
            topic += [b.topic] * len(b.bodies) if isinstance(b.topic, str) else list(b.topic)
    bodies: list[bytes] = []
    for b in batches:
        bodies += b.bodies
    return ScheduleBatch(
        topic=topic,
        bodies=bodies,
        deliver_at_ms=_column(batches, lambda b: b.deliver_at_ms),
        delay_ms=_column(batches, lambda b: b.delay_ms),
        delay_level=_column(batches, lambda b: b.delay_level),
        keys=_texts(batches, lambda b: b.keys, ""),
        headers=_texts(batches, lambda b: b.headers, {}),
        if_exists=_column(batches, lambda b: b.if_exists),
        dedup_window_ms=_column(batches, lambda b: b.dedup_window_ms),
        dedup_ids=_texts(batches, lambda b: b.dedup_ids, ""),
    )


def _texts(
    batches: Sequence[ScheduleBatch], pick: Callable[[ScheduleBatch], Sequence[T] | None], empty: T
) -> list[T] | None:
    """One object column of ``batches`` concatenated (``empty`` where a batch has
    none), or None when none has it."""
    cols = [pick(b) for b in batches]
    if all(c is None for c in cols):
        return None
    out: list[T] = []
    for b, c in zip(batches, cols, strict=True):
        out += [empty] * len(b.bodies) if c is None else c
    return out


def whole(batch: ScheduleBatch) -> bool:
    """Whether every column of ``batch`` has one value per body (only such batches
    are merged: a malformed one goes to the engine alone, which says what is wrong)."""
    n = len(batch.bodies)
    columns = (
        batch.deliver_at_ms,
        batch.delay_ms,
        batch.delay_level,
        batch.keys,
        batch.headers,
        batch.if_exists,
        batch.dedup_window_ms,
        batch.dedup_ids,
    )
    if not isinstance(batch.topic, str) and len(batch.topic) != n:
        return False
    return all(c is None or len(c) == n for c in columns)


def split(out: BatchOutcome, sizes: Sequence[int]) -> list[BatchOutcome]:
    """``out``, the outcome of a merged batch, as one outcome per batch of ``sizes`` rows."""
    if len(sizes) == 1:
        return [out]
    parts = []
    start = 0
    for n in sizes:
        end = start + n
        errors = {k - start: e for k, e in out.errors.items() if start <= k < end}
        keyed = {k - start: o for k, o in out.key_outcomes.items() if start <= k < end}
        parts.append(BatchOutcome(out.ids[start:end], out.deliver_at_ms[start:end], errors, keyed))
        start = end
    return parts
