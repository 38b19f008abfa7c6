"""The warm tail of a segmented log: zero pages kept ahead of the writer.

After RocketMQ's pre-allocated mapped files: the newest segment is extended with
a hole past its written end, and ``take_cold`` hands out the new range for a
helper to read once (``warm_pages``), so the page cache holds zero pages there
before an append writes into them; a write into pages already cached costs
about half of one that must allocate them. Holes take no disk blocks.

Invariants: only the newest segment has a tail (sealing one, a truncate into
data and closing the log cut it: ``cut``); a tail never reaches past the roll
point; ``ready >= size`` for every segment. The file is longer than what was
written, so a crash leaves zeros after the last record, which the owner's
recovery scan reads as the end (``tail_zeros`` counts them, and the log's
``truncate(zeros=)`` keeps them as the tail).

Not thread-safe: ``WarmTail`` is the writer's and runs under its owner's lock,
except ``warm_pages``, which runs without it on ranges ``take_cold`` handed out.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ..formats.fileheader import HEADER_SIZE
from .segment import Segment

__all__ = ["WarmTail", "tail_zeros", "warm_pages"]


class WarmTail:
    """What stays ahead of the writer: the newest file's tail of ``warm_bytes``
    (0: none) and the ranges not yet read into the page cache. ``on_cold()`` is
    called (writer's lock held: keep it short) when a new range awaits
    ``take_cold``."""

    __slots__ = ("_cold", "_on_cold", "_segment_bytes", "_warm_bytes")

    def __init__(
        self, warm_bytes: int, segment_bytes: int, on_cold: Callable[[], None] | None
    ) -> None:
        self._warm_bytes = warm_bytes
        self._segment_bytes = segment_bytes
        self._cold: list[tuple[int, int, int]] = []  # (fd, start, end) to read into cache
        self._on_cold = on_cold

    def keep(self, seg: Segment) -> None:
        """Top up the newest file's warm tail once less than half of it is left."""
        if self._warm_bytes and seg.ready - seg.size < self._warm_bytes // 2:
            self._extend(seg)

    def _extend(self, seg: Segment) -> None:
        """Give the newest file a warm tail of ``warm_bytes`` past its written end
        (never past the roll point) and queue the new range for ``take_cold``."""
        ready = min(seg.size + self._warm_bytes, max(self._segment_bytes, seg.size))
        if ready <= seg.ready:
            return
        os.ftruncate(seg.fd, ready)  # a hole: no blocks, no writes
        self._cold = [*self._cold[-7:], (seg.fd, seg.ready, ready)]  # bounded if none reads
        seg.ready = ready
        if self._on_cold is not None:
            self._on_cold()

    @staticmethod
    def cut(seg: Segment) -> None:
        """Cut ``seg``'s tail: the file is exactly what was written."""
        if seg.ready > seg.size:
            os.ftruncate(seg.fd, seg.size)
            seg.ready = seg.size

    def take_cold(self) -> list[tuple[int, int, int]]:
        """Ranges (fd, start, end) of warm tails not yet read into the page cache; the
        caller reads them (``warm_pages``) without the writer's lock. A descriptor
        may be closed by then (the log closed): reading it then fails harmlessly."""
        cold, self._cold = self._cold, []
        return cold

    def forget(self) -> None:
        """Drop the ranges not yet taken (their file was cut or closed)."""
        self._cold.clear()


def tail_zeros(seg: Segment, floor: int) -> int:
    """Zero bytes at the end of ``seg`` (the newest file) past ``floor`` (where a
    recovery scan found the last valid record): the part of a cut after a crash
    that was warm tail, not data. The tail is a hole, found with SEEK_DATA without
    reading it; what data lies past ``floor`` (a torn record's page) is read and
    its trailing zeros counted."""
    lo, hi = max(floor - seg.base, HEADER_SIZE), seg.size
    if lo >= hi:
        return 0
    try:
        data_end = lo
        while data_end < hi:  # the data runs past ``floor``: their last byte
            at = os.lseek(seg.fd, data_end, os.SEEK_DATA)
            data_end = min(os.lseek(seg.fd, at, os.SEEK_HOLE), hi)
    except OSError:  # ENXIO: no data from there on
        pass
    if data_end <= lo:
        return hi - lo
    data = os.pread(seg.fd, data_end - lo, lo)
    return hi - lo - len(data.rstrip(b"\0"))


def warm_pages(fd: int, start: int, end: int) -> None:
    """Read ``[start, end)`` of a file once, so its pages are in the page cache
    before they are written (see the module docstring). Lets go of the GIL in each
    read; a closed or shortened file just ends it."""
    if end <= start:
        return
    buf = memoryview(bytearray(min(1 << 20, end - start)))  # one buffer, reused
    try:
        for off in range(start, end, len(buf)):
            if not os.preadv(fd, [buf[: end - off]], off):
                return
    except OSError:
        return
