"""The open-addressing slot table under the key index (pure numpy, no I/O): a
power-of-two ``uint32`` array whose slots name rows of the index's columns.

A slot holds ``EMPTY`` (0), ``TOMB`` (a row that was there was dropped) or
``row + 1``. A row lives in the first slot reached from its home slot
``hash & (size - 1)`` by linear probing (``+1``, wrapping) that was ``EMPTY``
when it was put there. So a lookup probes from the
home slot to the first ``EMPTY`` one and meets every row of that hash on the
way (``TOMB`` slots are skipped, never stopped at, and never reused: they go
when the table is built again). Hence the invariant every function keeps: for
each filed row, the slots from its home to its own are all non-``EMPTY``.

``held`` tells, for many hashes at once, whether a run holds a row of each:
the home slots, then 8 and 16 slots of every run not ended a step (numpy,
``_HELD_WIDTHS``), the rows' own hashes compared, until each run met its hash or
its first ``EMPTY``; the last few runs (``_HELD_FEW``) are walked in Python.

``build`` fills a new table from every row at once, in bounded memory: rows by
ranges of home slots (about ``_RANGE_ROWS`` rows each), each range sorted by
home and placed with a running maximum (the i-th row of a sorted run lands at
``max(home_i, place_{i-1} + 1)``), the run's overflow carried into the next
range, and what overflows the last slot put in the first ``EMPTY`` slots from 0,
in order (which is where probing wraps to). ``insert`` and ``remove`` act on a
few rows: ``_STRIDE`` probe steps at a time for all of them (numpy), and a
Python loop for the last ``FEW`` or fewer.

Not thread-safe: the key index's owner (the shard's lock) guards it.
"""

from __future__ import annotations

import sys

import numpy as np

__all__ = ["EMPTY", "FEW", "TOMB", "build", "held", "insert", "insert_one", "probe", "remove"]

EMPTY = 0
TOMB = 0xFFFFFFFF
FEW = 8  # below this many rows a Python loop beats numpy's fixed cost per call
_RANGE_ROWS = 1 << 20  # rows placed per pass of ``build``: bounds its temporaries
_STRIDE = 8  # slots an ``insert`` step looks at per row: 8 bools read as one u64
_STEPS = np.arange(_STRIDE, dtype=np.int64)
_HELD_WIDTHS = (1, 8, 16, 16, 16)  # slots ``held``'s numpy steps look at per run
_HELD_FEW = 32  # runs ``held`` walks one at a time in Python, at the end
_NAMED = np.uint32(TOMB - 1)  # a slot's value minus one below this names a row
_LITTLE = sys.byteorder == "little"


def probe(table: np.ndarray, home: int) -> list[int]:
    """The rows in the probe run from slot ``home`` (to the first ``EMPTY``)."""
    mask = len(table) - 1
    got: list[int] = []
    s = home & mask
    while True:
        t = table.item(s)
        if t == EMPTY:
            return got
        if t != TOMB:
            got.append(t - 1)
        s = (s + 1) & mask


def held(table: np.ndarray, row_hashes: np.ndarray, hashes: np.ndarray) -> np.ndarray:
    """For each of ``hashes``: whether the probe run from its home slot holds a row
    ``r`` with ``row_hashes[r]`` equal to it (what ``probe`` and a compare of each
    row's hash would say, for all at once)."""
    mask = len(table) - 1
    want = hashes.astype(np.uint32)
    s = (want & np.uint32(mask)).astype(np.intp)
    out = np.zeros(len(want), dtype=bool)
    todo = np.arange(len(want))
    for width in _HELD_WIDTHS:
        if len(todo) <= _HELD_FEW:
            break
        if width == 1:  # the home slots alone first: most runs end there
            slots = table[s]
            ids = slots - np.uint32(1)  # EMPTY and TOMB wrap past every row: no row
            same = (ids < _NAMED) & (row_hashes.take(ids, mode="clip") == want)
            out[todo[same]] = True
            more = ~same & (slots != EMPTY)
        else:
            # a row of the same hash is never past the run's first EMPTY (the
            # invariant), so the stride's rows are compared whole
            ahead = s[:, None] + np.arange(width)
            ahead &= mask
            slots = table[ahead]
            ids = slots - np.uint32(1)
            same = (ids < _NAMED) & (row_hashes.take(ids, mode="clip") == want[:, None])
            hit = same.any(axis=1)
            out[todo[hit]] = True
            more = ~(hit | (slots == EMPTY).any(axis=1))  # neither: the run goes on
        todo, want, s = todo[more], want[more], (s[more] + width) & mask
    col = row_hashes
    for i, h, slot in zip(todo.tolist(), want.tolist(), s.tolist(), strict=True):
        while (t := table.item(slot)) != EMPTY:  # the long runs left: one at a time
            if t != TOMB and col.item(t - 1) == h:
                out[i] = True
                break
            slot = (slot + 1) & mask
    return out


