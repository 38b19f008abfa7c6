"""A topic's ready queue on disk: ``<data>/ready/<topic_id>.idx``, an array of
48-byte entries, one per delivered message, in delivery order. A consumer
group's offset is an index into it.

File: a ``FileHeader`` (magic b"DQRI", base = topic id, param = entry size),
then entries (entry ``i`` at byte 32 + 48*i; format: ``formats.ready``).

Retention: entries delivered more than the retention period ago are expired:
``floor`` (kept in the checkpoint) moves past them, no read goes below it, and
the file's whole pages below it are punched out (``holes``): the file keeps its
size and offsets, its disk use stays at what retention keeps.

Derived data: DELIVER records in the CommitLog are the truth; recovery cuts
the file to the checkpoint's length and re-appends from the log. So appends
stay in memory (the *tail*) until ``write_tail`` (the flush stage, before each
checkpoint) or until ``_TAIL_MAX`` entries wait (then the release step that
reached it writes them: a bounded pause, ~0.5 ms, never a whole second's worth
under the lock; if that write fails, a full disk say, the entries stay held and
``write_tail`` tries again and reports it). The block written last stays
readable from memory too (two buffers take turns as the tail), so receivers a
little behind never read the file. Not thread-safe: the engine's lock
serialises every call.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..batchops import join_rows, take_rows
from ..errors import CorruptData
from ..formats.fileheader import HEADER_SIZE, FileHeader
from ..formats.ready import CODEC, ENTRY_DTYPE, ENTRY_SIZE, ReadyEntry
from .datafile import open_data_file, write_at
from .holes import punch_hole
from .newfile import create_file

__all__ = ["ReadyIndex"]

MAGIC = b"DQRI"
_TAIL_MAX = 1 << 13  # entries held in memory before they are written anyway
_ROW = np.dtype((np.void, ENTRY_SIZE))  # an entry as one opaque block (fast whole-row copies)
_PAGE = mmap.PAGESIZE  # holes are punched in whole pages; the header's page stays


class ReadyIndex:
    def __init__(self, path: Path, topic_id: int, now_ms: int) -> None:
        if not path.exists():
            header = FileHeader(MAGIC, topic_id, now_ms, ENTRY_SIZE).encode()
            self._fd = create_file(path, header)
        else:
            self._fd, _ = open_data_file(path, MAGIC, f"ready {path.name}")
        size = os.fstat(self._fd).st_size
        self.length = (size - HEADER_SIZE) // ENTRY_SIZE
        self._written = self.length  # entries in the file; the rest are in the tail
        self._tail = np.empty(0, dtype=ENTRY_DTYPE)  # grown by doubling
        self._spare = np.empty(0, dtype=ENTRY_DTYPE)  # the other buffer: holds _recent
        self._recent = self._tail  # the block written last: [_written - len, _written)
        self._dirty = False  # file writes not yet fsynced
        self.floor = 0  # entries below are expired: never read (their pages may be holes)
        self._punched_to = _PAGE  # no hole was punched from here on (since open)

    def append(self, entries: list[ReadyEntry]) -> int:
        """Append entries; return the index of the first."""
        names = ENTRY_DTYPE.names or ()  # magic, check and padding: 0 until encoded
        rows = np.array([tuple(getattr(e, n, 0) for n in names) for e in entries], ENTRY_DTYPE)
        return self.append_many(rows)

    def append_many(self, entries: np.ndarray) -> int:
        """Append an ``ENTRY_DTYPE`` array (to the tail); return the index of the first."""
        first = self.length
        held = first - self._written
        if held + len(entries) > len(self._tail):
            grown = np.empty(max(2 * len(self._tail), held + len(entries), 1024), ENTRY_DTYPE)
            grown.view(_ROW)[:held] = self._tail.view(_ROW)[:held]  # whole rows, not fields
            self._tail = grown
        self._tail[held : held + len(entries)] = entries
        self.length += len(entries)
        if self.length - self._written >= _TAIL_MAX:
            # still dirty: the next write_tail hands the fd out. The entries are in
            # the tail already: a failed write keeps them held, and write_tail (the
            # checkpoint) tries again and raises; the caller's step is not failed
            with contextlib.suppress(OSError):
                self._write_held()
        return first

    def write_tail(self) -> int:
        """Write the in-memory tail to the file (no fsync). Returns the file descriptor
        when the file has writes not yet fsynced (the caller fsyncs it), else -1."""
        self._write_held()
        if not self._dirty:
            return -1
        self._dirty = False
        return self._fd

    def _write_held(self) -> None:
        held = self.length - self._written
        if held:
            block = self._tail[:held]
            write_at(self._fd, CODEC.encode_many(block), HEADER_SIZE + self._written * ENTRY_SIZE)
            self._written = self.length
            # the written block stays readable; appends go on in the other buffer
            self._recent = block
            self._tail, self._spare = self._spare, self._tail
            self._dirty = True

    def read_at(self, offsets: Sequence[int]) -> np.ndarray:
        """The entries at ``offsets`` (any order, repeats allowed), in that order."""
        if isinstance(offsets, range):  # a contiguous run (auto-ack): one read, in order
            return self.read_many(offsets.start, len(offsets))
        lo, hi = min(offsets), max(offsets)
        if hi - lo + 1 == len(offsets) and offsets == list(range(lo, hi + 1)):
            return self.read_many(lo, len(offsets))  # a run in order (one receive's acks)
        if hi - lo < 4 * len(offsets):  # mostly contiguous: one read
            block = self.read_many(lo, hi - lo + 1)
            return take_rows(block, np.asarray(offsets) - lo)
        return join_rows([self.read_many(off, 1) for off in offsets], ENTRY_DTYPE)

    def read_many(self, index: int, count: int) -> np.ndarray:
        """Entries [index, index+count) as an ``ENTRY_DTYPE`` array: from the tail, or
        from the file with each entry's checksum checked."""
        count = max(0, min(count, self.length - index))
        if index < self.floor:
            raise CorruptData(f"ready index: entry {index} has expired (floor {self.floor})")
        if index >= self._written:
            at = index - self._written
            return self._tail[at : at + count].copy()
        at = index - (self._written - len(self._recent))
        if at >= 0:  # in the block written last: still in memory
            part = self._recent[at : at + count]
            if len(part) == count:
                return part.copy()
            return join_rows([part, self._tail[: count - len(part)]], ENTRY_DTYPE)
        from_file = min(count, self._written - index)
        data = os.pread(self._fd, from_file * ENTRY_SIZE, HEADER_SIZE + index * ENTRY_SIZE)
        if len(data) != from_file * ENTRY_SIZE or CODEC.check_many(data, from_file) != from_file:
            raise CorruptData("ready index: short or corrupt entries")
        head = np.frombuffer(data, dtype=ENTRY_DTYPE)
        if from_file == count:
            return head
        return join_rows([head, self._tail[: count - from_file]], ENTRY_DTYPE)

    def expire_before(self, cut_ms: int) -> int:
        """Move ``floor`` past the entries in the file delivered before ``cut_ms``;
        returns it. Entries are in delivery order, so a binary search finds the first
        to keep (after the clock stepped back, an older entry or two above it wait
        for the next call)."""
        lo, hi = self.floor, self._written
        while lo < hi:
            mid = (lo + hi) // 2
            if int(self.read_many(mid, 1)["delivered_ms"][0]) < cut_ms:
                lo = mid + 1
            else:
                hi = mid
        self.floor = lo
        return lo

    def release_blocks(self) -> bool:
        """Give the file's whole pages below ``floor`` back to the filesystem; False
        when it cannot punch holes (the blocks stay, nothing else changes)."""
        end = (HEADER_SIZE + self.floor * ENTRY_SIZE) // _PAGE * _PAGE
        if end <= self._punched_to:
            return True
        start, self._punched_to = self._punched_to, end
        return punch_hole(self._fd, start, end - start)

    def truncate(self, length: int) -> None:
        if length >= self.length:
            return
        if length < self._written:
            os.ftruncate(self._fd, HEADER_SIZE + length * ENTRY_SIZE)
            self._written = length
            self._recent = self._recent[:0]  # no longer the file's last block
            self._dirty = True
        self.length = length

    def close(self, *, write_tail: bool = True) -> None:
        if write_tail:
            self.write_tail()
        os.close(self._fd)
