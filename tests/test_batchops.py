"""Picking and joining rows of record arrays (``delayq.batchops``, used by every layer)."""

from __future__ import annotations

import numpy as np

from delayq.batchops import by_topic, join_rows, rows_at, take_rows
from delayq.timers.memory.releasebuffer import DUE_DTYPE


def test_take_rows_is_fancy_indexing() -> None:
    run = np.zeros(100, dtype=DUE_DTYPE)
    run["seq"] = np.arange(100)
    run["cl_size"] = np.arange(100) * 3
    mask = run["seq"] % 3 == 0
    order = np.random.default_rng(1).permutation(100)
    backwards = run[::-2]  # not contiguous
    assert take_rows(run, mask).tolist() == run[mask].tolist()
    assert take_rows(run, order).tolist() == run[order].tolist()
    assert take_rows(backwards, np.array([3, 0])).tolist() == backwards[[3, 0]].tolist()
    assert take_rows(run, np.zeros(100, dtype=bool)).dtype == DUE_DTYPE


def test_rows_at_reads_records_at_any_byte_offset() -> None:
    data = np.random.default_rng(2).integers(0, 256, 1000, dtype=np.uint8).tobytes()
    offsets = np.array([0, 1, 7, 500, 999 - DUE_DTYPE.itemsize + 1, 3, 3])
    got = rows_at(data, offsets, DUE_DTYPE)
    assert got.dtype == DUE_DTYPE
    assert [r.tobytes() for r in got] == [
        data[o : o + DUE_DTYPE.itemsize] for o in offsets.tolist()
    ]
    assert len(rows_at(b"", offsets[:0], DUE_DTYPE)) == 0
    got["seq"] = 0  # a copy: writable, whatever the buffer


def test_join_rows_is_concatenate() -> None:
    run = np.zeros(50, dtype=DUE_DTYPE)
    run["seq"] = np.arange(50)
    parts = [run[:10], run[30:20:-1], run[40:41], run[::7]]  # views, reversed, strided
    got = join_rows(parts, DUE_DTYPE)
    assert got.tolist() == np.concatenate(parts).tolist()
    got["seq"] = 0  # writable, and a copy
    assert run["seq"][5] == 5
    assert join_rows([run[:3]], DUE_DTYPE).tolist() == run[:3].tolist()
    assert len(join_rows([], DUE_DTYPE)) == 0


def test_by_topic_selects_each_topics_rows() -> None:
    assert by_topic(7) == [(7, slice(None))]
    assert by_topic(np.array([3, 3])) == [(3, slice(None))], "one topic: no mask"
    assert by_topic([]) == []
    got = {t: np.flatnonzero(m).tolist() for t, m in by_topic([2, 1, 2])}
    assert got == {1: [1], 2: [0, 2]}
