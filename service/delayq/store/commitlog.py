"""The CommitLog: every durable fact of a shard, as framed records (see ``formats``)
in a ``SegmentedLog`` under ``<data>/commitlog/`` (segment magic b"DQCL").

Invariants: records are appended in batches by one writer; a record's position
never changes; on open, ``scan`` from the checkpoint finds the first torn or
corrupt record and ``truncate`` cuts it, so garbage is never read as data.

Reads of many records (a receive, a cancel, a roll) decode straight from a
read-only map of each segment: no system call per scattered record, and every
record's bounds, type and CRC are checked before anything is used.

Before retention deletes a segment, ``keep_pending`` copies the SCHEDULE records
of its still-pending messages to ``kept`` (see ``keptrecords``); reads of a
position before the first segment are answered from there.

Each ``append`` calls ``on_append`` once its records are readable (the engine
hands in its ``growth.LogGrowth``'s ``notify``: the replication stream waits on
it); by default nothing.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from .. import formats
from ..batchops import high
from ..errors import CorruptData
from ..formats.commitlog import record_starts, unchecked_schedules
from .keptrecords import Kept, KeptRecords
from .logview import LogView

__all__ = ["CommitLog"]

MAGIC = b"DQCL"
_READ_AHEAD = 512  # one pread covers a typical record; larger ones take a second read
_SCAN_CHUNK = 4 << 20


class CommitLog(LogView):
    magic, what = MAGIC, "commitlog"

    def _open_beside(self, directory: Path) -> None:
        self.kept = KeptRecords(directory / "kept")
        self.on_append: Callable[[], None] = _nothing

    def append(self, data: bytes | bytearray | memoryview, now_ms: int) -> int:
        base = self.log.append(data, now_ms)
        self.on_append()
        return base

    def read(self, pos: int, *, payload: bool = True) -> tuple[formats.Record, int]:
        """The record at ``pos``; ``CorruptData`` if there is none or it is damaged.
        ``payload=False``: see ``formats.decode``."""
        data = self._frame(pos)
        if not data:
            raise CorruptData(f"no commitlog data at {pos}")
        return formats.decode(data, payload=payload)

    def _frame(self, pos: int) -> bytes:
        """The bytes of the record at ``pos``, read with ``pread`` (or from the kept
        records before the first segment); b"" when there are none."""
        if pos < self.log.start:
            return self.kept.read(pos)
        head = self.log.read(pos, _READ_AHEAD)
        length = formats.frame_length(head)
        if length > len(head):
            head = self.log.read(pos, length)
        return head

    def read_many(
        self, positions: list[int], *, payload: bool = True
    ) -> list[formats.Record | CorruptData]:
        """``read`` for many positions of any record type, decoded straight from the
        segments' maps. A missing or damaged record gives its ``CorruptData`` in
        place."""
        out: list[formats.Record | CorruptData] = [
            CorruptData(f"no commitlog data at {pos}") for pos in positions
        ]
        for rows, view, offs in self.log.views(np.asarray(positions, dtype=np.int64)):
            ks = range(len(positions)) if rows is None else rows.tolist()
            messages = formats.decode_messages(view, offs, payload=payload).records()
            for k, off, got in zip(ks, offs.tolist(), messages, strict=True):
                if got is not None:
                    out[k] = got[0]
                    continue
                try:  # another type, or not valid: decoded alone (which says why)
                    out[k] = formats.decode(view, off, payload=payload)[0]
                except CorruptData as exc:
                    out[k] = exc
        return out

    def read_heads(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The fixed parts of the message records at ``positions`` and a mask of the
        valid ones (see ``formats.decode_messages``); positions before the first
        segment are read from the kept records."""
        cols = self.read_scheduled(positions, payload=False)
        return cols.heads, cols.ok

    def read_scheduled(
        self, positions: np.ndarray, *, payload: bool = True
    ) -> formats.MessageColumns:
        """``read_messages``, with positions before the first segment read from the
        kept records (each file opened once)."""
        cols = self.read_messages(positions, payload=payload)
        old = np.flatnonzero(positions < self.log.start)
        for i, kept in zip(old.tolist(), self.kept.read_many(positions[old].tolist()), strict=True):
            if kept:
                _put(cols, i, formats.decode_messages(kept, (0,), payload=payload), 0)
        return cols

    def keep_pending(
        self, base: int, now_ms: int, pending: Callable[[np.ndarray], np.ndarray]
    ) -> tuple[Kept, int]:
        """Write the SCHEDULE records of sealed segment ``base`` whose seq is still
        ``pending`` to a kept-records file (durably), before retention deletes the
        segment; the caller installs the result (``kept.install``) under its lock.
        Also returns 1 + the highest seq of the segment's SCHEDULE records (0 if
        none). Reads the segment without the writer: it no longer changes."""
        seg = next(s for s in self.log.segments if s.base == base)
        start = self.log.first_record_pos(base) - base
        with mmap.mmap(seg.fd, seg.size, prot=mmap.PROT_READ) as view:
            offsets, recs, seq_end = _pending_records(view, start, pending)
        return self.kept.write(base, now_ms, [base + o for o in offsets], recs), seq_end

    def read_messages(
        self, positions: np.ndarray, *, payload: bool = True
    ) -> formats.MessageColumns:
        """The message records at ``positions`` as columns, decoded in one vectorised
        pass per segment straight from its map (no copy but the cut-out keys,
        headers and bodies). Invalid or missing records are rows with ``ok`` False."""
        groups = self.log.views(positions)
        if len(groups) == 1 and groups[0][0] is None:
            _, view, offs = groups[0]
            return formats.decode_messages(view, offs, payload=payload)
        n = len(positions)
        cols = formats.MessageColumns.junk(n, payload=payload)  # all rows invalid
        for rows, view, offs in groups:
            assert rows is not None
            part = formats.decode_messages(view, offs, payload=payload)
            for j, i in enumerate(rows.tolist()):
                _put(cols, i, part, j)
        return cols

    def read_again(self, cols: formats.MessageColumns, positions: np.ndarray) -> list[int]:
        """Read the rows of ``cols`` that are not ``ok`` again, each alone with
        ``pread`` instead of through a segment's map, filling in those that read
        whole now; returns their rows. (A record a map showed torn is looked at
        once more before it counts as damaged: a damaged one costs its message.)"""
        mended = []
        for i in np.flatnonzero(~cols.ok).tolist():
            data = self._frame(int(positions[i]))
            if data:
                got = formats.decode_messages(data, (0,), payload=cols.payload)
                if got.ok[0]:
                    _put(cols, i, got, 0)
                    mended.append(i)
        return mended

    def scan(self, start: int) -> Iterator[tuple[int, formats.Record, int]]:
        """Yield (position, record, length) from ``start`` to the last valid record.

        Stops silently at the first torn/corrupt record; ``valid_end`` after
        the scan says where that was.
        """
        for seg, first in self.spans(start):
            pos = first
            while pos < seg.end:
                chunk = self.log.read(pos, _SCAN_CHUNK)
                off = 0
                # the records that fit whole, messages decoded as one batch
                starts = record_starts(chunk, 0)
                messages = formats.decode_messages(chunk, starts).records()
                for at, got in zip(starts.tolist(), messages, strict=True):
                    rec: formats.Record
                    if got is not None:
                        rec, length = got
                    else:  # another type, or not valid: decoded alone
                        try:
                            rec, length = formats.decode(chunk, at)
                        except CorruptData:
                            return
                    yield pos + at, rec, length
                    off = at + length
                    self.valid_end = pos + off
                while off < len(chunk):  # a record the chunk cuts short, or no record
                    length = formats.frame_length(chunk, off)
                    if length > len(chunk) - off:
                        if off == 0 and pos + length <= seg.end:
                            chunk = self.log.read(pos, length)  # one record larger than a chunk
                            continue
                        break
                    try:
                        rec, length = formats.decode(chunk, off)
                    except CorruptData:
                        return
                    yield pos + off, rec, length
                    off += length
                    self.valid_end = pos + off
                if off == 0:
                    return
                pos += off


