"""Walking a CommitLog segment frame by frame, past damage (reads only).

A recovery read stops at the first bad record; the check must see what lies
after it, so ``frames`` steps over a bad record whose length leads to a valid
record, and otherwise (a garbled frame, or a length that is itself the damage)
looks for the next valid record from the byte after it (``resync``, within
``RESYNC`` bytes). It names nothing itself: ``logs`` turns what it yields into
findings (a bad record with valid ones after it is damage; zeros to the end of
the segment end the walk quietly and are the caller's to name).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .. import formats
from ..errors import CorruptData
from ..store.commitlog import CommitLog
from ..store.segment import Segment

__all__ = ["READ", "RESYNC", "frames", "resync"]

READ = 4 << 20  # bytes read per step of a log walk
RESYNC = 4 << 20  # how far past a garbled frame a walk looks for the next valid record


def frames(cl: CommitLog, seg: Segment) -> Iterator[tuple[int, formats.Record | CorruptData, int]]:
    """Every record of one CommitLog segment as (position, record or why it is bad,
    length). A bad record whose length field still fits is stepped over by it; after
    a garbled frame the walk looks for the next valid record (within ``RESYNC``
    bytes) and ends where it finds none. Zeros to the segment's end end it quietly
    (the caller names them)."""
    pos, end = cl.log.first_record_pos(seg.base), seg.end
    while pos < end:
        chunk = cl.log.read(pos, min(READ, end - pos))
        first = formats.frame_length(chunk)
        if formats.FRAME <= first <= end - pos and first > len(chunk):
            chunk = cl.log.read(pos, first)  # one record larger than a read
        off = 0
        while off < len(chunk):
            at = pos + off
            length = formats.frame_length(chunk, off)
            if formats.FRAME <= length <= end - at and off + length > len(chunk):
                break  # runs past this read: the next one starts with it
            try:
                rec, length = formats.decode(chunk, off, payload=False)
            except CorruptData as exc:
                if _zeros_to_end(cl, at, end):
                    return
                yield at, exc, 0
                if formats.FRAME <= length <= end - at and _record_at(cl, at + length, end):
                    off += length  # the frame holds: step over the bad record
                    continue
                # its length field may be the damage: look for the next valid record
                # from the byte after it, so records it would skip are not lost
                nxt = resync(cl, at + 1, end)
                if nxt is None:
                    return
                off = nxt - pos
                break
            yield at, rec, length
            off += length
        pos += off


def resync(cl: CommitLog, start: int, end: int) -> int | None:
    """The position of the first valid record in [start, start + RESYNC), if any."""
    data = cl.log.read(start, min(RESYNC, end - start))
    raw = np.frombuffer(data, dtype=np.uint8)
    n = len(raw) - formats.FRAME
    if n <= 0:
        return None
    kinds = raw[8 : 8 + n]
    maybe = np.flatnonzero(
        (raw[9 : 9 + n] == formats.VERSION)
        & (kinds >= min(formats.RecordType))
        & (kinds <= max(formats.RecordType))
        & (raw[10 : 10 + n] == 0)
        & (raw[11 : 11 + n] == 0)
    )
    for at in maybe.tolist():
        length = formats.frame_length(data, at)
        if length < formats.FRAME or at + length > len(data):
            continue
        try:
            formats.decode(data, at, payload=False)
        except CorruptData:
            continue
        return start + at
    return None


def _record_at(cl: CommitLog, at: int, end: int) -> bool:
    """Whether a valid record starts at ``at`` (a bad record's length leads there)."""
    if at >= end:
        return False
    head = cl.log.read(at, min(formats.FRAME, end - at))
    length = formats.frame_length(head) if len(head) == formats.FRAME else 0
    if not formats.FRAME <= length <= end - at:
        return False
    try:
        formats.decode(cl.log.read(at, length), 0, payload=False)
    except CorruptData:
        return False
    return True


def _zeros_to_end(cl: CommitLog, at: int, end: int) -> bool:
    while at < end:
        part = cl.log.read(at, min(READ, end - at))
        if not part or part.strip(b"\0"):
            return not part
        at += len(part)
    return True
