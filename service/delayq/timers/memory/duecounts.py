"""Pending messages of one topic counted by due time (pure; not thread-safe).

Two sparse tables keyed by absolute time: minutes for messages scheduled less
than ``SHORT_MS`` ahead (their near-term buckets need minute detail) and hours
for the rest (bounded: at most 87,600 keys for ten years). A message leaves
from the minute table when that minute has a count, else from its hour: the
two tables may then trade counts inside one hour, which never makes a bucket
negative and keeps every total exact.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

import numpy as np

__all__ = ["BUCKETS_MS", "DueCounts"]

SHORT_MS = 2 * 3_600_000
MINUTE, HOUR = 60_000, 3_600_000
BUCKETS_MS = (
    0,
    60_000,
    300_000,
    900_000,
    3_600_000,
    6 * HOUR,
    24 * HOUR,
    7 * 24 * HOUR,
    30 * 24 * HOUR,
    365 * 24 * HOUR,
)


class DueCounts:
    def __init__(self, minute: dict[int, int] | None = None, hour: dict[int, int] | None = None):
        self.minute: dict[int, int] = dict(minute or {})
        self.hour: dict[int, int] = dict(hour or {})
        # batches added or removed but not yet counted into the tables: O(1) per
        # batch, folded vectorised over many batches before any read (a checkpoint
        # reads every second), adds before removals (a removed message was added)
        self._unfolded: list[tuple[np.ndarray, int]] = []
        self._removed: list[np.ndarray] = []
        self._unfolded_n = 0

    def add_many(self, dues: np.ndarray, accepted_ms: int) -> None:
        self._unfolded.append((dues, accepted_ms))
        self._unfolded_n += len(dues)
        self._fold_if_due()

    def _fold_if_due(self) -> None:
        # by messages (memory) and by batches: a paced release removes a few messages
        # per ms, and folding a second's worth of tiny batches at once held the
        # engine lock for most of a ms in every checkpoint
        if self._unfolded_n >= _FOLD_AT or len(self._unfolded) + len(self._removed) >= _FOLD_PARTS:
            self._fold()

    def _fold(self) -> None:
        batches, self._unfolded = self._unfolded, []
        removed, self._removed = self._removed, []
        self._unfolded_n = 0
        if batches:
            dues = np.concatenate([d for d, _ in batches])
            accepted = np.repeat([a for _, a in batches], [len(d) for d, _ in batches])
            short = dues - accepted < SHORT_MS
            _count_into(self.minute, dues[short] // MINUTE)
            _count_into(self.hour, dues[~short] // HOUR)
        if removed:
            gone = removed[0] if len(removed) == 1 else np.concatenate(removed)
            keys, counts = _runs(gone // MINUTE)
            for k, count in zip(keys.tolist(), counts.tolist(), strict=True):
                self._remove(k, count)

    def remove_many(self, dues: np.ndarray | Sequence[int]) -> None:
        """Count messages out (released, cancelled, rescheduled); folded lazily."""
        self._removed.append(np.asarray(dues, dtype=np.int64))
        self._unfolded_n += len(self._removed[-1])
        self._fold_if_due()

    def _remove(self, k: int, count: int) -> None:
        """Remove ``count`` messages due in minute ``k``."""
        minute, hour = self.minute, self.hour
        left = minute.get(k, 0)
        take = min(left, count)
        if take == left:
            minute.pop(k, None)
        else:
            minute[k] = left - take
        if take < count:  # the rest leave from the minute's hour
            h = k * MINUTE // HOUR
            rest = hour.get(h, 0) - (count - take)
            if rest > 0:
                hour[h] = rest
            else:
                hour.pop(h, None)

    def histogram(self, now_ms: int) -> list[tuple[int, int]]:
        """(within_ms, count) per bucket of ``BUCKETS_MS`` plus a last one for later
        (within_ms -1). A key counts by its last millisecond (hour keys: coarse);
        0 means overdue (due, not yet released)."""
        self._fold()
        counts = [0] * (len(BUCKETS_MS) + 1)
        bounds = np.array(BUCKETS_MS)
        for table, unit in ((self.minute, MINUTE), (self.hour, HOUR)):
            if not table:
                continue
            keys = np.fromiter(table.keys(), dtype=np.int64, count=len(table))
            vals = np.fromiter(table.values(), dtype=np.int64, count=len(table))
            ahead = (keys + 1) * unit - 1 - now_ms  # by the key's last ms: never "later" than due
            ahead = np.where(ahead < 0, 0, np.maximum(ahead, 1))
            np.add.at(
                counts_arr := np.zeros(len(counts), dtype=np.int64),
                np.searchsorted(bounds, ahead),
                vals,
            )
            counts = [a + int(b) for a, b in zip(counts, counts_arr.tolist(), strict=True)]
        return [(b, c) for b, c in zip((*BUCKETS_MS, -1), counts, strict=True)]

    def to_json(self) -> dict[str, dict[str, int]]:
        self._fold()
        return {
            "minute": {str(k): v for k, v in self.minute.items()},
            "hour": {str(k): v for k, v in self.hour.items()},
        }

    @classmethod
    def from_json(cls, doc: dict[str, dict[str, int]]) -> DueCounts:
        return cls(
            {int(k): v for k, v in doc.get("minute", {}).items()},
            {int(k): v for k, v in doc.get("hour", {}).items()},
        )


_FOLD_AT = 1 << 16  # messages added before they are counted into the tables anyway
_FOLD_PARTS = 256  # batches, added or removed, that trigger a fold too (~0.1 ms a fold)


def _count_into(table: dict[int, int], keys: np.ndarray) -> None:
    """Add one per key to ``table``."""
    uniq, counts = _runs(keys)
    get = table.get
    for k, c in zip(uniq.tolist(), counts.tolist(), strict=True):
        table[k] = get(k, 0) + c


def _runs(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct keys and their counts; run lengths when the keys come sorted (a
    release batch, in due order), np.unique otherwise."""
    if len(keys) < 2:
        return keys, np.ones(len(keys), dtype=np.int64)
    step = np.diff(keys)
    if (step < 0).any():
        if len(keys) < 256:  # a small unsorted batch (a cancel): a Counter beats a sort
            counted = collections.Counter(keys.tolist())
            return np.fromiter(counted, np.int64), np.fromiter(counted.values(), np.int64)
        uniq, counts = np.unique(keys, return_counts=True)
        return uniq, counts
    starts = np.flatnonzero(np.concatenate(([True], step != 0)))
    return keys[starts], np.diff(np.append(starts, len(keys)))
