"""The state map: one byte per message sequence number, memory-mapped, in
chunk files ``<data>/state/<chunk:012d>.map`` of ``CHUNK`` entries each.

Chunk file: a ``FileHeader`` (magic b"DQSM", base = chunk number, param =
entries per chunk) padded to 64 bytes, then one byte per seq. Files are sparse:
a never-written entry reads 0 (PENDING, or unknown if the seq was never used).

The map is derived data: CANCEL and DELIVER records in the CommitLog are the
truth, and recovery re-applies those after the checkpoint. It is what makes a
cancel work whatever slot it lands in and however many times a message rolled:
every copy of a message carries its seq, and the release stage checks this byte.

Not thread-safe: the engine's lock serialises writes.
"""

from __future__ import annotations

import enum
import mmap
import os
from pathlib import Path

import numpy as np

from ..pieces import FEW, high, low
from .datafile import open_data_file
from .fileheader import FileHeader
from .newfile import create_file

__all__ = ["MessageState", "StateMap"]

MAGIC = b"DQSM"
_CHUNK_BITS = 22
CHUNK = 1 << _CHUNK_BITS  # 4 MiB per chunk file: 4M messages
_IN_CHUNK = CHUNK - 1  # batch paths shift and mask: numpy divides u64 by a real division
_DATA_OFFSET = 64


class MessageState(enum.IntEnum):
    PENDING = 0
    CANCELLED = 1
    DELIVERED = 2
    RESCHEDULED = 3  # cancelled by a reschedule; a new message replaces it


class StateMap:
    def __init__(self, directory: Path, now_ms: int) -> None:
        self._dir = directory
        self._now_ms = now_ms
        directory.mkdir(parents=True, exist_ok=True)
        self._chunks: dict[int, tuple[int, mmap.mmap]] = {}
        self._views: dict[int, np.ndarray] = {}
        self._dirty: set[int] = set()

    def _chunk(self, n: int) -> mmap.mmap:
        got = self._chunks.get(n)
        if got is not None:
            return got[1]
        path = self._dir / f"{n:012d}.map"
        if not path.exists():
            header = FileHeader(MAGIC, n, self._now_ms, CHUNK).encode()
            fd = create_file(path, header, size=_DATA_OFFSET + CHUNK)
        else:
            fd, _ = open_data_file(path, MAGIC, f"state {path.name}", size=_DATA_OFFSET + CHUNK)
        m = mmap.mmap(fd, _DATA_OFFSET + CHUNK)
        self._chunks[n] = (fd, m)
        self._views[n] = np.frombuffer(m, dtype=np.uint8, count=CHUNK, offset=_DATA_OFFSET)
        return m

    def prepare(self, seq: int) -> None:
        """Open (or create) the chunk ``seq`` falls in now, before the first write to
        it: creating one fsyncs it and its directory, tens of ms that the first
        message of the chunk would otherwise wait for under the engine's lock."""
        self._chunk(seq >> _CHUNK_BITS)

    def raw_many(self, seqs: np.ndarray) -> np.ndarray:
        """States of many seqs as a uint8 array (batched form of ``raw``)."""
        if len(seqs) < FEW:
            return np.array([self.raw(s) for s in seqs.tolist()], dtype=np.uint8)
        if not len(seqs):
            return np.empty(0, dtype=np.uint8)
        lo, hi = int(low(seqs)) >> _CHUNK_BITS, int(high(seqs)) >> _CHUNK_BITS
        if lo == hi:
            self._chunk(lo)
            out: np.ndarray = self._views[lo][seqs & _IN_CHUNK]
            return out
        chunks = seqs >> _CHUNK_BITS
        out = np.empty(len(seqs), dtype=np.uint8)  # several chunks: fill piecewise
        for n in range(lo, hi + 1):
            sel = chunks == n
            if sel.any():
                self._chunk(n)
                out[sel] = self._views[n][seqs[sel] & _IN_CHUNK]
        return out

    def get(self, seq: int) -> MessageState:
        return MessageState(self.raw(seq))

    def raw(self, seq: int) -> int:
        """The state as a plain int (hot paths compare it with ``int(MessageState.X)``)."""
        got = self._chunks.get(seq // CHUNK)
        m = got[1] if got is not None else self._chunk(seq // CHUNK)
        return m[_DATA_OFFSET + seq % CHUNK]

    def set(self, seq: int, state: MessageState) -> None:
        n = seq // CHUNK
        self._chunk(n)[_DATA_OFFSET + seq % CHUNK] = state
        self._dirty.add(n)

    def set_many(self, seqs: np.ndarray, state: MessageState) -> None:
        """``set`` for many seqs at once."""
        if len(seqs) < FEW:
            for s in seqs.tolist():
                self.set(s, state)
            return
        if not len(seqs):
            return
        lo = int(low(seqs)) >> _CHUNK_BITS
        if lo == int(high(seqs)) >> _CHUNK_BITS:  # the usual batch: one chunk
            self._chunk(lo)
            self._views[lo][seqs & _IN_CHUNK] = state
            self._dirty.add(lo)
            return
        chunks = seqs >> _CHUNK_BITS
        for n in np.unique(chunks).tolist():
            self._chunk(n)
            self._views[n][seqs[chunks == n] & _IN_CHUNK] = state
            self._dirty.add(n)

    def take_dirty(self) -> list[int]:
        """The files of the chunks changed since the last call, to be fsynced by the
        caller (which may do it without the engine's lock): an fsync writes back the
        pages changed through a chunk's map, as msync does on Linux, and unlike
        ``mmap.flush`` lets go of the GIL while the disk works."""
        dirty, self._dirty = self._dirty, set()
        return [self._chunks[n][0] for n in sorted(dirty)]

    def flush(self) -> None:
        for fd in self.take_dirty():
            os.fsync(fd)

    def close(self) -> None:
        self._views.clear()  # views pin the maps; drop them first
        for fd, m in self._chunks.values():
            m.close()
            os.close(fd)
        self._chunks.clear()
