"""The ready index file (``store/readyindex``): appends held in memory until sync,
the block written last read from memory, and against a list through appends,
reads, truncates and reopens."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from delayq.formats.ready import ENTRY_DTYPE, ReadyEntry
from delayq.store import readyindex
from delayq.store.readyindex import ReadyIndex
from tests.store.records import T


def _entries(arr: Any) -> list[ReadyEntry]:
    fields = ("seq", "body_pos", "body_size", "deliver_at_ms", "delivered_ms")
    return [ReadyEntry(*row) for row in arr[list(fields)].tolist()]


def test_ready_index_holds_appends_in_memory_until_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "1.idx"
    idx = ReadyIndex(path, 1, T)
    entries = [ReadyEntry(i, i * 100, 90, T + i, T + i + 1) for i in range(12)]
    idx.append(entries[:5])
    idx.write_tail()  # written to the file, as a checkpoint does
    idx.append(entries[5:8])  # only in memory
    assert _entries(idx.read_many(3, 4)) == entries[3:7], "a read spanning file and tail"
    assert _entries(idx.read_many(6, 10)) == entries[6:8]
    # a crash now loses the tail (recovery re-appends it from the DELIVER records)
    assert ReadyIndex(path, 1, T).length == 5
    idx.truncate(7)
    assert idx.length == 7 and _entries(idx.read_many(0, 10)) == entries[:7]
    monkeypatch.setattr(readyindex, "_TAIL_MAX", 3)
    idx.append(entries[7:9])  # 4 waiting: written without a sync
    assert ReadyIndex(path, 1, T).length == 9
    idx.truncate(4)  # into the written part
    idx.close()
    idx = ReadyIndex(path, 1, T)
    assert _entries(idx.read_many(0, 10)) == entries[:4]
    idx.close()


def test_ready_index_reads_the_block_written_last_from_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every range reads the same whether it lies in the file, in the block written
    last (kept in memory), in the tail or across them, through several writes
    (the two buffers take turns) and a truncate into the written part."""
    monkeypatch.setattr(readyindex, "_TAIL_MAX", 4)
    idx = ReadyIndex(tmp_path / "1.idx", 1, T)
    entries = [ReadyEntry(i, i * 100, 90, T + i, T + i + 1) for i in range(30)]
    reads = 0

    def check_every_range() -> None:
        nonlocal reads
        for start in range(idx.length):
            for count in (1, 3, 7, 30):
                want = entries[start : min(start + count, idx.length)]
                assert _entries(idx.read_many(start, count)) == want, (start, count)
                reads += 1

    for chunk in ([0, 1, 2], [3, 4], [5, 6, 7, 8, 9], [10], [11, 12, 13, 14, 15, 16]):
        idx.append([entries[i] for i in chunk])
        check_every_range()
    assert idx.length == 17 and reads > 100
    memory = len(idx._recent) + idx.length - idx._written
    assert memory >= 6, "the last written block and the tail are both in memory"
    pread = os.pread
    monkeypatch.setattr(os, "pread", lambda *a: pytest.fail("read the file"))
    start = idx._written - len(idx._recent)
    assert start < idx._written == 17
    assert _entries(idx.read_many(start, 30)) == entries[start:17]
    monkeypatch.setattr(os, "pread", pread)
    idx.truncate(8)  # into the written part: the block kept in memory is no longer the file's
    assert _entries(idx.read_many(0, 30)) == entries[:8]
    idx.append(entries[8:12])
    check_every_range()
    idx.close()


@pytest.mark.parametrize("seed", range(12))
def test_ready_index_matches_a_list_through_appends_reads_truncates_and_reopens(
    tmp_path: Path, seed: int
) -> None:
    """Random appends (some past the tail's write-out size), tail writes, reads of
    any range, truncates and reopens (after a clean close, or as a kill leaves it:
    the unwritten tail gone) agree with a plain list."""
    rng = random.Random(seed)
    path = tmp_path / "1.idx"
    idx = ReadyIndex(path, 1, T)
    model: list[int] = []
    for _ in range(300):
        r = rng.random()
        if r < 0.5:
            n = rng.choice([1, 3, 50, 500, 3000, 9000])
            entries = np.zeros(n, dtype=ENTRY_DTYPE)
            entries["seq"] = np.arange(len(model), len(model) + n) + 10 * seed
            assert idx.append_many(entries) == len(model)
            model.extend(entries["seq"].tolist())
        elif r < 0.6:
            idx.write_tail()
        elif r < 0.65 and model:
            keep = rng.randrange(len(model) + 1)
            idx.truncate(keep)
            del model[keep:]
        elif r < 0.7:
            idx.close(write_tail=rng.random() < 0.5)
            idx = ReadyIndex(path, 1, T)
            assert idx.length <= len(model)
            del model[idx.length :]  # a kill loses the tail not yet written
        elif model:
            at, count = rng.randrange(len(model)), rng.randint(1, 5000)
            assert idx.read_many(at, count)["seq"].tolist() == model[at : at + count]
        assert idx.length == len(model)
    idx.close()


def test_ready_index_append_read_truncate(tmp_path: Path) -> None:
    idx = ReadyIndex(tmp_path / "1.idx", 1, T)
    entries = [ReadyEntry(i, i * 100, 90, T + i, T + i + 1) for i in range(5)]
    assert idx.append(entries[:3]) == 0
    assert idx.append(entries[3:]) == 3
    assert _entries(idx.read_many(1, 3)) == entries[1:4]
    idx.truncate(2)
    idx.close()
    idx = ReadyIndex(tmp_path / "1.idx", 1, T)
    assert idx.length == 2
    assert _entries(idx.read_many(0, 10)) == entries[:2]
    idx.close()
