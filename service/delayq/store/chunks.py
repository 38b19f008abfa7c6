"""The master's side of the replication stream: what to send next (reads only).

A chunk is whole CommitLog records from one position, inside one segment (a
replica starts a new segment where the master did: one file header past the
end) and inside one epoch (a replica records the epoch before its first byte),
at most ``max_bytes`` unless one record is larger. Reads need no lock: records
before the log's end never change.
"""

from __future__ import annotations

from ..epochs import EpochHistory
from ..errors import FailedPrecondition
from ..formats.commitlog import record_starts
from ..formats.fileheader import HEADER_SIZE
from ..formats.frame import frame_length
from .segments import SegmentedLog

__all__ = ["CHUNK_BYTES", "read_chunk"]

CHUNK_BYTES = 1 << 20
"""A chunk's usual limit: large enough to keep a replica's writes batched."""


def read_chunk(
    log: SegmentedLog, end: int, pos: int, history: EpochHistory, max_bytes: int = CHUNK_BYTES
) -> tuple[int, bytes]:
    """Where the next chunk after ``pos`` starts, and its bytes (b"": nothing new
    before ``end``, the log's end as the caller read it)."""
    if pos >= end:
        return pos, b""
    if pos < log.start:
        raise FailedPrecondition(
            f"position {pos} is no longer in the master's log (it starts at {log.start}): "
            "the replica needs a fresh data directory"
        )
    seg = log.segment_at(pos)
    if seg is None:  # a segment's start: its records begin after the file header
        pos += HEADER_SIZE
        seg = log.segment_at(pos)
        if seg is None or seg.base + HEADER_SIZE != pos:
            raise FailedPrecondition(f"position {pos - HEADER_SIZE} is not in the master's log")
    limit = min(seg.end, end, pos + max_bytes)
    for _, start in history.entries:
        if pos < start < limit:  # never across an epoch's start
            limit = start
    data = log.read(pos, limit - pos)
    starts = record_starts(data, 0)
    if not len(starts):  # one record larger than max_bytes
        return pos, log.read(pos, frame_length(data))
    last = int(starts[-1])
    return pos, data[: last + frame_length(data, last)]
