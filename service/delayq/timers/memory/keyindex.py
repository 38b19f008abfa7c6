"""The key index: a shard's keyed SCHEDULE records by (topic id, name), so that a
schedule can find the pending message holding its key (``if_exists``) or its
dedup id, and lookup, cancel and reschedule can act by key.

An entry is (seq, position, hold_until_ms) filed under (topic id, name): the
message's seq (its state-map index: whether it is still pending), the position of
its SCHEDULE record (its id, with the record's epoch) and until when it holds its
name after it ended (accepted_ms + dedup window; 0: not after). Entries are not
removed when their message ends: ``sweep`` drops those whose message is no longer
live and whose hold passed, and callers skip ended ones by the state map. ``find``
may return entries of another name (a hash collision: only a 32-bit hash of the
name is kept) but never misses one of the name: a caller confirms each by its
record, which it reads anyway. Adding an entry at a position already held is a
no-op, so replaying a log tail twice is harmless.

Compact form (``nbytes``: 28 bytes an entry, up to an eighth more of room to
grow, and 5-12 bytes of slots; 10M entries hold 346 MB, ``bench.keyindex``): the
entries are rows of four parallel columns (the name's hash ``uint32``, seq,
position, hold; a dropped row's hold is ``_GONE``) in the order they were added,
which is the log's: positions rise, so a position is found by binary search
(rows added out of order sit in an unsorted tail, searched apart, until the next
``add`` or compaction sorts them in: rare). The columns grow in place by an eighth
(``ndarray.resize``: a remap, not a copy, for large ones). The name's hash leads
to its rows through the slot table (``keyslots``: linear probing, at most 3/4
full, built again at most 0.65 full, the old one freed first). Rows added go
into the table ``TAIL_ROWS`` (4096) at a time, one ``keyslots.insert`` for them
all (numpy's fixed cost per call would else be paid by each small batch; a row
added alone is slotted at once, with the tail before it); until then they are
the unslotted tail, which ``find`` scans and ``any_of`` searches sorted.
Dropped rows are compacted away (columns gathered in place a window at a time,
table built again) once they are a quarter of the live ones. ``add`` of a batch
costs a few numpy calls plus the names' hashes (about 0.2-0.3 us a row with the
table's growth), of one row Python scalars; ``find`` probes one run and scans
the tail (3-7 us); ``any_of`` says for a batch of names at once, by their
``hashes`` (one pass, which the batch's ``add`` takes too), whether ``find``
would give anything (the runs probed together: about 0.1 us a name; ``holds``:
one name, Python scalars); ``sweep`` reads the columns a window at a time
(``limit``: a bounded part per call, from where the last one stopped).

Hash: xxh3-64 of the name seeded by the topic id, its low 32 bits
(``HASH_KIND`` 1; what the saved file, ``formats.keyindex``, holds). Tests
inject another (``hash_names``) to force collisions.

Derived data, built from the CommitLog on open or loaded from its file
(``store.keyfile``: ``columns`` are saved, ``filled`` makes an index of them),
kept by replay and by a replica's applied chunks. Not thread-safe: the shard's
lock guards it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import xxhash

from . import keyslots

__all__ = ["HASH_KIND", "TAIL_ROWS", "Entry", "HashNames", "KeyIndex", "hash_names"]

HashNames = Callable[[np.ndarray, Sequence[bytes]], np.ndarray]
"""(topic ids, names) -> a ``uint32`` hash per row."""

HASH_KIND = 1
"""The default hash, as the saved file names it (another cannot be loaded)."""

_GONE = -1  # the hold of a dropped row
_MIN_ROWS = 64
_MIN_SLOTS = 256
_MAX_LOAD = 0.75  # filled slots (rows and TOMBs) per slot before a rebuild
_BUILD_LOAD = 0.65  # at most this full when built: 10M rows fit 16M slots (64 MB)
_WINDOW = 1 << 20  # rows a whole-table pass reads at once: bounds its temporaries
TAIL_ROWS = 4096
"""Rows added in batches are put in the slot table this many at a time (numpy's
fixed cost per call, paid once for them all; until then ``find`` and ``any_of``
search them apart)."""


def hash_names(tids: np.ndarray, names: Sequence[bytes]) -> np.ndarray:
    """The default hash (``HASH_KIND``): xxh3-64 of each name seeded by its topic
    id, low 32 bits."""
    full = np.fromiter(
        map(xxhash.xxh3_64_intdigest, names, tids.tolist()), dtype=np.uint64, count=len(names)
    )
    return full.astype(np.uint32)


class Entry(NamedTuple):
    seq: int
    pos: int
    hold_until_ms: int


class KeyIndex:
    def __init__(self, hash_names_: HashNames | None = None) -> None:
        self._hash_names = hash_names_ or hash_names
        self.hash_kind = HASH_KIND if hash_names_ is None else 0
        self._reset()

    def _reset(self) -> None:
        self._hash = np.zeros(_MIN_ROWS, dtype=np.uint32)
        self._seq = np.zeros(_MIN_ROWS, dtype=np.uint64)
        self._pos = np.zeros(_MIN_ROWS, dtype=np.int64)
        self._hold = np.zeros(_MIN_ROWS, dtype=np.int64)
        self._table = np.zeros(_MIN_SLOTS, dtype=np.uint32)
        self._rows = 0  # rows in use (live or dropped)
        self._live = 0
        self._filled = 0  # slots not EMPTY
        self._slotted = 0  # rows [0, _slotted) are in the slot table (the live ones)
        self._sorted = 0  # rows [0, _sorted) have rising positions
        self._last = -1  # the position of row _sorted - 1
        self._cursor = 0  # where the next partial sweep starts

    def __len__(self) -> int:
        return self._live

    @property
    def nbytes(self) -> int:
        """Bytes the index holds (its columns' capacity, its slot table and the
        unslotted rows' set of hashes)."""
        cols = (self._hash, self._seq, self._pos, self._hold, self._table)
        return sum(a.nbytes for a in cols)

    # -- adding ------------------------------------------------------------
    def add(
        self,
        tids: np.ndarray,
        names: Sequence[bytes],
        seqs: np.ndarray,
        positions: np.ndarray,
        hold_until_ms: np.ndarray,
        *,
        hashes: np.ndarray | None = None,
    ) -> None:
        """File the records at ``positions`` under their (topic id, name), a row each.
        ``hashes``: the rows' ``hashes(tids, names)`` when the caller has them (a
        checked batch's, from ``any_of``): not computed again."""
        k = len(positions)
        if k == 0:
            return
        if self._sorted != self._rows:  # rows an earlier add left out of order: sort
            self._compact()  # them in once, not a search of that tail every add
        if k == 1 and self._sorted == self._rows and int(positions[0]) > self._last:
            h = self._hash_one(int(tids[0]), names[0]) if hashes is None else int(hashes[0])
            self._add_one(h, int(seqs[0]), int(positions[0]), int(hold_until_ms[0]))
            return
        pos = np.asarray(positions, dtype=np.int64)
        tids = np.asarray(tids)
        seqs = np.asarray(seqs, dtype=np.uint64)
        holds = np.asarray(hold_until_ms, dtype=np.int64)
        rising = self._sorted == self._rows and self._rises_from_last(pos)
        if not rising:
            fresh = self._rows_at(pos) < 0  # a replayed tail: its positions are held
            if k > 1:
                once = np.zeros(k, dtype=bool)
                once[np.unique(pos, return_index=True)[1]] = True
                fresh &= once
            if not fresh.all():
                keep = np.flatnonzero(fresh)
                if not len(keep):
                    return
                names = [names[i] for i in keep.tolist()]
                tids, seqs, pos, holds = tids[keep], seqs[keep], pos[keep], holds[keep]
                hashes = None if hashes is None else hashes[keep]
            rising = self._sorted == self._rows and self._rises_from_last(pos)
        if hashes is None:
            hashes = self._hash_names(tids, names)
        self._append(hashes, seqs, pos, holds, rising)

    def _add_one(self, h: int, seq: int, pos: int, hold: int) -> None:
        """``add`` of one row (its hash ``h``) past every other (a schedule of one):
        Python scalars, no numpy call of fixed cost; slotted at once (after the
        rows of batches before it), so that schedules of one leave no tail."""
        n = self._rows
        if self._slotted < n:
            self._slot_tail()
        self._reserve(n + 1)
        self._hash[n], self._seq[n], self._pos[n], self._hold[n] = h, seq, pos, hold
        self._rows = self._sorted = n + 1
        self._last = pos
        self._live += 1
        if self._filled + 1 > _MAX_LOAD * len(self._table):
            self._build_table()
        else:
            keyslots.insert_one(self._table, n, h)
            self._filled += 1
            self._slotted = n + 1

    def _hash_one(self, tid: int, name: bytes) -> int:
        if self.hash_kind == HASH_KIND:
            return xxhash.xxh3_64_intdigest(name, tid) & 0xFFFFFFFF
        return int(self._hash_names(np.array([tid], dtype=np.uint32), [name])[0])

    def _rises_from_last(self, pos: np.ndarray) -> bool:
        """Whether ``pos`` rises, from past every sorted row's position."""
        return int(pos[0]) > self._last and (len(pos) == 1 or bool((pos[1:] > pos[:-1]).all()))

    def _append(
        self,
        hashes: np.ndarray,
        seqs: np.ndarray,
        pos: np.ndarray,
        holds: np.ndarray,
        rising: bool,
    ) -> None:
        """Append rows (new positions); ``rising``: past every row, in order."""
        k = len(pos)
        n = self._rows
        self._reserve(n + k)
        end = n + k
        self._hash[n:end] = hashes
        self._seq[n:end] = seqs
        self._pos[n:end] = pos
        self._hold[n:end] = holds
        self._rows = end
        self._live += k
        if rising:
            self._sorted = end
            self._last = int(pos[-1])
        if end - self._slotted >= TAIL_ROWS:
            self._slot_tail()

    def _slot_tail(self) -> None:
        """Put the live rows not in the slot table yet in it, all at once."""
        s, n = self._slotted, self._rows
        rows = s + np.flatnonzero(self._hold[s:n] != _GONE)
        if self._filled + len(rows) > _MAX_LOAD * len(self._table):
            self._build_table()
            return
        keyslots.insert(self._table, rows, self._hash[rows])
        self._filled += len(rows)
        self._slotted = n

    def _reserve(self, rows: int) -> None:
        cap = len(self._pos)
        if rows <= cap:
            return
        cap = max(rows, cap + cap // 8, _MIN_ROWS)
        for col in (self._hash, self._seq, self._pos, self._hold):
            col.resize(cap, refcheck=False)  # the columns are never lent out

    # -- finding -----------------------------------------------------------
    def find(self, tid: int, name: bytes) -> list[Entry]:
        """The entries filed under (``tid``, ``name``), by position (see the module
        docstring: maybe others, and maybe of ended messages)."""
        h = self._hash_one(tid, name)
        rows = [r for r in keyslots.probe(self._table, h) if self._hash.item(r) == h]
        if self._slotted < self._rows:
            rows += self._tail_rows(h)
        got = [Entry(self._seq.item(r), self._pos.item(r), self._hold.item(r)) for r in rows]
        got.sort(key=lambda e: e.pos)
        return got

    def _tail_rows(self, h: int) -> list[int]:
        """The live rows of hash ``h`` not in the slot table."""
        s, n = self._slotted, self._rows
        return (s + np.flatnonzero((self._hash[s:n] == h) & (self._hold[s:n] != _GONE))).tolist()

    def hashes(self, tids: np.ndarray, names: Sequence[bytes]) -> np.ndarray:
        """Each row's hash (``uint32``) as this index files (``tids[i]``,
        ``names[i]``): what ``any_of`` and ``add`` take instead of hashing again."""
        if len(names) < keyslots.FEW:
            got = [self._hash_one(int(t), name) for t, name in zip(tids, names, strict=True)]
            return np.array(got, dtype=np.uint32)
        return self._hash_names(np.asarray(tids), names).astype(np.uint32, copy=False)

    def any_of(self, hashes: np.ndarray) -> np.ndarray:
        """Whether ``find`` of each row would give any entry, by the rows'
        ``hashes``: a probe of every run at once (``keyslots.held``), so a batch of
        names never filed costs no step a row."""
        if len(hashes) < keyslots.FEW:
            return np.array(list(map(self._holds_hash, hashes.tolist())), dtype=bool)
        out = keyslots.held(self._table, self._hash, hashes)
        s, n = self._slotted, self._rows
        if s < n:  # the rows not slotted yet: their live hashes sorted, searched
            tail = np.sort(self._hash[s:n][self._hold[s:n] != _GONE])
            if len(tail):
                at = np.minimum(np.searchsorted(tail, hashes), len(tail) - 1)
                out |= tail[at] == hashes
        return out

    def holds(self, tid: int, name: bytes) -> bool:
        """``any_of`` of one name (Python scalars: no numpy call of fixed cost)."""
        return self._holds_hash(self._hash_one(tid, name))

    def _holds_hash(self, h: int) -> bool:
        col = self._hash
        if any(col.item(r) == h for r in keyslots.probe(self._table, h)):
            return True
        return self._slotted < self._rows and bool(self._tail_rows(h))

    def _rows_at(self, positions: np.ndarray) -> np.ndarray:
        """The live row at each position, or -1."""
        out = np.full(len(positions), -1, dtype=np.int64)
        s, n = self._sorted, self._rows
        if s:
            i = np.minimum(np.searchsorted(self._pos[:s], positions), s - 1)
            hit = self._pos[i] == positions
            out[hit] = i[hit]
        if n > s:
            tail = s + np.flatnonzero(self._hold[s:n] != _GONE)
            if len(tail):
                order = np.argsort(self._pos[tail])
                ranked = tail[order]
                j = np.minimum(np.searchsorted(self._pos[ranked], positions), len(ranked) - 1)
                hit = self._pos[ranked[j]] == positions
                out[hit] = ranked[j[hit]]
        found = out >= 0
        out[found & (self._hold[np.maximum(out, 0)] == _GONE)] = -1
        return out

    # -- dropping ----------------------------------------------------------
    def discard(self, positions: np.ndarray) -> None:
        """Drop the entries at these positions (if held)."""
        rows = self._rows_at(np.asarray(positions, dtype=np.int64))
        self._drop(np.unique(rows[rows >= 0]))

    def sweep(
        self, live: Callable[[np.ndarray], np.ndarray], now_ms: int, *, limit: int | None = None
    ) -> int:
        """Drop the entries whose message is not ``live`` (a bool per seq) and whose
        hold passed ``now_ms``; returns how many. ``limit``: look at that many rows
        only, from where the previous limited sweep stopped (wrapping), so a sweep
        under the shard's lock stays short; None: every row."""
        n = self._rows
        if limit is None:
            start, stop = 0, n
        else:
            start = self._cursor if self._cursor < n else 0
            stop = min(n, start + max(1, limit))
            self._cursor = stop if stop < n else 0  # wraps: rows added meanwhile wait
        gone = 0
        for a in range(start, stop, _WINDOW):
            b = min(stop, a + _WINDOW)
            hold = self._hold[a:b]
            due = a + np.flatnonzero((hold != _GONE) & (hold <= now_ms))
            if len(due):
                ended = due[~np.asarray(live(self._seq[due]), dtype=bool)]
                self._drop(ended, compact=False)
                gone += len(ended)
        self._maybe_compact()
        return gone

    def drop_from(self, end: int) -> None:
        """Forget records at or after ``end`` (the log was cut there)."""
        s, n = self._sorted, self._rows
        cut = int(np.searchsorted(self._pos[:s], end))
        rows = np.concatenate([np.arange(cut, s), s + np.flatnonzero(self._pos[s:n] >= end)])
        self._drop(rows[self._hold[rows] != _GONE], compact=False)
        if s < n:
            self._compact()  # rare (a cut after rows out of order): sorts them
            return
        self._rows = self._sorted = cut  # the cut rows go for good
        self._slotted = min(self._slotted, cut)
        self._last = int(self._pos[cut - 1]) if cut else -1
        self._cursor = min(self._cursor, cut)
        self._maybe_compact()

    def clear(self) -> None:
        self._reset()

    def _drop(self, rows: np.ndarray, *, compact: bool = True) -> None:
        """Drop these live rows (distinct)."""
        if not len(rows):
            return
        slotted = rows[rows < self._slotted]
        keyslots.remove(self._table, slotted, self._hash[slotted])
        self._hold[rows] = _GONE
        self._live -= len(rows)
        if compact:
            self._maybe_compact()

    # -- rebuilding --------------------------------------------------------
    def _maybe_compact(self) -> None:
        if self._rows - self._live > max(self._live // 4, _MIN_ROWS):
            self._compact()

    def _compact(self) -> None:
        """Keep only the live rows, by position, and build the table again."""
        n = self._rows
        cols = (self._hash, self._seq, self._pos, self._hold)
        cursor = 0  # a limited sweep goes on from the same row
        if self._sorted < n:  # rare (rows added out of order): one sort of them all
            keep = np.flatnonzero(self._hold[:n] != _GONE)
            keep = keep[np.argsort(self._pos[keep], kind="stable")]
            for col in cols:
                col[: len(keep)] = col[keep]
            m = len(keep)
            del keep
        else:  # a window at a time, in place (what is kept moves only down)
            cursor = int(np.count_nonzero(self._hold[: self._cursor] != _GONE))
            m = 0
            for a in range(0, n, _WINDOW):
                keep = a + np.flatnonzero(self._hold[a : min(n, a + _WINDOW)] != _GONE)
                for col in cols:
                    col[m : m + len(keep)] = col[keep]
                m += len(keep)
        self._rows = self._sorted = m
        self._last = int(self._pos[m - 1]) if m else -1
        self._cursor = cursor
        if len(self._pos) > 2 * max(m, _MIN_ROWS):  # give back what a mass drop freed
            for col in cols:
                col.resize(max(m + m // 8, _MIN_ROWS), refcheck=False)
        self._build_table()

    def _build_table(self) -> None:
        """A new slot table for the live rows, at most ``_BUILD_LOAD`` full."""
        size = _MIN_SLOTS
        while self._live > size * _BUILD_LOAD:
            size *= 2
        n = self._rows
        self._table = np.zeros(0, dtype=np.uint32)  # the old one goes first
        self._table = keyslots.build(size, self._hash[:n], self._hold[:n] != _GONE)
        self._filled = self._live
        self._slotted = n

    # -- the saved file ----------------------------------------------------
    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The live entries as (hash, seq, position, hold) columns by position,
        read-only views valid until the index next changes (what its file holds)."""
        if self._rows != self._live or self._sorted != self._rows:
            self._compact()
        n = self._rows
        got = tuple(c[:n].view() for c in (self._hash, self._seq, self._pos, self._hold))
        for c in got:
            c.flags.writeable = False
        return got[0], got[1], got[2], got[3]

    @classmethod
    def filled(
        cls, count: int, fill: Callable[..., None], hash_names_: HashNames | None = None
    ) -> KeyIndex:
        """An index of ``count`` entries whose (hash, seq, position, hold) columns
        ``fill`` writes (a file read into them in place); rows by position, each
        hold not ``_GONE`` (checked)."""
        index = cls(hash_names_)
        index._reserve(count)
        cols = (index._hash, index._seq, index._pos, index._hold)
        fill(*(c[:count] for c in cols))
        pos, hold = index._pos[:count], index._hold[:count]
        if count and (bool((pos[1:] <= pos[:-1]).any()) or bool((hold < 0).any())):
            raise ValueError("key index rows out of position order or with a negative hold")
        index._rows = index._sorted = index._live = count
        index._last = int(pos[-1]) if count else -1
        index._build_table()
        return index
