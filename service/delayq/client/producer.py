"""``Producer``: coalesces single sends of a blocking client into ``Schedule``
batches on a background thread.

Invariants: a Producer is safe to ``send`` from many threads; every Future it
hands out is settled (with the message's ``Scheduled``; or its own error, raised
as ``errors.from_item`` makes it, when it was refused; or the batch's error);
``close`` flushes first. It needs of its client only ``schedule_many``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from datetime import datetime, timedelta
from typing import Protocol

from .errors import from_item
from .outgoing import Outgoing, Scheduled
from .results import IfExists

__all__ = ["Producer", "Schedules"]


class Schedules(Protocol):
    """What a Producer needs of its client."""

    def schedule_many(self, messages: Sequence[Outgoing]) -> list[Scheduled]: ...


class Producer:
    """Coalesces ``send`` calls into ``Schedule`` batches of up to ``max_batch``,
    waiting at most ``linger_s`` for a batch to fill. ``send`` returns a Future of
    the message's ``Scheduled`` (a refused message's raises its error); ``flush()``
    waits for everything sent so far."""

    def __init__(self, client: Schedules, *, max_batch: int = 100, linger_s: float = 0.005) -> None:
        self._client = client
        self._max = max_batch
        self._linger = linger_s
        self._lock = threading.Condition()  # guards _queue/_closed; the sender waits on it
        self._queue: list[tuple[Outgoing, Future[Scheduled]]] = []
        self._inflight = 0
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="delayq-producer", daemon=True)
        self._thread.start()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(
        self,
        topic: str,
        body: bytes,
        *,
        at: datetime | int | None = None,
        delay: timedelta | float | None = None,
        level: int | None = None,
        key: str = "",
        headers: Mapping[str, str] | None = None,
        if_exists: IfExists | str | None = None,
        dedup_window: timedelta | float | None = None,
    ) -> Future[Scheduled]:
        """Queue one message (arguments as ``Client.schedule``'s); its future holds
        its ``Scheduled``, or raises its error (``AlreadyExists`` for a ``reject``)."""
        fut: Future[Scheduled] = Future()
        m = Outgoing(
            topic=topic,
            body=body,
            at=at,
            delay=delay,
            level=level,
            key=key,
            headers=headers or {},
            if_exists=if_exists,
            dedup_window=dedup_window,
        )
        with self._lock:
            if self._closed:
                raise RuntimeError("producer is closed")
            self._queue.append((m, fut))
            if len(self._queue) >= self._max:
                self._lock.notify()
        return fut

    def flush(self) -> None:
        with self._lock:
            self._lock.notify()
            while self._queue or self._inflight:
                self._lock.wait(0.05)

    def close(self) -> None:
        self.flush()
        with self._lock:
            self._closed = True
            self._lock.notify()
        self._thread.join()

    def _loop(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    if self._closed:
                        return
                    self._lock.wait(0.1)
                    continue
                if len(self._queue) < self._max and not self._closed:
                    self._lock.wait(self._linger)
                batch, self._queue = self._queue[: self._max], self._queue[self._max :]
                self._inflight += 1
            try:
                results = self._client.schedule_many([m for m, _ in batch])
                for (_, fut), res in zip(batch, results, strict=True):
                    if res.error is None:
                        fut.set_result(res)
                    else:  # a refused message: its sender's future raises its error
                        fut.set_exception(from_item(res.error, res.id, res.deliver_at_ms))
            except Exception as exc:  # the batch failed after retries: every sender learns it
                for _, fut in batch:
                    fut.set_exception(exc)
            finally:
                with self._lock:
                    self._inflight -= 1
                    self._lock.notify_all()
