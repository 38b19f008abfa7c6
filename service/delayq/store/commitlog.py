"""The CommitLog: every durable fact of a shard, as framed records (see ``records``)
in a ``SegmentedLog`` under ``<data>/commitlog/`` (segment magic b"DQCL").

Invariants: records are appended in batches by one writer; a record's position
never changes; on open, ``scan`` from the checkpoint finds the first torn or
corrupt record and ``truncate`` cuts it, so garbage is never read as data.

Reads of many records (a receive, a cancel) are planned as a batch: nearby
records share one pread, scattered ones are read one by one, and every
record's bounds, type and CRC are checked before anything is used.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..errors import CorruptData
from . import records
from .segments import LogView, SegmentedLog

__all__ = ["CommitLog"]

MAGIC = b"DQCL"
_READ_AHEAD = 512  # one pread covers a typical record; larger ones take a second read
_SCAN_CHUNK = 4 << 20
_SPAN = 256 << 10  # at most this many bytes per pread of nearby records
_GAP = 8 << 10  # records further apart than this are read separately


class CommitLog(LogView):
    def __init__(self, directory: Path, segment_bytes: int) -> None:
        super().__init__(SegmentedLog(directory, MAGIC, segment_bytes, "commitlog"))

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

    def _plan(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Group positions into preads: neighbours (less than ``_GAP`` apart) in one
        segment and one ``_SPAN``-aligned window share a read from the first to the
        last (plus the read-ahead); scattered records are read one by one rather
        than reading the gaps between them. Returns the sort order of
        ``positions``, each sorted position's span, and each span's start and
        length to read."""
        order = np.argsort(positions, kind="stable")
        ordered = positions[order]
        first_pos, last_pos = int(ordered[0]), int(ordered[-1])
        seg = self.log.segment_at(first_pos)
        if (
            last_pos - first_pos < _GAP * len(ordered)  # dense (a batch scheduled together)
            and last_pos - first_pos < _SPAN
            and seg is not None
            and last_pos < seg.end
        ):  # one read covers them all: the usual case for a cancel
            one = np.zeros(len(order), dtype=np.int64)
            return order, one, ordered[:1], np.array([last_pos - first_pos + _READ_AHEAD])
        window = self.log.segment_indexes(ordered) * (1 << 40) + ordered // _SPAN
        cut = (window[1:] != window[:-1]) | (np.diff(ordered) > _GAP)
        first = np.flatnonzero(np.concatenate(([True], cut)))
        last = np.append(first[1:], len(order)) - 1
        span = np.cumsum(np.concatenate(([False], cut)))
        starts = ordered[first]
        return order, span, starts, ordered[last] - starts + _READ_AHEAD

    def read_many(
        self, positions: list[int], *, payload: bool = True
    ) -> list[records.Record | CorruptData]:
        """``read`` for many positions of any record type, with the reads planned as in
        ``read_messages``. A missing or damaged record gives its ``CorruptData`` in
        place."""
        out: list[records.Record | CorruptData] = [CorruptData("unread")] * len(positions)
        if not positions:
            return out
        order, span, starts, lengths = self._plan(np.asarray(positions, dtype=np.int64))
        chunks = self.log.read_spans(starts, lengths)
        begin = starts.tolist()
        for k, j in zip(order.tolist(), span.tolist(), strict=True):
            data, off = chunks[j], positions[k] - begin[j]
            try:
                if records.frame_length(data, off) > len(data) - off:
                    out[k] = self.read(positions[k], payload=payload)[0]
                else:
                    out[k] = records.decode(data, off, payload=payload)[0]
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
        """The message records at ``positions`` as columns. Nearby records share one
        pread (a span); all spans are decoded together in one vectorised pass, then
        records longer than the read-ahead are read whole in a second pass. Invalid
        or missing records are rows with ``ok`` False."""
        offs = np.zeros(len(positions), dtype=np.int64)
        room = np.zeros(len(positions), dtype=np.int64)  # bytes read for each row's record
        chunks: list[bytes] = []
        if len(positions):
            order, span, starts, lengths = self._plan(positions)
            chunks = self.log.read_spans(starts, lengths)
            got = np.fromiter(map(len, chunks), dtype=np.int64, count=len(chunks))
            into = positions[order] - starts[span]  # offset of each record in its span
            offs[order] = into + (np.cumsum(got) - got)[span]
            room[order] = got[span] - into
        cols = _decode(chunks, offs, payload)
        short = np.flatnonzero(~cols.ok & (cols.heads["length"] > room))
        if len(short):  # longer than the read-ahead: read those whole
            wholes = self.log.read_spans(positions[short], cols.heads["length"][short])
            sizes = np.array([len(w) for w in wholes], dtype=np.int64)
            again = _decode(wholes, np.cumsum(sizes) - sizes, payload)
            cols.heads[short], cols.ok[short] = again.heads, again.ok
            for j, i in enumerate(short.tolist()):
                if payload and again.ok[j]:
                    cols.keys[i], cols.headers[i] = again.keys[j], again.headers[j]
                    cols.bodies[i] = again.bodies[j]
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


def _decode(chunks: list[bytes], offsets: np.ndarray, payload: bool) -> records.MessageColumns:
    """Message records at ``offsets`` into the concatenation of ``chunks``."""
    buf = chunks[0] if len(chunks) == 1 else b"".join(chunks)  # none: b""
    heads, ok = records.message_heads(buf, offsets)
    if not payload:
        return records.MessageColumns(heads, ok, [], [], [])
    keys, headers, bodies = records.message_payloads(buf, offsets, heads, ok)
    return records.MessageColumns(heads, ok, keys, headers, bodies)