def insert(table: np.ndarray, rows: np.ndarray, hashes: np.ndarray) -> None:
    """Put ``rows`` (with their ``hashes``) in ``EMPTY`` slots; the caller has
    made room (the table must keep at least one ``EMPTY`` slot)."""
    mask = len(table) - 1
    r = rows.astype(np.int64)
    s = hashes.astype(np.int64) & mask
    if len(r) > FEW:  # the home slots alone first: most are EMPTY
        free = np.flatnonzero(table[s] == EMPTY)
        ids = r[free] + 1
        table[s[free]] = ids
        keep = np.ones(len(r), dtype=bool)
        keep[free[table[s[free]] == ids]] = False  # two rows of one home: one stays
        r, s = r[keep], s[keep]
    while len(r) > FEW:
        # the next _STRIDE slots of every row at once: each claims its first EMPTY
        # one; rows asking for the same slot: one gets it (whichever numpy wrote
        # last), which a read back tells, and the others go on after it
        ahead = np.add.outer(s, _STEPS)
        ahead &= mask
        claims, step = _first_empty(table[ahead] == EMPTY)
        at = (s[claims] + step) & mask
        ids = r[claims] + 1
        table[at] = ids
        s = s + _STRIDE  # no EMPTY slot in the stride: the next one
        s[claims] = at + 1
        keep = np.ones(len(r), dtype=bool)
        keep[claims[table[at] == ids]] = False
        r, s = r[keep], s[keep] & mask
    for row, slot in zip(r.tolist(), s.tolist(), strict=True):
        insert_one(table, row, slot)


def insert_one(table: np.ndarray, row: int, hash_: int) -> None:
    """``insert`` of one row."""
    mask = len(table) - 1
    slot = hash_ & mask
    while table.item(slot) != EMPTY:
        slot = (slot + 1) & mask
    table[slot] = row + 1


def _first_empty(free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows of ``free`` (a bool per row and step) with a True, and the step of
    their first. Little-endian: each row's 8 bools read as one u64 whose lowest
    set bit (``x & -x`` = 2**(8 * step), its exponent by ``frexp``) is the first."""
    if not _LITTLE:
        rows = np.flatnonzero(free.any(axis=1))
        return rows, free[rows].argmax(axis=1)
    packed = free.view(np.uint64).ravel()
    rows = np.flatnonzero(packed)
    got = packed[rows]
    lowest = got & (~got + np.uint64(1))
    return rows, (np.frexp(lowest.astype(np.float64))[1] - 1) >> 3


def remove(table: np.ndarray, rows: np.ndarray, hashes: np.ndarray) -> None:
    """Turn the slots of ``rows`` (filed, with their ``hashes``) into ``TOMB``."""
    mask = len(table) - 1
    want = rows.astype(np.int64) + 1
    s = hashes.astype(np.int64) & mask
    while len(want) > FEW:
        hit = table[s] == want
        table[s[hit]] = TOMB
        miss = ~hit
        want, s = want[miss], (s[miss] + 1) & mask
    for w, slot in zip(want.tolist(), s.tolist(), strict=True):
        while table[slot] != w:
            if table[slot] == EMPTY:
                raise AssertionError(f"key index: row {w - 1} is not in its slot table")
            slot = (slot + 1) & mask
        table[slot] = TOMB


def build(size: int, hashes: np.ndarray, live: np.ndarray) -> np.ndarray:
    """A new table of ``size`` slots (a power of two, more than the rows) holding
    each row ``r`` with ``live[r]``, its hash ``hashes[r]``."""
    table = np.zeros(size, dtype=np.uint32)
    count = int(np.count_nonzero(live))
    if count == 0:
        return table
    bits = size.bit_length() - 1
    rbits = min(bits, max(0, (count // _RANGE_ROWS).bit_length()))
    shift = bits - rbits
    mask = np.uint32(size - 1)
    last = -1  # the slot the previous range's last row went to
    spill: list[np.ndarray] = []
    parts = ((hashes & mask) >> np.uint32(shift)).astype(np.uint16)  # rbits <= 13
    for part in range(1 << rbits):
        rows = np.flatnonzero(live & (parts == part))
        if not len(rows):
            continue
        homes = (hashes[rows] & mask).astype(np.uint64)
        keyed = np.sort((homes << np.uint64(32)) | rows.astype(np.uint64))
        del homes, rows
        step = np.arange(len(keyed), dtype=np.int64)
        place = np.maximum.accumulate((keyed >> np.uint64(32)).astype(np.int64) - step)
        np.maximum(place, last + 1, out=place)
        place += step
        ids = (keyed & np.uint64(0xFFFFFFFF)).astype(np.uint32) + np.uint32(1)
        inside = int(np.searchsorted(place, size))
        table[place[:inside]] = ids[:inside]
        if inside < len(ids):
            spill.append(ids[inside:])
        last = int(place[-1])
    if spill:
        over = np.concatenate(spill)
        table[np.flatnonzero(table == EMPTY)[: len(over)]] = over
    return table
