"""A topic's ready queue on disk: ``<data>/ready/<topic_id>.idx``, an array of
48-byte entries, one per delivered message, in delivery order. A consumer
group's offset is an index into it.

File: a ``FileHeader`` (magic b"DQRI", base = topic id, param = entry size),
then entries (entry ``i`` at byte 32 + 48*i):

| offset | size | type | meaning                                      |
|-------:|-----:|------|----------------------------------------------|
| 0      | 4    | u32  | magic 0x52445949                             |
| 4      | 4    | u32  | check of bytes [8, 48) (see `fixedrecord`)   |
| 8      | 8    | u64  | seq                                          |
| 16     | 8    | i64  | body_pos: CommitLog position of the body     |
| 24     | 4    | u32  | body_size                                    |
| 28     | 4    | u32  | reserved                                     |
| 32     | 8    | i64  | deliver_at_ms                                |
| 40     | 8    | i64  | delivered_ms                                 |

Derived data: DELIVER records in the CommitLog are the truth; recovery cuts
the file to the checkpoint's length and re-appends from the log.
Not thread-safe for writers; reads (pread) may run beside an append.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..errors import CorruptData
from .fileheader import HEADER_SIZE, FileHeader
from .fixedrecord import FixedCodec

__all__ = ["ReadyEntry", "ReadyIndex"]

MAGIC = b"DQRI"
CODEC = FixedCodec(
    0x52445949,
    [
        ("seq", "Q"),
        ("body_pos", "q"),
        ("body_size", "I"),
        ("r0", "x"),
        ("r1", "x"),
        ("r2", "x"),
        ("r3", "x"),
        ("deliver_at_ms", "q"),
        ("delivered_ms", "q"),
    ],
    "ready index",
)
ENTRY_DTYPE = CODEC.dtype
ENTRY_SIZE = CODEC.size


class ReadyEntry(NamedTuple):
    seq: int
    body_pos: int
    body_size: int
    deliver_at_ms: int
    delivered_ms: int

    def encode(self) -> bytes:
        return CODEC.encode(*self)


class ReadyIndex:
    def __init__(self, path: Path, topic_id: int, now_ms: int) -> None:
        fresh = not path.exists()
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if fresh:
            os.write(self._fd, FileHeader(MAGIC, topic_id, now_ms, ENTRY_SIZE).encode())
        else:
            FileHeader.decode(os.pread(self._fd, HEADER_SIZE, 0), MAGIC, f"ready {path.name}")
        size = os.fstat(self._fd).st_size
        self.length = (size - HEADER_SIZE) // ENTRY_SIZE
        self._dirty = fresh

    def append(self, entries: list[ReadyEntry]) -> int:
        """Append entries; return the index of the first."""
        return self._write(b"".join(e.encode() for e in entries), len(entries))

    def append_many(self, entries: np.ndarray) -> int:
        """Append an ``ENTRY_DTYPE`` array; return the index of the first."""
        return self._write(CODEC.encode_many(entries), len(entries))

    def _write(self, data: bytes, count: int) -> int:
        first = self.length
        os.pwrite(self._fd, data, HEADER_SIZE + first * ENTRY_SIZE)
        self.length += count
        self._dirty = True
        return first

    def read_many(self, index: int, count: int) -> np.ndarray:
        """Entries [index, index+count) as an ``ENTRY_DTYPE`` array, each checksum-checked."""
        count = max(0, min(count, self.length - index))
        data = os.pread(self._fd, count * ENTRY_SIZE, HEADER_SIZE + index * ENTRY_SIZE)
        if len(data) != count * ENTRY_SIZE or CODEC.check_many(data, count) != count:
            raise CorruptData("ready index: short or corrupt entries")
        return np.frombuffer(data, dtype=ENTRY_DTYPE)

    def truncate(self, length: int) -> None:
        if length < self.length:
            os.ftruncate(self._fd, HEADER_SIZE + length * ENTRY_SIZE)
            self.length = length
            self._dirty = True

    def sync(self) -> None:
        if self._dirty:
            os.fsync(self._fd)
            self._dirty = False

    def close(self) -> None:
        os.close(self._fd)
