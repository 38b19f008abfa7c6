"""The state map: one byte per message sequence number, memory-mapped, in
chunk files ``<data>/state/<chunk:012d>.map`` of ``CHUNK`` entries each, and
for the chunks holding a message forwarded to shard 128 or above a side file
``<chunk:012d>.fwd`` (a u16 shard per entry).

Chunk file: a ``FileHeader`` (magic b"DQSM", base = chunk number, param =
entries per chunk) padded to 64 bytes, then one byte per seq; side file: the
same header with magic b"DQSF", then two bytes per seq (both: ``formats.messagestate``).
A never-written entry reads 0 (PENDING, or unknown if the seq was never used).
A file's blocks are allocated when it is opened (``posix_fallocate``): a full
disk then fails that call, never a write through the map (which would be a SIGBUS).

Reads and writes speak state *values* (``formats.messagestate``): a forward to shard T
is ``FORWARD_BASE + T`` for every shard the map allows; this module alone turns
one to T >= 128 into byte ``FORWARDED_FAR`` plus the side file's entry (written
first), and back. ``raw_many`` and ``copy_live`` return uint8 arrays, uint16 when
they hold such a forward. A chunk's side file is made by its first far forward,
opened by the first read or write of one, fsynced with the chunk (``take_dirty``),
closed and deleted with it.

The map is derived data: CANCEL and DELIVER records in the CommitLog are the
truth, and recovery re-applies those after the checkpoint. It is what makes a
cancel work whatever slot it lands in and however many times a message rolled:
every copy of a message carries its seq, and the release stage checks this byte.

Retired chunks (``retiredchunks``: the set, its file, the search for a live
entry): a chunk whose every entry is done (none PENDING or BLOCKED),
durably, and whose seqs no id-addressed call can name any more (the caller's bound, see
``sweep``) is retired: its number goes into ``retired.json`` (ranges, replaced
atomically) and then its file is deleted. Its entries read as DELIVERED ("done";
only the not-pending checks of stray timer copies still read them) and writes to
it are dropped. A kill between the two steps leaves a file that the next open
deletes. Chunks not written since the last sweep are closed (their descriptor
and map), so open files follow the traffic, not the history.

Not thread-safe: the engine's lock serialises writes.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Collection
from pathlib import Path

import numpy as np

from ..atomicfile import sync_dir
from ..batchops import FEW, high, low
from ..errors import CorruptData
from ..formats.fileheader import FileHeader
from ..formats.messagestate import (
    DATA_OFFSET,
    FORWARD_BASE,
    FORWARDED_FAR,
    NEAR_SHARDS,
    SIDE_ENTRY,
    MessageState,
    state_of,
)
from .datafile import open_data_file
from .newfile import create_file
from .retiredchunks import first_pending, load_retired, write_retired

__all__ = ["NoSideFile", "StateMap"]

MAGIC = b"DQSM"
SIDE_MAGIC = b"DQSF"
CHUNK_BITS = 22
"""Entries per chunk file: 2**CHUNK_BITS (4 MiB, 4M messages). Read when a map is
opened (tests make chunks small); a data directory keeps the size it was made with."""
CHUNK = 1 << CHUNK_BITS
_SWEEP_MOST = 16  # chunks looked at per sweep (~5 ms each if all done): the rest wait


_DONE_READ = MessageState.DELIVERED  # what a retired chunk's entries read as
_FIRST_FAR = FORWARD_BASE + NEAR_SHARDS  # the lowest state value stored as FORWARDED_FAR


class NoSideFile(CorruptData):
    """A chunk holds a far forward (byte ``FORWARDED_FAR``) but no side file says
    to which shard: a replay of the records that forwarded it makes it again."""


class StateMap:
    def __init__(self, directory: Path, now_ms: int) -> None:
        self._dir = directory
        self._now_ms = now_ms
        self._bits = CHUNK_BITS
        self._size = 1 << CHUNK_BITS
        self._mask = self._size - 1  # batch paths shift and mask (numpy's u64 // divides)
        directory.mkdir(parents=True, exist_ok=True)
        self._chunks: dict[int, tuple[int, mmap.mmap]] = {}
        self._views: dict[int, np.ndarray] = {}
        self._sides: dict[int, tuple[int, mmap.mmap]] = {}  # open side files
        self._side_views: dict[int, np.ndarray] = {}
        self._dirty: set[int] = set()
        self._retired = load_retired(directory, self._size)
        self._done_view = np.broadcast_to(np.uint8(_DONE_READ), (self._size,))
        existing = {int(p.stem) for p in directory.glob("*.map")}
        for n in [n for n in existing if n in self._retired]:  # a kill inside ``_retire``
            self._path(n).unlink()
        for side in directory.glob("*.fwd"):
            if int(side.stem) in self._retired:
                side.unlink()
        # chunks to look at for retirement (written since looked at; each on disk once
        # after a start), and chunks written since the last sweep (kept open)
        self._unexamined = {n for n in existing if n not in self._retired}
        self._written: set[int] = set()
        self._done_below: dict[int, int] = {}  # every entry below this index is done

    @property
    def retired(self) -> frozenset[int]:
        return self._retired.all()

    @property
    def open_chunks(self) -> int:
        return len(self._chunks)

    def _path(self, n: int) -> Path:
        return self._dir / f"{n:012d}.map"

    def _side_path(self, n: int) -> Path:
        return self._dir / f"{n:012d}.fwd"

    def _chunk(self, n: int) -> mmap.mmap:
        got = self._chunks.get(n)
        if got is not None:
            return got[1]
        assert n not in self._retired, f"state chunk {n} is retired"
        fd, m = self._mapped(self._path(n), MAGIC, n, 1)
        self._chunks[n] = (fd, m)
        self._views[n] = np.frombuffer(m, dtype=np.uint8, count=self._size, offset=DATA_OFFSET)
        return m

    def _side(self, n: int, *, create: bool) -> np.ndarray | None:
        """Chunk ``n``'s side-file entries (the shards of its far forwards); None if
        it has none and ``create`` is False."""
        got = self._side_views.get(n)
        if got is not None:
            return got
        path = self._side_path(n)
        if not create and not path.exists():
            return None
        fd, m = self._mapped(path, SIDE_MAGIC, n, SIDE_ENTRY.itemsize)
        self._sides[n] = (fd, m)
        view = np.frombuffer(m, dtype=SIDE_ENTRY, count=self._size, offset=DATA_OFFSET)
        self._side_views[n] = view
        return view

    def _far(self, n: int) -> np.ndarray:
        """Chunk ``n``'s side-file entries, read for a ``FORWARDED_FAR`` byte of it."""
        side = self._side(n, create=False)
        if side is None:
            raise NoSideFile(
                f"state {self._path(n).name}: a message forwarded to a shard of "
                f"{NEAR_SHARDS} or more, and no {self._side_path(n).name} to say which"
            )
        return side

    def _mapped(self, path: Path, magic: bytes, n: int, width: int) -> tuple[int, mmap.mmap]:
        """Chunk ``n``'s file ``path`` of ``width``-byte entries (made if it is not
        there), opened and mapped whole."""
        size = DATA_OFFSET + width * self._size
        if not path.exists():
            header = FileHeader(magic, n, self._now_ms, self._size).encode()
            fd = create_file(path, header, size=size)
        else:
            fd, _ = open_data_file(path, magic, f"state {path.name}", size=size)
        try:
            # every page given its block now: on a full disk this fails (ENOSPC), where
            # a write through the map into a hole would kill the process (SIGBUS)
            os.posix_fallocate(fd, 0, size)
            return fd, mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise

    def _widened(self, out: np.ndarray, seq_at: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """``out`` (state bytes; ``seq_at(indices)``: the seqs of those of its entries)
        with each ``FORWARDED_FAR`` byte replaced by its state value (uint16 then)."""
        far = np.flatnonzero(out == FORWARDED_FAR)
        if not len(far):
            return out
        wide = out.astype(SIDE_ENTRY)
        seqs = seq_at(far)
        chunks = seqs >> self._bits
        for n in np.unique(chunks).tolist():
            sel = chunks == n
            wide[far[sel]] = FORWARD_BASE + self._far(n)[seqs[sel] & self._mask]
        return wide

    def _view(self, n: int) -> np.ndarray:
        """Chunk ``n``'s entries (read-only and all done if it is retired)."""
        got = self._views.get(n)
        if got is not None:
            return got
        if n in self._retired:
            return self._done_view
        self._chunk(n)
        return self._views[n]

    def prepare(self, seq: int) -> None:
        """Open (or create) the chunk ``seq`` falls in now, before the first write to
        it: creating one fsyncs it and its directory, tens of ms that the first
        message of the chunk would otherwise wait for under the engine's lock."""
        self._chunk(seq >> self._bits)

    def raw_many(self, seqs: np.ndarray) -> np.ndarray:
        """State values of many seqs (batched form of ``raw``): a uint8 array, uint16
        if one of them is a far forward."""
        if len(seqs) < FEW:
            got = [self.raw(s) for s in seqs.tolist()]
            return np.array(got, dtype=SIDE_ENTRY if got and max(got) > 255 else np.uint8)
        if not len(seqs):
            return np.empty(0, dtype=np.uint8)
        bits, mask = self._bits, self._mask
        lo, hi = int(low(seqs)) >> bits, int(high(seqs)) >> bits
        if lo == hi:
            out: np.ndarray = self._view(lo)[seqs & mask]
        else:
            chunks = seqs >> bits
            out = np.empty(len(seqs), dtype=np.uint8)  # several chunks: fill piecewise
            for n in range(lo, hi + 1):
                sel = chunks == n
                if sel.any():
                    out[sel] = self._view(n)[seqs[sel] & mask]
        return self._widened(out, lambda at: seqs[at])

    def copy_live(self, end: int) -> tuple[int, np.ndarray]:
        """A copy of the entries of seqs ``[lo, end)`` and ``lo``: the first seq of
        the lowest chunk not retired (every seq below it is done)."""
        retired = self._retired.all()
        first = next(n for n in range(len(retired) + 1) if n not in retired)
        lo = first << self._bits
        out = np.empty(max(end - lo, 0), dtype=np.uint8)
        for n in range(first, ((end - 1) >> self._bits) + 1 if end > lo else first):
            at = (n << self._bits) - lo
            take = min(self._size, len(out) - at)
            out[at : at + take] = self._view(n)[:take]
        return lo, self._widened(out, lambda at: at.astype(np.uint64) + np.uint64(lo))

    def get(self, seq: int) -> MessageState:
        return state_of(self.raw(seq))

    def raw(self, seq: int) -> int:
        """The state as a plain int (hot paths compare it with ``int(MessageState.X)``)."""
        n = seq >> self._bits
        got = self._chunks.get(n)
        if got is None:
            if n in self._retired:
                return int(_DONE_READ)
            m = self._chunk(n)
        else:
            m = got[1]
        i = seq & self._mask
        byte = m[DATA_OFFSET + i]
        return FORWARD_BASE + int(self._far(n)[i]) if byte == FORWARDED_FAR else byte

    def _byte(self, n: int, at: int | np.ndarray, state: MessageState | int) -> int:
        """The byte that stores ``state`` for the entries ``at`` of chunk ``n``,
        after writing their side-file entries if it is a far forward."""
        if state < _FIRST_FAR:
            return int(state)
        side = self._side(n, create=True)
        assert side is not None
        side[at] = state - FORWARD_BASE
        return FORWARDED_FAR

    def set(self, seq: int, state: MessageState | int) -> None:
        n = seq >> self._bits
        if n in self._retired:
            return  # a replayed record of a message long done
        i = seq & self._mask
        self._chunk(n)[DATA_OFFSET + i] = self._byte(n, i, state)
        self._wrote(n)

    def set_many(self, seqs: np.ndarray, state: MessageState | int) -> None:
        """``set`` for many seqs at once."""
        if len(seqs) < FEW:
            for s in seqs.tolist():
                self.set(s, state)
            return
        if not len(seqs):
            return
        bits, mask = self._bits, self._mask
        lo = int(low(seqs)) >> bits
        if lo == int(high(seqs)) >> bits and lo not in self._retired:  # the usual batch
            at = seqs & mask
            self._view(lo)[at] = self._byte(lo, at, state)
            self._wrote(lo)
            return
        chunks = seqs >> bits
        for n in np.unique(chunks).tolist():
            if n not in self._retired:  # else: replayed records of messages long done
                at = seqs[chunks == n] & mask
                self._view(n)[at] = self._byte(n, at, state)
                self._wrote(n)

    def _wrote(self, n: int) -> None:
        """Chunk ``n`` changed: to be fsynced, kept open, and looked at by a sweep."""
        self._dirty.add(n)
        self._written.add(n)

    def take_dirty(self) -> list[int]:
        """The files of the chunks changed since the last call, to be fsynced by the
        caller (which may do it without the engine's lock): an fsync writes back the
        pages changed through a chunk's map, as msync does on Linux, and unlike
        ``mmap.flush`` lets go of the GIL while the disk works."""
        dirty, self._dirty = self._dirty, set()
        files = [self._chunks[n][0] for n in sorted(dirty)]
        return files + [self._sides[n][0] for n in sorted(dirty) if n in self._sides]

    def flush(self) -> None:
        for fd in self.take_dirty():
            os.fsync(fd)

    def sweep(self, below_seq: int, held: Callable[[int], Collection[int]]) -> list[int]:
        """Retire every chunk wholly below ``below_seq`` that is not ``held``, whose
        entries are all done and that no write changed since the last
        ``take_dirty``; close the chunks no write touched since the last sweep.
        Returns the chunks retired.

        The caller vouches that no id-addressed call can name a seq below
        ``below_seq`` but in the chunks ``held(CHUNK_BITS)`` (asked only when some
        chunk could go), and runs this after the fsyncs of what its last
        ``take_dirty`` returned (then every entry of a clean chunk is on disk)."""
        full = below_seq >> self._bits  # chunks below this one are wholly below
        newest = max(self._chunks, default=-1)  # before this sweep opens any to look at
        written, self._written = self._written, set()
        self._unexamined |= written
        done: list[int] = []
        candidates = sorted(n for n in self._unexamined - self._dirty if n < full)
        if candidates:  # held ones stay unexamined, to be looked at once let go
            kept = held(self._bits)
            candidates = [n for n in candidates if n not in kept][:_SWEEP_MOST]
        for n in candidates:
            self._unexamined.discard(n)  # looked at: again only once written again
            if self._all_done(n):
                done.append(n)
        if done:
            self._retire(done)
        keep = written | self._dirty | {newest}
        for n in [n for n in self._chunks if n not in keep]:
            self._close_chunk(n)  # opened by a read only, or written before the last sweep
        return done

    def _all_done(self, n: int) -> bool:
        """Whether no entry of chunk ``n`` is live; remembers where a live one was,
        so the search goes on from there next time (an entry of a full chunk that is
        done never becomes live again: BLOCKED and PENDING only turn into each
        other or into a done state)."""
        start = self._done_below.get(n, 1 if n == 0 else 0)  # seqs start at 1
        at = first_pending(self._view(n), start)  # opened if need be: the sweep closes it
        if at < self._size:
            self._done_below[n] = at
            return False
        return True

    def _retire(self, chunks: list[int]) -> None:
        """Record ``chunks`` as retired (durably), then delete their files."""
        self._retired.update(chunks)  # if the write fails, they still read as done: they are
        write_retired(self._dir, self._size, self._retired)
        for n in chunks:
            self._close_chunk(n)
            self._path(n).unlink()
            if (side := self._side_path(n)).exists():
                side.unlink()
            self._done_below.pop(n, None)
        sync_dir(self._dir)

    def _close_chunk(self, n: int) -> None:
        """Close chunk ``n``'s file and its side file, whichever are open."""
        self._views.pop(n, None)  # views pin the maps: dropped first
        self._side_views.pop(n, None)
        for files in (self._chunks, self._sides):
            if n in files:
                fd, m = files.pop(n)
                m.close()
                os.close(fd)

    def close(self) -> None:
        for n in set(self._chunks) | set(self._sides):
            self._close_chunk(n)
