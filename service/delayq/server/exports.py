"""The admin ``BeginExport`` / ``Export`` / ``EndExport`` calls: the open export
snapshots of this node (``timers.rebalance.snapshot``) by name, and their rows as the
columnar ``ExportBatch`` messages of ``admin.proto``.

A snapshot holds the shard's retention back, so one left by a job that died ends
by itself once unused for ``idle_s`` (a sweep every few seconds while any is
open). Reading runs in a worker thread, a batch at a time: file reads and decoding
never block the event loop.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Generator
from dataclasses import dataclass

import numpy as np

from ..admin.v1 import admin_pb2 as pb
from ..engine import ExportRows, ExportSnapshot, Moving
from ..errors import InvalidArgument, NotFound, quote
from ..formats.headers import decode_headers
from ..ids import MessageId

__all__ = ["DEFAULT_PARTITION_BYTES", "Exports", "batch_of"]

log = logging.getLogger("delayq.server.exports")

DEFAULT_PARTITION_BYTES = 64 << 20
DEFAULT_ROWS = 4096
MAX_ROWS = 65536
IDLE_S = 600.0
_SWEEP_S = 5.0


@dataclass(eq=False)
class _Open:
    snap: ExportSnapshot
    used: float  # when last used (the engine's ``clock.monotonic_s``)
    readers: int = 0  # partitions being read now (never idle while any is)


class Exports:
    def __init__(self, moving: Moving, idle_s: float = IDLE_S) -> None:
        self._moving = moving
        self._idle_s = idle_s
        self._open: dict[str, _Open] = {}
        self._sweeper: asyncio.Task[None] | None = None
        # recent snapshots' ends: record starts, where a later snapshot may begin
        self._positions: collections.deque[int] = collections.deque(maxlen=64)

    @property
    def count(self) -> int:
        return len(self._open)

    async def begin(self, partition_bytes: int, role: str, since: int = 0) -> pb.ExportPlan:
        size = partition_bytes or DEFAULT_PARTITION_BYTES
        if size < 4096:
            raise InvalidArgument("partition_bytes", f"{size} is below the least, 4096")
        if since not in self._positions:
            since = 0  # not an earlier snapshot's end (a record start): all of it
        snap = await asyncio.to_thread(self._moving.begin_export, size, since)
        self._positions.append(snap.position)
        name = secrets.token_hex(8)
        self._open[name] = _Open(snap, self._moving.clock.monotonic_s())
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.create_task(self._sweep())
        log.info(
            "export snapshot taken",
            extra={"snapshot": name, "position": snap.position, "pending": snap.pending},
        )
        return pb.ExportPlan(
            snapshot=name,
            shard=snap.shard,
            epoch=snap.epoch,
            role=role,
            position=snap.position,
            since=snap.since,
            pending=snap.pending,
            partitions=[pb.ExportPartition(start=a, end=b) for a, b in snap.partitions],
            idle_ms=int(self._idle_s * 1000),
        )

    async def read(
        self, name: str, start: int, end: int, batch_rows: int
    ) -> AsyncIterator[pb.ExportBatch]:
        rows = batch_rows or DEFAULT_ROWS
        if rows > MAX_ROWS:
            raise InvalidArgument("batch_rows", f"{rows} is above the most, {MAX_ROWS}")
        if end < start:
            raise InvalidArgument("end", f"{end} is below start {start}")
        held = self._get(name)
        batches = self._moving.export(held.snap, start, end, rows)
        held.readers += 1
        try:
            while (got := await asyncio.to_thread(_next, batches)) is not None:
                held.used = self._moving.clock.monotonic_s()
                yield batch_of(held.snap.shard, got)
        finally:
            held.readers -= 1
            held.used = self._moving.clock.monotonic_s()
            with contextlib.suppress(ValueError):  # a read still runs in its thread
                batches.close()

    def end(self, name: str) -> bool:
        held = self._open.pop(name, None)
        if held is None:
            return False
        self._moving.end_export(held.snap)
        log.info("export snapshot ended", extra={"snapshot": name})
        return True

    def close(self) -> None:
        """End every snapshot (the node stops)."""
        for name in list(self._open):
            self.end(name)
        if self._sweeper is not None:
            self._sweeper.cancel()

    def _get(self, name: str) -> _Open:
        held = self._open.get(name)
        if held is None:
            raise NotFound("snapshot", f"no open export snapshot {quote(name)} (ended or idle)")
        return held

    async def _sweep(self) -> None:
        while self._open:
            await asyncio.sleep(min(_SWEEP_S, self._idle_s))
            now = self._moving.clock.monotonic_s()
            for name, held in list(self._open.items()):
                if not held.readers and now - held.used > self._idle_s:
                    log.warning("export snapshot idle; ended", extra={"snapshot": name})
                    self.end(name)


def _next(batches: Generator[ExportRows, None, None]) -> ExportRows | None:
    return next(batches, None)


def batch_of(shard: int, rows: ExportRows) -> pb.ExportBatch:
    """``rows`` as the wire's columns."""
    ids: list[str] = [""] * len(rows)
    for epoch in np.unique(rows.epochs).tolist():
        at = np.flatnonzero(rows.epochs == epoch)
        for i, text in zip(
            at.tolist(), MessageId.texts(shard, epoch, rows.positions[at]), strict=True
        ):
            ids[i] = text
    return pb.ExportBatch(
        ids=ids,
        blocked=rows.blocked.tolist(),
        topics=rows.topics,
        keys=rows.keys,
        header_rows=[i for i, h in enumerate(rows.headers) if h],
        headers=[pb.Headers(entries=decode_headers(h)) for h in rows.headers if h],
        bodies=rows.bodies,
        deliver_at_ms=rows.deliver_at_ms.tolist(),
        accepted_ms=rows.accepted_ms.tolist(),
        roll_counts=rows.roll_counts.tolist(),
        epochs=rows.epochs.tolist(),
        positions=rows.positions.tolist(),
        forwarded_to=rows.forwarded_to.tolist(),
    )
