"""The open's build of the key index over kept records (real files, a fake
clock): they are filed before the segments' records (their positions are lower:
the index is filed in rising order), and read a chunk at a time, bodies decoded
only for the wanted ones (the build's memory does not grow with the kept bodies)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Sequence

import numpy as np

from delayq import Engine, FakeClock
from delayq.timers.lifecycle.keyrecovery import build_keys
from delayq.timers.memory.keyindex import KeyIndex
from tests.support.engines import SMALL, Make, churn, drain, ids, req, run_until

BIG = {"commitlog_segment_bytes": 1 << 20, "timerlog_segment_bytes": 64 << 10}


class Recording(KeyIndex):
    """A key index that notes the positions it is given, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.filed: list[int] = []

    def add(
        self,
        tids: np.ndarray,
        names: Sequence[bytes],
        seqs: np.ndarray,
        positions: np.ndarray,
        holds: np.ndarray,
        *,
        hashes: np.ndarray | None = None,
    ) -> None:
        self.filed += np.asarray(positions).tolist()
        super().add(tids, names, seqs, positions, holds, hashes=hashes)


def rebuilt(e: Engine) -> tuple[list[int], int]:
    """Build ``e``'s key index again into recording indexes: the positions filed,
    and the peak of memory traced while building."""
    with e._life.held() as sh:  # the open's build, run again on the running shard
        st = sh.state
        st.keys, st.dedups = Recording(), Recording()
        tracemalloc.start()
        try:
            build_keys(st)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert isinstance(st.keys, Recording)
        return st.keys.filed, peak


def test_kept_records_are_filed_before_the_segments_records(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine(retention_ms=5_000, **SMALL)
    ids(e.schedule([req(600_000 + i, b"far", key=f"k{i}") for i in range(50)]))
    churn(e, clock, 30)  # their segment is deleted: kept records
    assert e.observing.counters["records_kept"] == 50
    ids(e.schedule([req(600_000, b"late", key="late")]))
    filed, _ = rebuilt(e)
    assert len(filed) == 51 and filed == sorted(filed)


def test_the_build_does_not_hold_the_kept_bodies(make_engine: Make, clock: FakeClock) -> None:
    e = make_engine(retention_ms=5_000, **BIG)
    body = b"B" * 64_000
    for _ in range(5):
        ids(e.schedule([req(3_600_000, body) for _ in range(60)]))  # no key: none wanted
    for _ in range(3):  # fill segments with messages delivered at once: retention deletes
        ids(e.schedule([req(50, b"y" * 200_000) for _ in range(6)]))
        run_until(e, clock, clock.now_ms() + 3000, step_ms=500)
        drain(e)
        e.checkpoint()
    churn(e, clock, 10)
    kept = e.observing.counters["records_kept"]
    assert kept == 300
    filed, peak = rebuilt(e)
    assert filed == []
    assert peak < kept * len(body) // 2  # a chunk of them at a time, not all at once
