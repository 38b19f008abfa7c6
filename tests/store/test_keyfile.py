"""``<data>/keys.idx`` (``store.keyfile``): the key indexes saved at a clean close
and loaded at the next open, or refused (missing, damaged, saved for another log
end), and gone from the directory once read either way."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from delayq.store.keyfile import FILE, load_keys, read_keys, save_keys
from delayq.timers.memory.keyindex import HASH_KIND, Entry, KeyIndex


def _index(n: int, tid: int, *, drop: int = 0) -> KeyIndex:
    index = KeyIndex()
    pos = np.arange(n, dtype=np.int64) * 64
    index.add(
        np.full(n, tid, dtype=np.uint32),
        [f"k{i % 50}".encode() for i in range(n)],
        np.arange(n, dtype=np.uint64),
        pos,
        pos * 2,
    )
    index.discard(pos[:drop])
    return index


def _load(tmp_path: Path, log_end: int, tables: int = 2) -> list[KeyIndex] | None:
    return load_keys(tmp_path, log_end, KeyIndex.filled, tables=tables, hash_kind=HASH_KIND)


def test_saved_indexes_load_back_as_they_were_and_the_file_goes(tmp_path: Path) -> None:
    keys, dedups = _index(5000, 3, drop=100), _index(0, 1)
    save_keys(tmp_path, [keys, dedups], 12345, 99)
    assert not list(tmp_path.glob(".*tmp"))
    head, tables = read_keys(tmp_path) or pytest.fail("no file")
    assert tables[0][2].tolist() == [p * 64 for p in range(100, 5000)]
    assert (head.log_end, head.created_ms, head.counts) == (12345, 99, (4900, 0))
    got = _load(tmp_path, 12345)
    assert got is not None and [len(ix) for ix in got] == [4900, 0]
    assert not (tmp_path / FILE).exists()
    for name in [b"k0", b"k7", b"k49"]:
        assert got[0].find(3, name) == keys.find(3, name) != []
    assert got[0].find(1, b"k0") == []
    got[0].add(  # a loaded index takes new entries after the saved ones
        np.array([3], dtype=np.uint32),
        [b"k7"],
        np.array([7], dtype=np.uint64),
        np.array([10**6]),
        np.array([0]),
    )
    assert got[0].find(3, b"k7")[-1] == Entry(7, 10**6, 0)
    assert _load(tmp_path, 12345) is None  # read once


@pytest.mark.parametrize(
    "spoil",
    ["another log end", "a flipped byte", "cut short", "another table count", "not there"],
)
def test_a_file_that_does_not_fit_is_refused_and_removed(tmp_path: Path, spoil: str) -> None:
    save_keys(tmp_path, [_index(300, 3), _index(20, 4)], 777, 1)
    path = tmp_path / FILE
    data = bytearray(path.read_bytes())
    log_end, tables = 777, 2
    if spoil == "another log end":
        log_end = 778
    elif spoil == "a flipped byte":
        data[len(data) // 2] ^= 1
    elif spoil == "cut short":
        data = data[:-100]
    elif spoil == "another table count":
        tables = 1
    else:
        path.unlink()
    if path.exists():
        path.write_bytes(bytes(data))
    assert _load(tmp_path, log_end, tables) is None
    assert not path.exists()


def test_an_index_of_another_hash_is_not_loaded(tmp_path: Path) -> None:
    other = KeyIndex(lambda tids, names: np.zeros(len(names), dtype=np.uint32))
    save_keys(tmp_path, [other, KeyIndex()], 5, 1)
    assert _load(tmp_path, 5) is None
