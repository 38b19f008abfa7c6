"""The state map file (``store/statemap``): sparse, persistent, and batch reads
and writes matching one by one."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from delayq.formats.messagestate import MessageState
from delayq.store import statemap
from delayq.store.statemap import StateMap
from tests.store.records import T


def test_state_map_batch_reads_and_writes_match_one_by_one(tmp_path: Path, batch_path: str) -> None:
    sm = StateMap(tmp_path / "state", T)
    seqs = np.array([3, statemap.CHUNK + 9, 3, 70, 2 * statemap.CHUNK], dtype=np.uint64)
    sm.set_many(seqs[:2], MessageState.CANCELLED)
    sm.set_many(seqs[3:], MessageState.DELIVERED)
    assert sm.raw_many(seqs).tolist() == [sm.raw(int(s)) for s in seqs.tolist()]
    assert [MessageState(v) for v in sm.raw_many(seqs).tolist()] == [
        MessageState.CANCELLED,
        MessageState.CANCELLED,
        MessageState.CANCELLED,
        MessageState.DELIVERED,
        MessageState.DELIVERED,
    ]
    assert sm.raw_many(np.zeros(0, dtype=np.uint64)).tolist() == []
    sm.close()


def test_state_map_is_sparse_and_persistent(tmp_path: Path) -> None:
    sm = StateMap(tmp_path / "state", T)
    assert sm.get(12345) is MessageState.PENDING
    sm.set(12345, MessageState.CANCELLED)
    sm.set(5_000_000, MessageState.DELIVERED)  # second chunk
    sm.flush()
    sm.close()
    sm = StateMap(tmp_path / "state", T)
    assert sm.get(12345) is MessageState.CANCELLED
    assert sm.get(5_000_000) is MessageState.DELIVERED
    assert sm.get(12346) is MessageState.PENDING
    assert len(os.listdir(tmp_path / "state")) == 2
    sm.close()
