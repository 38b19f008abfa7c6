"""Retiring state-map chunks (``store/statemap``): a chunk whose messages are all
done, durably, below the caller's bound, is recorded as retired and its file goes;
its entries then read as done, and chunks no write touched are closed. Chunks of
16 entries here (``CHUNK_BITS`` is read when a map is opened)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from delayq.errors import CorruptData
from delayq.formats.messagestate import MessageState
from delayq.store import retiredchunks, statemap
from delayq.store.retiredchunks import Retired, first_pending, retired_ranges
from delayq.store.statemap import StateMap

T = 1_700_000_000_000
BITS = 4
SIZE = 1 << BITS


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(statemap, "CHUNK_BITS", BITS)


def none_held(bits: int) -> frozenset[int]:
    """No chunk holds a seq an id still names."""
    return frozenset()


def seqs(first: int, count: int) -> np.ndarray:
    return np.arange(first, first + count, dtype=np.uint64)


def files(d: Path) -> list[int]:
    return sorted(int(p.stem) for p in d.glob("*.map"))


def test_first_pending_finds_the_first_zero_from_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retiredchunks, "_SCAN_BLOCK", 4)  # several blocks
    states = np.full(11, MessageState.DELIVERED, dtype=np.uint8)
    assert first_pending(states) == 11
    states[[2, 9]] = MessageState.PENDING
    assert (first_pending(states), first_pending(states, 3), first_pending(states, 10)) == (
        2,
        9,
        11,
    )
    states[1] = MessageState.CANCELLED  # any other state is done
    assert first_pending(states, 1) == 2


def test_retired_ranges_merge_neighbours() -> None:
    assert retired_ranges([5, 1, 2, 3, 7, 8, 2]) == [[1, 3], [5, 5], [7, 8]]
    assert retired_ranges([]) == []


def test_retired_chunks_keep_a_floor_and_the_few_above_it() -> None:
    r = Retired([1, 2, 5])
    assert (r.floor, r.ranges(), 0 in r, 1 in r, 3 in r, 5 in r) == (
        0,
        [[1, 2], [5, 5]],
        False,
        True,
        False,
        True,
    )
    r.update([0, 3])  # the floor absorbs the run that now starts at 0
    assert (r.floor, r.ranges(), 4 in r, r.all()) == (4, [[0, 3], [5, 5]], False, {0, 1, 2, 3, 5})
    r.update([4])
    assert (r.floor, r.ranges()) == (6, [[0, 5]])
    back = Retired.from_ranges([(7, 9), (0, 2), (3, 5), (12, 12)])
    assert (back.floor, back.ranges()) == (6, [[0, 5], [7, 9], [12, 12]])
    assert Retired.from_ranges([]).ranges() == []


def sweep_after_sync(m: StateMap, below: int) -> list[int]:
    """What the engine does: the dirty chunks are fsynced (a checkpoint), then swept."""
    m.flush()
    return m.sweep(below, none_held)


def test_a_chunk_retires_only_when_all_done_clean_and_below_the_bound(tmp_path: Path) -> None:
    d = tmp_path / "state"
    m = StateMap(d, T)
    m.set_many(seqs(0, SIZE), MessageState.DELIVERED)  # chunk 0: all done
    m.set_many(seqs(SIZE, SIZE - 1), MessageState.CANCELLED)  # chunk 1: one still pending
    m.set(3 * SIZE, MessageState.DELIVERED)  # chunk 3: the newest, mostly pending
    assert m.sweep(4 * SIZE, none_held) == [], "not yet on disk (dirty): nothing retires"
    assert sweep_after_sync(m, SIZE - 1) == [], "chunk 0 is not wholly below the bound"
    m.set(5, MessageState.DELIVERED)  # written again after the last sync
    assert m.sweep(4 * SIZE, none_held) == []
    assert sweep_after_sync(m, 4 * SIZE) == [0]
    assert files(d) == [1, 3] and m.retired == {0}
    doc = json.loads((d / "retired.json").read_text())
    assert doc == {"chunk_entries": SIZE, "retired": [[0, 0]]}
    # retired entries read as done, one by one and in batches; writes to them are dropped
    assert m.get(7) is MessageState.DELIVERED
    assert m.raw_many(seqs(0, SIZE)).tolist() == [MessageState.DELIVERED] * SIZE
    m.set(7, MessageState.CANCELLED)
    m.set_many(seqs(0, SIZE), MessageState.CANCELLED)
    assert files(d) == [1, 3] and m.get(7) is MessageState.DELIVERED
    mixed = m.raw_many(np.array([1, 2 * SIZE - 1, SIZE], dtype=np.uint64))
    assert mixed.tolist() == [MessageState.DELIVERED, MessageState.PENDING, MessageState.CANCELLED]
    # the last pending one of chunk 1 goes: it retires once that is on disk
    m.set(2 * SIZE - 1, MessageState.DELIVERED)
    assert sweep_after_sync(m, 4 * SIZE) == [1]
    assert files(d) == [3] and json.loads((d / "retired.json").read_text())["retired"] == [[0, 1]]
    m.close()


def test_retirement_survives_a_restart_and_a_kill_between_its_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = tmp_path / "state"
    m = StateMap(d, T)
    m.set_many(seqs(0, 2 * SIZE), MessageState.DELIVERED)
    m.set(2 * SIZE, MessageState.PENDING)
    deleted: list[Path] = []
    with monkeypatch.context() as patch:
        patch.setattr(Path, "unlink", lambda self, missing_ok=False: deleted.append(self))
        assert sweep_after_sync(m, 2 * SIZE) == [0, 1]  # recorded; "killed" before unlinking
    assert len(deleted) == 2 and files(d) == [0, 1, 2]
    m.close()
    m = StateMap(d, T)  # the next open finishes the job and keeps the record
    assert files(d) == [2] and m.retired == {0, 1}
    assert m.raw_many(seqs(0, 2 * SIZE)).tolist() == [MessageState.DELIVERED] * 2 * SIZE
    assert m.get(2 * SIZE) is MessageState.PENDING
    m.close()


def test_a_restart_looks_at_each_chunk_again(tmp_path: Path) -> None:
    d = tmp_path / "state"
    m = StateMap(d, T)
    m.set_many(seqs(0, 3 * SIZE), MessageState.DELIVERED)
    m.flush()
    m.close()  # killed before any sweep: the next process must still find them
    m = StateMap(d, T)
    assert m.sweep(3 * SIZE, none_held) == [0, 1, 2]
    m.set(3 * SIZE + 1, MessageState.DELIVERED)  # chunk 3: one done, the rest pending
    m.set(4 * SIZE, MessageState.PENDING)  # chunk 4: the newest
    m.close()
    m = StateMap(d, T)
    assert m.open_chunks == 0
    assert m.sweep(4 * SIZE, none_held) == [], "chunk 3 has pending entries"
    assert m.open_chunks == 0, "what a sweep opened to look at, it closes"
    m.close()


def test_untouched_chunks_are_closed_and_reopen_on_use(tmp_path: Path) -> None:
    d = tmp_path / "state"
    m = StateMap(d, T)
    m.set_many(seqs(0, 5 * SIZE), MessageState.CANCELLED)
    m.set(5 * SIZE, MessageState.PENDING)  # chunk 5: the newest
    m.flush()
    assert m.open_chunks == 6
    assert m.sweep(0, none_held) == []  # bound 0: nothing may retire, but the files were written...
    assert m.open_chunks == 6  # ...since the last sweep: they stay open for one more
    assert m.sweep(0, none_held) == [] and m.open_chunks == 1, "only the newest stays open"
    assert m.get(SIZE + 3) is MessageState.CANCELLED  # reopened by a read
    assert m.open_chunks == 2
    m.close()


def test_a_retired_list_for_another_chunk_size_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "state"
    d.mkdir()
    (d / "retired.json").write_text(json.dumps({"chunk_entries": 64, "retired": [[0, 0]]}))
    with pytest.raises(CorruptData, match="chunks of 64 entries"):
        StateMap(d, T)
    (d / "retired.json").write_text("{not json")
    with pytest.raises(CorruptData, match=r"retired\.json unreadable"):
        StateMap(d, T)


def test_held_chunks_stay_and_seq_0_is_no_message(tmp_path: Path) -> None:
    m = StateMap(tmp_path / "state", T)
    m.set_many(seqs(1, 3 * SIZE - 1), MessageState.DELIVERED)  # seq 0 is never used
    m.flush()
    asked: list[int] = []

    def held(bits: int) -> frozenset[int]:  # what ids still name: seqs in chunks 1 and 2
        asked.append(bits)
        return frozenset({1, 2})

    assert m.sweep(3 * SIZE, held) == [0] and asked == [BITS]
    assert files(tmp_path / "state") == [1, 2]
    assert m.sweep(3 * SIZE, held) == [] and len(asked) == 2, "held ones: asked at every sweep"
    assert m.sweep(3 * SIZE, none_held) == [1, 2], "let go: they retire"
    assert m.sweep(4 * SIZE, held) == [] and len(asked) == 2, "no chunk could go: not asked"
    m.close()


def test_a_sweep_looks_at_a_bounded_number_of_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(statemap, "_SWEEP_MOST", 2)
    m = StateMap(tmp_path / "state", T)
    m.set_many(seqs(0, 5 * SIZE), MessageState.DELIVERED)
    m.flush()
    got = [m.sweep(5 * SIZE, none_held) for _ in range(4)]
    assert got == [[0, 1], [2, 3], [4], []], "the rest wait for the next sweeps"
    m.set_many(seqs(5 * SIZE, 5 * SIZE), MessageState.DELIVERED)
    m.flush()
    held = frozenset({5, 6, 7})  # held ones do not use up a sweep's share
    assert m.sweep(10 * SIZE, lambda bits: held) == [8, 9]
    m.close()
