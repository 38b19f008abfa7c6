"""The engine's side of the Spark jobs (``MovesSide``): which ids were imported,
releases to another shard and imports from one (rebalance), compaction blocks,
and export snapshots read in partitions.
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Sequence

from ..errors import DelayqError
from ..ids import MessageId
from ..timers.compaction.adding import BlockOutcome, BlockRow, add_block
from ..timers.rebalance import snapshot
from ..timers.rebalance.transfer import ImportRow, ReleaseOutcome
from .core import EngineCore, parse_ids

__all__ = ["MovesSide"]

log = logging.getLogger("delayq.engine")


class MovesSide(EngineCore):
    # ------------------------------------------------------------------ rebalance
    def imported(self, ids: Sequence[str]) -> list[bool]:
        """Which of these ids (of other shards) name messages moved here."""
        with self._lock:
            self._check_running()
            shard, index = self.settings.shard, self._state.imports
            return [
                m is not None and m.shard != shard and index.get(m) is not None
                for m in parse_ids(ids)
            ]

    def release(self, ids: Sequence[str], target: int) -> list[ReleaseOutcome | DelayqError]:
        """Hand these pending messages over to shard ``target`` (``timers.rebalance.transfer``);
        durable (fsynced, and held by the in-sync replicas) once this returns."""
        now = self.clock.now_ms()
        cols, errors = MessageId.parse_columns(ids)
        with self._lock:
            epoch = self._admit("ids")
            out, end = self._moves.release(cols, errors, target, now)
        self._acked(end, epoch, "ids", always=True)
        return out

    def import_messages(self, rows: Sequence[ImportRow]) -> list[str | DelayqError]:
        """Schedule copies of messages released by another shard, at most one per
        source id (``timers.rebalance.transfer``); durable once this returns. The copy's id (or
        an error) per row."""
        now = self.clock.now_ms()
        with self._lock:
            epoch = self._admit("messages")
            out, end = self._moves.import_rows(rows, now)
        self._acked(end, epoch, "messages", always=True)
        return out

    # ------------------------------------------------------------------ compaction
    def add_block(
        self, job: str, start_ms: int, end_ms: int, rows: Sequence[BlockRow]
    ) -> list[BlockOutcome | DelayqError]:
        """Take these pending messages of this shard, due in ``[start_ms, end_ms)``,
        out of the roll cycle into a compaction block, loaded into the wheel when
        the block comes within a window (``timers.compaction``).
        An outcome (or error) per row; durable (fsynced, and held by the in-sync
        replicas) once this returns. ``InvalidArgument`` (nothing written) for a
        bad ``job``, ``end_ms`` or a ``start_ms`` less than two windows ahead."""
        now = self.clock.now_ms()
        with self._lock:
            epoch = self._admit("rows")
            out, end = add_block(self._state, job, start_ms, end_ms, rows, now)
        self._acked(end, epoch, "rows", always=True)
        return out

    # ------------------------------------------------------------------ export
    def begin_export(self, partition_bytes: int, since: int = 0) -> snapshot.ExportSnapshot:
        """A snapshot of the pending messages (``timers.rebalance.snapshot``), in partitions of
        about ``partition_bytes`` of log (from ``since``, an earlier snapshot's
        position, when given); ``end_export`` it when read."""
        with self._lock:
            self._check_running()
        return snapshot.take(self._state, partition_bytes, since)

    def export(
        self, snap: snapshot.ExportSnapshot, start: int, end: int, rows: int
    ) -> Generator[snapshot.ExportRows, None, None]:
        """The pending messages of partition ``[start, end)`` of ``snap``, ``rows`` a batch."""
        self._check_running()
        return snapshot.read_partition(self._state, snap, start, end, rows)

    @staticmethod
    def end_export(snap: snapshot.ExportSnapshot) -> None:
        """Done with ``snap``: retention may delete what it read."""
        snapshot.release(snap)
