"""The key index (``timers.memory.keyindex``) against a dict model: random adds
(in and out of log order, replayed, in batches big and small), discards, sweeps,
cuts and clears, with the real hash and with one that collides on purpose; rows
put in the slot table at once, a few at a time, or left in its unslotted tail
(``TAIL_ROWS``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from delayq.timers.memory import keyindex
from delayq.timers.memory.keyindex import Entry, KeyIndex, hash_names

NAMES = [f"k{i}".encode() for i in range(12)]
TIDS = [1, 2]


def colliding(tids: np.ndarray, names: Sequence[bytes]) -> np.ndarray:
    """Three hashes for every name, the highest slot's among them (probing wraps)."""
    return np.array(
        [
            0xFFFFFFFF if (len(n) + t) % 3 == 0 else (len(n) + t) % 3
            for n, t in zip(names, tids.tolist(), strict=True)
        ],
        dtype=np.uint32,
    )


Row = tuple[int, bytes, int, int]  # tid, name, seq, hold


class _Model(RuleBasedStateMachine):
    hasher = staticmethod(hash_names)
    tail_rows = 7  # rows put in the slot table a few at a time

    def __init__(self) -> None:
        super().__init__()
        self._tail_rows, keyindex.TAIL_ROWS = keyindex.TAIL_ROWS, self.tail_rows
        self.index = KeyIndex(None if self.hasher is hash_names else self.hasher)
        self.model: dict[int, Row] = {}  # position -> row
        self.next_pos = 0

    @rule(
        rows=st.lists(
            st.tuples(
                st.sampled_from(TIDS), st.sampled_from(NAMES), st.integers(0, 50), st.integers(0, 3)
            ),
            min_size=1,
            max_size=40,
        ),
        back=st.integers(0, 30),
        shuffle=st.booleans(),
    )
    def add(self, rows: list[tuple[int, bytes, int, int]], back: int, shuffle: bool) -> None:
        start = max(0, self.next_pos - back)  # back > 0: a replayed (and new) tail
        positions = list(range(start, start + len(rows)))
        if shuffle:
            positions.reverse()
        self.next_pos = max(self.next_pos, start + len(rows))
        for (tid, name, seq, hold), pos in zip(rows, positions, strict=True):
            self.model.setdefault(pos, (tid, name, seq, hold * 1000))
        self.index.add(
            np.array([r[0] for r in rows], dtype=np.uint32),
            [r[1] for r in rows],
            np.array([r[2] for r in rows], dtype=np.uint64),
            np.array(positions, dtype=np.int64),
            np.array([r[3] * 1000 for r in rows], dtype=np.int64),
        )

    @rule(picks=st.lists(st.integers(0, 400), max_size=30))
    def discard(self, picks: list[int]) -> None:
        for p in picks:
            self.model.pop(p, None)
        self.index.discard(np.array(picks, dtype=np.int64))

    @rule(dead=st.sets(st.integers(0, 50)), now=st.integers(0, 4000))
    def sweep(self, dead: set[int], now: int) -> None:
        gone = [p for p, (_, _, seq, hold) in self.model.items() if seq in dead and hold <= now]
        for p in gone:
            del self.model[p]
        got = self.index.sweep(lambda seqs: ~np.isin(seqs, list(dead)), now)
        assert got == len(gone)

    @rule(dead=st.sets(st.integers(0, 50)), now=st.integers(0, 4000), limit=st.integers(1, 300))
    def sweep_some(self, dead: set[int], now: int, limit: int) -> None:
        may_go = {p for p, (_, _, seq, hold) in self.model.items() if seq in dead and hold <= now}
        got = self.index.sweep(lambda seqs: ~np.isin(seqs, list(dead)), now, limit=limit)
        held = set(self.index.columns()[2].tolist())
        assert set(self.model) - may_go <= held <= set(self.model)
        assert got == len(self.model) - len(held) <= limit
        self.model = {p: row for p, row in self.model.items() if p in held}

    @rule(back=st.integers(0, 60))
    def drop_from(self, back: int) -> None:
        end = max(0, self.next_pos - back)
        for p in [p for p in self.model if p >= end]:
            del self.model[p]
        self.index.drop_from(end)
        self.next_pos = end

    @rule()
    def clear(self) -> None:
        self.model.clear()
        self.index.clear()

    @rule()
    def save_and_load(self) -> None:
        cols = self.index.columns()
        copies = [c.copy() for c in cols]

        def fill(*into: np.ndarray) -> None:
            for dst, src in zip(into, copies, strict=True):
                dst[:] = src

        loaded = KeyIndex.filled(len(copies[0]), fill, self.index._hash_names)
        self.index = loaded

    def teardown(self) -> None:
        keyindex.TAIL_ROWS = self._tail_rows

    @invariant()
    def finds_exactly_the_names_hash(self) -> None:
        assert len(self.index) == len(self.model)
        for tid in TIDS:
            for name in NAMES:
                h = self.hasher(np.array([tid], dtype=np.uint32), [name])[0]
                want = sorted(
                    Entry(seq, pos, hold)
                    for pos, (t, n, seq, hold) in self.model.items()
                    if self.hasher(np.array([t], dtype=np.uint32), [n])[0] == h
                )
                assert self.index.find(tid, name) == sorted(want, key=lambda e: e.pos)

    @invariant()
    def any_of_says_what_find_says(self) -> None:
        tids = np.array([t for t in TIDS for _ in NAMES] * 2, dtype=np.int64)
        names = NAMES * len(TIDS) * 2  # many: numpy's path; then a few: Python's
        want = [bool(self.index.find(int(t), n)) for t, n in zip(tids.tolist(), names, strict=True)]
        assert self.index.any_of(self.index.hashes(tids, names)).tolist() == want
        few = self.index.hashes(tids[:3], names[:3])
        assert self.index.any_of(few).tolist() == want[:3]
        assert [
            self.index.holds(int(t), n) for t, n in zip(tids[:3], names[:3], strict=True)
        ] == want[:3]


class _Colliding(_Model):
    hasher = staticmethod(colliding)


class _AllSlotted(_Model):
    tail_rows = 1  # every add's rows put in the slot table at once


class _Unslotted(_Colliding):
    tail_rows = 1 << 20  # a batch's rows slotted only by a build or a row added alone


TestKeyIndexModel = _Model.TestCase
TestKeyIndexModel.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestKeyIndexColliding = _Colliding.TestCase
TestKeyIndexColliding.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestKeyIndexAllSlotted = _AllSlotted.TestCase
TestKeyIndexAllSlotted.settings = settings(max_examples=40, stateful_step_count=40, deadline=None)
TestKeyIndexUnslotted = _Unslotted.TestCase
TestKeyIndexUnslotted.settings = settings(max_examples=40, stateful_step_count=40, deadline=None)
