"""Release lateness as a histogram (pure, no I/O): how many ms after its due time
each message left the release stage, counted in fixed buckets with a running sum,
the shape of a Prometheus histogram.

Buckets: ``counts[i]`` holds latenesses ``x`` with ``LATENCY_BUCKETS_MS[i-1] < x <=
LATENCY_BUCKETS_MS[i]``; ``counts[0]`` those <= 0 (on time) and the last one those
above the last bound (+Inf). A negative lateness is an early release, which must
never happen: ``add`` returns how many there were, for the caller to count.
"""

from __future__ import annotations

import bisect

import numpy as np

from ...batchops import FEW

__all__ = ["LATENCY_BUCKETS_MS", "LatenessHistogram"]

LATENCY_BUCKETS_MS = (0, 1, 2, 5, 10, 20, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 60000)
_BOUNDS = np.array(LATENCY_BUCKETS_MS)
# what a percentile in the +Inf bucket reads as: ten times the last bound
_PAST_LAST_MS = LATENCY_BUCKETS_MS[-1] * 10


class LatenessHistogram:
    """Counts per bucket and the sum of all latenesses, in ms."""

    def __init__(self) -> None:
        self.counts = np.zeros(len(LATENCY_BUCKETS_MS) + 1, dtype=np.int64)
        self.sum_ms = 0

    def add(self, late: np.ndarray) -> int:
        """Count one release batch's latenesses (ms per message); returns how many
        were negative (released early)."""
        if not len(late):
            return 0
        if len(late) < FEW:  # a few (a paced release): no numpy reductions
            values = late.tolist()
            low, high, total = min(values), max(values), sum(values)
        else:
            low, high, total = int(late.min()), int(late.max()), int(late.sum())
        if low == high:  # the usual batch: all due in the ms it is released in
            self.counts[bisect.bisect_left(LATENCY_BUCKETS_MS, low)] += len(late)
        else:
            self.counts += np.bincount(
                np.searchsorted(_BOUNDS, late), minlength=len(LATENCY_BUCKETS_MS) + 1
            )
        self.sum_ms += total
        return int((late < 0).sum()) if low < 0 else 0

    def copy(self) -> LatenessHistogram:
        out = LatenessHistogram()
        out.counts, out.sum_ms = self.counts.copy(), self.sum_ms
        return out

    @property
    def count(self) -> int:
        return int(self.counts.sum())

    def percentile(self, q: float) -> int:
        """The upper bound (ms) of the bucket holding the ``q`` quantile (0 when
        empty; ten times the last bound for the +Inf bucket)."""
        total = self.count
        if not total:
            return 0
        i = int(np.searchsorted(np.cumsum(self.counts), q * total))
        return LATENCY_BUCKETS_MS[i] if i < len(LATENCY_BUCKETS_MS) else _PAST_LAST_MS

    def cumulative(self) -> list[tuple[str, int]]:
        """Prometheus buckets: (upper bound, count at or below it), ending with +Inf."""
        running = np.cumsum(self.counts).tolist()
        return [*zip(map(str, LATENCY_BUCKETS_MS), running, strict=False), ("+Inf", running[-1])]
