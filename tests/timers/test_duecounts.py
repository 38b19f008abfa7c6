"""Due counts (``timers/duecounts``): per-minute and per-hour counts of pending
messages stay exact."""

from __future__ import annotations

import numpy as np

from delayq.timers.memory import duecounts
from delayq.timers.memory.duecounts import HOUR, MINUTE, SHORT_MS, DueCounts


def test_due_counts_stay_exact_under_any_shape_of_removal() -> None:
    """Removals in one-minute batches (release), sorted spans and unsorted picks
    (cancels) keep every table non-negative and the histogram's total exact."""
    rng = np.random.default_rng(7)
    now = 1_700_000_000_000
    counts = DueCounts()
    near = now + rng.integers(0, SHORT_MS, 3000)
    far = now + rng.integers(SHORT_MS, 40 * HOUR, 2000)
    left = np.concatenate([near, far])
    counts.add_many(near, now)
    counts.add_many(far, now)
    rng.shuffle(left)
    while len(left):
        shape = rng.integers(0, 3)
        if shape == 0:  # all of one minute, as a release batch
            minute = left[0] // MINUTE
            pick = np.flatnonzero(left // MINUTE == minute)[: rng.integers(1, 50)]
        elif shape == 1:  # a sorted run of several minutes
            pick = np.argsort(left)[: rng.integers(1, 300)]
        else:  # unsorted picks, as a cancel
            pick = rng.choice(len(left), min(len(left), int(rng.integers(1, 300))), replace=False)
        counts.remove_many(left[pick])
        left = np.delete(left, pick)
        assert all(v > 0 for v in counts.minute.values())
        assert all(v > 0 for v in counts.hour.values())
        assert sum(c for _, c in counts.histogram(now)) == len(left)
    assert counts.minute == {} and counts.hour == {}


def test_due_counts_fold_tiny_batches_before_a_reader_has_many_to_fold() -> None:
    """A paced release removes a few messages per ms: what a reader (the checkpoint,
    under the engine lock) must fold first stays bounded in batches, not only in
    messages, and the counts stay exact."""
    now = 1_700_000_000_000
    counts = DueCounts()
    dues = now + 60_000 + np.arange(3000, dtype=np.int64) * 7
    for i in range(0, 3000, 3):  # 1,000 batches of 3
        counts.add_many(dues[i : i + 3], now)
        assert len(counts._unfolded) + len(counts._removed) < duecounts._FOLD_PARTS
    for i in range(0, 2000, 2):  # 1,000 batches of 2, as paced release steps
        counts.remove_many(dues[i : i + 2])
        assert len(counts._unfolded) + len(counts._removed) < duecounts._FOLD_PARTS
    assert sum(c for _, c in counts.histogram(now)) == 1000
    assert sum(counts.minute.values()) == 1000
