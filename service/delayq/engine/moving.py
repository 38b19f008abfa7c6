"""The engine's side of the Spark jobs (``Moving``), as the admin service calls
it: which ids were imported, releases to another shard and imports from one
(rebalance, ``timers.rebalance.transfer``), compaction blocks
(``timers.compaction``), and export snapshots read in partitions
(``timers.rebalance.snapshot``).

Every write here is durable (fsynced, and held by the in-sync replicas) before
it is acknowledged, whatever the flush policy: a move's other half acts on it.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence

from ..clock import Clock
from ..errors import DelayqError
from ..ids import MessageId
from ..timers.compaction.adding import BlockOutcome, BlockRow, add_block
from ..timers.rebalance import snapshot
from ..timers.rebalance.transfer import ImportRow, ReleaseOutcome
from .accepting import parse_ids
from .lifecycle import ShardLife

__all__ = ["Moving"]


class Moving:
    """Thread-safe: each call takes the shard's lock for its write or snapshot."""

    def __init__(self, life: ShardLife) -> None:
        self._life = life
        self.clock: Clock = life.setup.clock  # (the exports' idle times are read on it too)
        self._shard = life.setup.settings.shard

    # ------------------------------------------------------------------ rebalance
    def set_map_shards(self, listed: frozenset[int], joining: frozenset[int]) -> None:
        """See ``Engine.set_map_shards``; kept for the shard's later opens."""
        with self._life.lock:
            setup = self._life.setup
            setup.listed, setup.joining = listed, joining
            if self._life.running:
                st = self._life.opened().state
                st.listed, st.joining = listed, joining

    def imported(self, ids: Sequence[str]) -> list[bool]:
        """Which of these ids (of other shards) name messages moved here."""
        with self._life.held() as sh:
            index = sh.state.imports
            return [
                m is not None and m.shard != self._shard and index.get(m) is not None
                for m in parse_ids(ids)
            ]

    def release(self, ids: Sequence[str], target: int) -> list[ReleaseOutcome | DelayqError]:
        """Hand these pending messages over to shard ``target``; durable (fsynced,
        and held by the in-sync replicas) once this returns."""
        now = self.clock.now_ms()
        cols, errors = MessageId.parse_columns(ids)
        with self._life.held() as sh:
            epoch = sh.admit("ids")
            out, end = sh.moves.release(cols, errors, target, now)
        sh.acked(end, epoch, "ids", always=True)
        return out

    def import_messages(self, rows: Sequence[ImportRow]) -> list[str | DelayqError]:
        """Schedule copies of messages released by another shard, at most one per
        source id; durable once this returns. The copy's id (or an error) per row."""
        now = self.clock.now_ms()
        with self._life.held() as sh:
            epoch = sh.admit("messages")
            out, end = sh.moves.import_rows(rows, now)
        sh.acked(end, epoch, "messages", always=True)
        return out

    # ------------------------------------------------------------------ compaction
    def add_block(
        self, job: str, start_ms: int, end_ms: int, rows: Sequence[BlockRow]
    ) -> list[BlockOutcome | DelayqError]:
        """Take these pending messages of this shard, due in ``[start_ms, end_ms)``,
        out of the roll cycle into a compaction block, loaded into the wheel when
        the block comes within a window.
        An outcome (or error) per row; durable (fsynced, and held by the in-sync
        replicas) once this returns. ``InvalidArgument`` (nothing written) for a
        bad ``job``, ``end_ms`` or a ``start_ms`` less than two windows ahead."""
        now = self.clock.now_ms()
        with self._life.held() as sh:
            epoch = sh.admit("rows")
            out, end = add_block(sh.state, job, start_ms, end_ms, rows, now)
        sh.acked(end, epoch, "rows", always=True)
        return out

    # ------------------------------------------------------------------ export
    def begin_export(self, partition_bytes: int, since: int = 0) -> snapshot.ExportSnapshot:
        """A snapshot of the pending messages, in partitions of about
        ``partition_bytes`` of log (from ``since``, an earlier snapshot's position,
        when given); ``end_export`` it when read."""
        with self._life.lock:  # (the snapshot takes it again for what it reads)
            sh = self._life.opened()
        return snapshot.take(sh.state, partition_bytes, since)

    def export(
        self, snap: snapshot.ExportSnapshot, start: int, end: int, rows: int
    ) -> Generator[snapshot.ExportRows, None, None]:
        """The pending messages of partition ``[start, end)`` of ``snap``, ``rows`` a batch."""
        return snapshot.read_partition(self._life.opened().state, snap, start, end, rows)

    @staticmethod
    def end_export(snap: snapshot.ExportSnapshot) -> None:
        """Done with ``snap``: retention may delete what it read."""
        snapshot.release(snap)