def _pending_records(
    view: mmap.mmap, start: int, pending: Callable[[np.ndarray], np.ndarray]
) -> tuple[list[int], list[bytes], int]:
    """The offsets and bytes (copies) of the SCHEDULE records in ``view`` whose seq
    is ``pending``, and 1 + the highest seq of all its SCHEDULE records (0 if none).
    CRCs are not checked here (a read of a kept record checks its own): a whole
    segment of them would cost more than the walk."""
    offsets, heads = unchecked_schedules(view, start)
    seqs = heads["seq"]
    seq_end = int(high(seqs)) + 1 if len(seqs) else 0
    rows = pending(seqs)
    at, sizes = offsets[rows].tolist(), heads["length"][rows].tolist()
    return at, [view[o : o + n] for o, n in zip(at, sizes, strict=True)], seq_end


def _put(cols: formats.MessageColumns, i: int, part: formats.MessageColumns, j: int) -> None:
    """Row ``j`` of ``part`` into row ``i`` of ``cols`` (its payload when both have one)."""
    cols.heads[i], cols.ok[i] = part.heads[j], part.ok[j]
    if cols.payload and part.ok[j]:
        cols.keys[i], cols.headers[i] = part.keys[j], part.headers[j]
        cols.bodies[i] = part.bodies[j]


def _nothing() -> None:
    pass
