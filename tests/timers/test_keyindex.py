"""The key index's compact form (``timers.memory.keyindex``, ``keyslots``): the
slot table built in ranges and wrapping, growth, compaction, partial sweeps and
the memory it holds."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest

from delayq.timers.memory import keyslots
from delayq.timers.memory.keyindex import Entry, KeyIndex


def _filed_everywhere(table: np.ndarray, hashes: np.ndarray, rows: np.ndarray) -> None:
    """Each row is in the table once, reachable from its home slot."""
    for r in rows.tolist():
        assert r in keyslots.probe(table, int(hashes[r]))
    held = table[(table != keyslots.EMPTY) & (table != keyslots.TOMB)].astype(np.int64) - 1
    assert sorted(held.tolist()) == sorted(rows.tolist())


@pytest.mark.parametrize("spread", ["uniform", "clustered", "at the end"])
def test_build_in_ranges_places_every_row_on_its_probe_run(
    spread: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keyslots, "_RANGE_ROWS", 16)  # many ranges, runs carried across
    rng = np.random.default_rng(3)
    n, size = 700, 1024
    hashes = {
        "uniform": rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32),
        "clustered": (rng.integers(0, 8, n) * 128 + 120).astype(np.uint32),
        "at the end": np.full(n, 0xFFFFFFF0, dtype=np.uint32),  # runs wrap to slot 0
    }[spread]
    live = rng.random(n) < 0.9
    table = keyslots.build(size, hashes, live)
    _filed_everywhere(table, hashes, np.flatnonzero(live))


def test_insert_and_remove_keep_every_other_row_reachable() -> None:
    rng = np.random.default_rng(5)
    size = 512
    hashes = (rng.integers(0, 6, 300) * 85 + 500).astype(np.uint32)  # long runs, wrapping
    table = np.zeros(size, dtype=np.uint32)
    keyslots.insert(table, np.arange(0, 200), hashes[:200])  # numpy steps
    for r in range(200, 300):
        keyslots.insert(table, np.array([r]), hashes[r : r + 1])  # the Python loop
    gone = rng.choice(300, 120, replace=False)
    keyslots.remove(table, gone[:100], hashes[gone[:100]])
    keyslots.remove(table, gone[100:], hashes[gone[100:]])
    _filed_everywhere(table, hashes, np.setdiff1d(np.arange(300), gone))
    with pytest.raises(AssertionError):
        keyslots.remove(table, gone[:1], hashes[gone[:1]])


def _add(index: KeyIndex, start: int, n: int, *, tid: int = 1, hold: int = 0) -> None:
    pos = np.arange(start, start + n, dtype=np.int64)
    index.add(
        np.full(n, tid, dtype=np.uint32),
        [f"name-{p}".encode() for p in pos.tolist()],
        pos.astype(np.uint64),  # seq = position, for the tests
        pos * 10,
        np.full(n, hold, dtype=np.int64),
    )


def test_grows_by_batches_and_single_rows_and_finds_every_entry() -> None:
    index = KeyIndex()
    _add(index, 0, 150_000)
    for p in range(150_000, 150_100):
        _add(index, p, 1)
    assert len(index) == 150_100
    for p in [0, 1, 77_777, 149_999, 150_000, 150_099]:
        assert index.find(1, f"name-{p}".encode()) == [Entry(p, p * 10, 0)]
    assert index.find(2, b"name-5") == []  # another topic
    assert index.nbytes < 45 * len(index)  # 28 a row, an eighth of slack, 4-8 of slots


def test_replayed_rows_are_no_ops_and_a_position_can_be_filed_again_after_a_discard() -> None:
    index = KeyIndex()
    _add(index, 0, 20)
    _add(index, 10, 20)  # positions 10..19 again, then 20..29
    assert len(index) == 30
    index.discard(np.array([50, 50, 990], dtype=np.int64))
    assert len(index) == 29 and index.find(1, b"name-5") == []
    _add(index, 5, 1)  # out of order now
    _add(index, 5, 1)
    assert index.find(1, b"name-5") == [Entry(5, 50, 0)]
    assert len(index) == 30
    index.drop_from(60)  # a cut while rows are out of order
    assert len(index) == 6 and index.find(1, b"name-6") == []
    _add(index, 6, 3)
    assert [index.find(1, f"name-{p}".encode())[0].pos for p in range(9)] == [
        p * 10 for p in range(9)
    ]


def test_rows_added_out_of_order_are_sorted_in_by_the_next_add() -> None:
    # (a tail left unsorted made every later add, even of one new row, sort that tail)
    index = KeyIndex()
    _add(index, 1_000, 100)
    _add(index, 0, 50)  # lower positions: an unsorted tail
    _add(index, 2_000, 1)  # a schedule's row, past every other
    assert index._sorted == index._rows == 151
    assert [index.find(1, f"name-{p}".encode())[0].pos for p in (0, 49, 1_000, 2_000)] == [
        0,
        490,
        10_000,
        20_000,
    ]


def test_limited_sweeps_take_turns_over_the_rows_and_compaction_keeps_the_rest() -> None:
    index = KeyIndex()
    _add(index, 0, 10_000)
    _add(index, 10_000, 100, hold=5_000)  # ended, but holding their names until 5000

    def dead(seqs: np.ndarray) -> np.ndarray:
        return np.asarray(seqs % 2 == 0)  # even seqs ended

    got = [index.sweep(lambda s: ~dead(s), 1_000, limit=3_000) for _ in range(4)]
    assert all(g <= 3_000 for g in got)
    assert sum(got) == 5_000 and len(index) == 5_100
    assert index.find(1, b"name-4") == [] and index.find(1, b"name-10002") != []
    assert index.sweep(lambda s: ~dead(s), 5_000) == 50
    assert len(index) == 5_050
    for p in [1, 9_999, 10_001]:
        assert index.find(1, f"name-{p}".encode()) == [
            Entry(p, p * 10, 5_000 if p >= 10_000 else 0)
        ]
    small = index.nbytes
    index.sweep(lambda s: np.zeros(len(s), dtype=bool), 10_000)
    assert len(index) == 0 and index.nbytes < small  # the columns were given back


def test_colliding_names_are_all_found_and_told_apart_by_nobody_but_the_caller() -> None:
    def one_hash(tids: np.ndarray, names: Sequence[bytes]) -> np.ndarray:
        return np.full(len(names), 42, dtype=np.uint32)

    index = KeyIndex(one_hash)
    _add(index, 0, 300)
    got = index.find(1, b"anything")
    assert [e.pos for e in got] == [p * 10 for p in range(300)]
    index.discard(np.arange(0, 3000, 20, dtype=np.int64))  # every other one
    assert len(index.find(1, b"x")) == 150


@pytest.mark.parametrize("spread", ["few hashes", "at the end", "default"])
def test_any_of_says_what_find_says_for_every_name_filed_dropped_or_never_filed(
    spread: str,
) -> None:
    def few(tids: np.ndarray, names: Sequence[bytes]) -> np.ndarray:
        # 13 hashes of filed names, homes 64 apart: long runs; a name never filed
        # starts on such a run with a hash of its own
        return np.array(
            [(sum(n) % 13) * 64 + n.startswith(b"never") for n in names], dtype=np.uint32
        )

    def at_the_end(tids: np.ndarray, names: Sequence[bytes]) -> np.ndarray:
        # runs that wrap past the last slot to slot 0
        return np.array(
            [0xFFFFFFF0 + sum(n) % 8 + 8 * n.startswith(b"never") for n in names], dtype=np.uint32
        )

    index = KeyIndex({"few hashes": few, "at the end": at_the_end, "default": None}[spread])
    _add(index, 0, 600)
    _add(index, 600, 200, tid=2)
    index.discard(np.arange(0, 6000, 70, dtype=np.int64))  # TOMBs on the runs
    rng = np.random.default_rng(11)
    names = [
        f"{rng.choice(['name', 'never'])}-{p}".encode() for p in rng.integers(0, 1200, 300).tolist()
    ]
    tids = rng.integers(1, 3, 300).astype(np.int64)
    want = [bool(index.find(int(t), n)) for t, n in zip(tids.tolist(), names, strict=True)]
    assert 0 < sum(want) < len(want)  # both answers are asked for
    assert index.any_of(index.hashes(tids, names)).tolist() == want  # numpy strides
    for lo in range(0, 40, 5):  # a few at once: the Python loop
        few = index.hashes(tids[lo : lo + 5], names[lo : lo + 5])
        assert index.any_of(few).tolist() == want[lo : lo + 5]
    assert KeyIndex().any_of(KeyIndex().hashes(tids, names)).tolist() == [False] * len(names)


def test_an_add_given_its_names_hashes_files_as_one_that_hashes_them() -> None:
    """The hashes ``any_of`` took are handed to ``add`` (a checked batch's): the
    entries are found alike, of a batch, of one row, and of a tail replayed in
    part (rows already held dropped with their hashes)."""
    names = [f"name-{p}".encode() for p in range(40)]
    tids = np.full(40, 3, dtype=np.int64)
    pos = np.arange(40, dtype=np.int64) * 10
    seqs, holds = pos.astype(np.uint64), np.zeros(40, dtype=np.int64)
    both = (KeyIndex(), KeyIndex())
    for index, given in zip(both, (False, True), strict=True):
        for lo, hi in ((0, 20), (20, 21), (10, 40)):  # a batch, one row, a tail replayed
            hashes = index.hashes(tids[lo:hi], names[lo:hi]) if given else None
            index.add(
                tids[lo:hi], names[lo:hi], seqs[lo:hi], pos[lo:hi], holds[lo:hi], hashes=hashes
            )
    for name in names:
        assert both[0].find(3, name) == both[1].find(3, name) != []
    assert len(both[1]) == 40
    assert not both[1].any_of(both[1].hashes(tids, [b"never"] * 40)).any()


def test_held_meets_each_hash_on_its_run_and_stops_at_its_first_empty_slot() -> None:
    rng = np.random.default_rng(7)
    size = 256
    row_hashes = (rng.integers(0, 4, 150) * 60 + 230).astype(np.uint32)  # wrapping runs
    table = np.zeros(size, dtype=np.uint32)
    keyslots.insert(table, np.arange(150), row_hashes)
    keyslots.remove(table, np.arange(0, 150, 3), row_hashes[0:150:3])
    asked = rng.integers(0, 2**32, 400, dtype=np.uint64).astype(np.uint32)
    asked[:100] = row_hashes[rng.integers(0, 150, 100)]  # hashes of filed rows, dropped too
    want = [any(int(row_hashes[r]) == int(h) for r in keyslots.probe(table, int(h))) for h in asked]
    assert 0 < sum(want) < len(want)
    assert keyslots.held(table, row_hashes, asked).tolist() == want


def test_columns_give_back_the_live_rows_by_position_and_filled_checks_them() -> None:
    index = KeyIndex()
    _add(index, 0, 10)
    _add(index, 3, 1)
    index.discard(np.array([20, 70], dtype=np.int64))
    h, seq, pos, hold = index.columns()
    assert pos.tolist() == [p * 10 for p in range(10) if p not in (2, 7)]
    assert not pos.flags.writeable
    copies = [c.copy() for c in (h, seq, pos[::-1], hold)]

    def fill(*into: np.ndarray) -> None:
        for dst, src in zip(into, copies, strict=True):
            dst[:] = src

    with pytest.raises(ValueError):
        KeyIndex.filled(8, fill)


def test_churn_keeps_the_memory_held_near_the_live_entries() -> None:
    """Twenty thousand live entries, a thousand new and a thousand ended a round,
    a limited sweep of 4000 rows a round: the rows dropped are given back."""
    index = KeyIndex()
    _add(index, 0, 20_000)
    fresh, most = index.nbytes, 0

    def live_from(first: int) -> Callable[[np.ndarray], np.ndarray]:
        return lambda seqs: np.asarray(seqs >= first)

    for r in range(100):
        _add(index, 20_000 + r * 1_000, 1_000)
        index.sweep(live_from((r + 1) * 1_000), 0, limit=4_000)
        most = max(most, index.nbytes)
    for _ in range(20):  # a whole turn more: every ended entry is looked at
        index.sweep(live_from(100_000), 0, limit=4_000)
    assert len(index) == 20_000
    assert most < 3 * fresh
    for p in [99_999, 100_000, 119_999]:
        assert index.find(1, f"name-{p}".encode()) == (
            [Entry(p, p * 10, 0)] if p >= 100_000 else []
        )
