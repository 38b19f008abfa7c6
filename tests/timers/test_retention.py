"""Retention (``timers/retention``): which leading segments may go."""

from __future__ import annotations

from delayq.timers.lifecycle.retention import deletable_count


def test_retention_deletes_the_leading_segments_whose_successor_is_old_and_covered() -> None:
    segs = [(0, 100), (1000, 200), (2000, 300), (3000, 400)]  # (base, created_ms)
    assert deletable_count(segs, created_before_ms=250, upto=10_000) == 1
    assert deletable_count(segs, created_before_ms=200, upto=10_000) == 0, "strictly before"
    assert deletable_count(segs, created_before_ms=301, upto=10_000) == 2
    assert deletable_count(segs, created_before_ms=10**9, upto=10_000) == 3, "never the newest"
    assert deletable_count(segs, created_before_ms=10**9, upto=1999) == 1, "not past upto"
    assert deletable_count(segs, created_before_ms=10**9, upto=2000) == 2
    assert deletable_count(segs[:1], created_before_ms=10**9, upto=10_000) == 0
    assert deletable_count([], created_before_ms=10**9, upto=10_000) == 0
    # oldest first: a young segment stops the count even if later ones look old
    assert deletable_count([(0, 1), (10, 500), (20, 2)], created_before_ms=100, upto=99) == 0
