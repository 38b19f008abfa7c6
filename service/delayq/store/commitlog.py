"""The CommitLog: every durable fact of a shard, as framed records (see ``records``)
in a ``SegmentedLog`` under ``<data>/commitlog/`` (segment magic b"DQCL").

Invariants: records are appended in batches by one writer; a record's position
never changes; on open, ``scan`` from the checkpoint finds the first torn or
corrupt record and ``truncate`` cuts it, so garbage is never read as data.

Reads of many records (a receive, a cancel, a roll) decode straight from a
read-only map of each segment: no system call per scattered record, and every
record's bounds, type and CRC are checked before anything is used.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..errors import CorruptData
from . import records
from .segments import LogView

__all__ = ["CommitLog"]

MAGIC = b"DQCL"
_READ_AHEAD = 512  # one pread covers a typical record; larger ones take a second read
_SCAN_CHUNK = 4 << 20


class CommitLog(LogView):
    magic, what = MAGIC, "commitlog"

    def read(self, pos: int, *, payload: bool = True) -> tuple[records.Record, int]:
        """The record at ``pos``; ``CorruptData`` if there is none or it is damaged.
        ``payload=False``: see ``records.decode``."""
        head = self.log.read(pos, _READ_AHEAD)
        length = records.frame_length(head)
        if length > len(head):
            head = self.log.read(pos, length)
        if not head:
            raise CorruptData(f"no commitlog data at {pos}")
        return records.decode(head, payload=payload)

    def read_many(
        self, positions: list[int], *, payload: bool = True
    ) -> list[records.Record | CorruptData]:
        """``read`` for many positions of any record type, decoded straight from the
        segments' maps. A missing or damaged record gives its ``CorruptData`` in
        place."""
        out: list[records.Record | CorruptData] = [
            CorruptData(f"no commitlog data at {pos}") for pos in positions
        ]
        for rows, view, offs in self.log.views(np.asarray(positions, dtype=np.int64)):
            ks = range(len(positions)) if rows is None else rows.tolist()
            for k, off in zip(ks, offs.tolist(), strict=True):
                try:
                    out[k] = records.decode(view, off, payload=payload)[0]
                except CorruptData as exc:
                    out[k] = exc
        return out

    def read_heads(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The fixed parts of the message records at ``positions`` and a mask of the
        valid ones (see ``records.message_heads``)."""
        cols = self.read_messages(positions, payload=False)
        return cols.heads, cols.ok

    def read_messages(
        self, positions: np.ndarray, *, payload: bool = True
    ) -> records.MessageColumns:
        """The message records at ``positions`` as columns, decoded in one vectorised
        pass per segment straight from its map (no copy but the cut-out keys,
        headers and bodies). Invalid or missing records are rows with ``ok`` False."""
        groups = self.log.views(positions)
        if len(groups) == 1 and groups[0][0] is None:
            _, view, offs = groups[0]
            return records.message_columns(view, offs, payload=payload)
        n = len(positions)
        cols = records.message_columns(
            b"", np.zeros(n, dtype=np.int64), payload=payload
        )  # all rows invalid
        for rows, view, offs in groups:
            assert rows is not None
            part = records.message_columns(view, offs, payload=payload)
            cols.heads[rows], cols.ok[rows] = part.heads, part.ok
            for j, i in enumerate(rows.tolist()):
                if payload and part.ok[j]:
                    cols.keys[i], cols.headers[i] = part.keys[j], part.headers[j]
                    cols.bodies[i] = part.bodies[j]
        return cols

    def scan(self, start: int) -> Iterator[tuple[int, records.Record, int]]:
        """Yield (position, record, length) from ``start`` to the last valid record.

        Stops silently at the first torn/corrupt record; ``valid_end`` after
        the scan says where that was.
        """
        for seg, first in self.spans(start):
            pos = first
            while pos < seg.end:
                chunk = self.log.read(pos, _SCAN_CHUNK)
                off = 0
                while off < len(chunk):
                    length = records.frame_length(chunk, off)
                    if length > len(chunk) - off:
                        if off == 0 and pos + length <= seg.end:
                            chunk = self.log.read(pos, length)  # one record larger than a chunk
                            continue
                        break
                    try:
                        rec, length = records.decode(chunk, off)
                    except CorruptData:
                        return
                    yield pos + off, rec, length
                    off += length
                    self.valid_end = pos + off
                if off == 0:
                    return
                pos += off
