"""Which sealed log segments retention may delete (pure: numbers in, a count out).

Segments are deleted oldest first, and never the newest (it is being written). A
segment may go once the segment after it is old enough and not past what must be
kept: every record in a segment was written before the next one was created, so
the next one's creation time bounds the whole segment's age.

- TimerLog: a record is read only until its wheel slot fires; the slot of a record
  written at time t lies at most a window (plus one slot) after t. So a segment goes
  once the scan fired past its successor's creation plus a window, and the
  checkpoint covers it.
- CommitLog: the same, because timers point into it; also every delivered message
  in it must be older than the retention period, and nothing in it may be left for
  a restart to replay.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["deletable_count"]


def deletable_count(segments: Sequence[tuple[int, int]], created_before_ms: int, upto: int) -> int:
    """How many of ``segments`` ((base, created_ms), oldest first) may be deleted:
    the leading ones whose successor was created before ``created_before_ms`` and
    starts at or below ``upto``."""
    count = 0
    for base, created_ms in segments[1:]:  # each segment's successor
        if not (created_ms < created_before_ms and base <= upto):
            break
        count += 1
    return count
