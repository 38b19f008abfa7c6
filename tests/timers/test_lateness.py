"""The release lateness histogram (pure): buckets, early count, percentiles and
the Prometheus form, against counting by hand."""

from __future__ import annotations

import bisect
import random

import numpy as np
import pytest

from delayq.timers.memory.lateness import LATENCY_BUCKETS_MS, LatenessHistogram


def _by_hand(values: list[int]) -> list[int]:
    counts = [0] * (len(LATENCY_BUCKETS_MS) + 1)
    for v in values:
        counts[bisect.bisect_left(LATENCY_BUCKETS_MS, v)] += 1
    return counts


@pytest.mark.parametrize("size", [1, 3, 7, 8, 500])  # below and above the numpy cut (8)
def test_batches_land_in_the_buckets_of_their_own_lateness(size: int) -> None:
    rng = random.Random(size)
    h = LatenessHistogram()
    seen: list[int] = []
    for _ in range(20):
        same = rng.random() < 0.3  # the usual batch: every message equally late
        batch = [rng.choice([0, 3, 70_000])] * size if same else []
        batch = batch or [rng.choice([0, 1, 2, 4, 9, 60_000, 61_000]) for _ in range(size)]
        assert h.add(np.array(batch, dtype=np.int64)) == 0
        seen += batch
    assert h.counts.tolist() == _by_hand(seen)
    assert (h.sum_ms, h.count) == (sum(seen), len(seen))


@pytest.mark.parametrize("batch", [[-1], [-3, -3, -3], [0, -2, 5], [-1] * 4 + [1] * 9])
def test_add_returns_how_many_were_released_early(batch: list[int]) -> None:
    h = LatenessHistogram()
    assert h.add(np.array(batch, dtype=np.int64)) == sum(v < 0 for v in batch)
    assert h.counts[0] == sum(v <= 0 for v in batch), "early ones count as on time"


def test_percentiles_are_bucket_upper_bounds() -> None:
    h = LatenessHistogram()
    assert (h.percentile(0.5), h.percentile(0.99), h.count) == (0, 0, 0)
    h.add(np.array([0] * 90 + [3] * 9 + [400], dtype=np.int64))
    assert (h.percentile(0.5), h.percentile(0.9), h.percentile(0.99)) == (0, 0, 5)
    assert h.percentile(1.0) == 500
    h.add(np.array([10**6] * 1000, dtype=np.int64))  # past the last bound: +Inf
    assert h.percentile(0.99) == LATENCY_BUCKETS_MS[-1] * 10


def test_cumulative_is_the_prometheus_form_and_a_copy_is_independent() -> None:
    h = LatenessHistogram()
    h.add(np.array([0, 1, 1, 7, 10**6], dtype=np.int64))
    snap = h.copy()
    h.add(np.array([2], dtype=np.int64))
    got = dict(snap.cumulative())
    assert list(got) == [*map(str, LATENCY_BUCKETS_MS), "+Inf"]
    picked = [got[b] for b in ("0", "1", "5", "10", "60000", "+Inf")]
    assert picked == [1, 3, 3, 4, 4, 5]
    assert (snap.count, snap.sum_ms) == (5, 10**6 + 9)
    assert h.count == 6
