"""A segmented append-only byte log, the file layer under CommitLog and TimerLog:
the set of segment files in one directory (``segment``) and its one writer.

Positions are global and contiguous: the next segment's base is the previous
base plus the previous file's length, so a position names one byte forever
(opening checks there is no gap or overlap). A batch handed to ``append`` is
written with one ``os.write`` into one segment (never split), so a record never
spans segments; ``segment_bytes`` is a soft limit. Only the newest segment is
written; older ones are sealed and immutable. Writes go straight to the OS (no
user-space buffer), so killing the process loses nothing already returned from
``append``. The newest file may carry a warm tail of zeros past what was written
(``warmtail``); reads at positions are in ``views``.

Not thread-safe for writers: the owner serialises ``append``/``truncate``/
``delete_segment``. Readers outside the writer's lock (``read``, ``views``,
``segment_at``) take one snapshot of the set, ``_live``: appends go to the end of
both of its lists (segments first, so no base outruns its segment); retention
and truncation replace the lists, never change them in place.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from ..errors import CorruptData, storage_full
from ..formats.fileheader import HEADER_SIZE
from .datafile import write_at
from .segment import SUFFIX, Segment
from .views import View, read_at, segment_at, views_at
from .warmtail import WarmTail, tail_zeros

__all__ = ["SegmentedLog"]


class SegmentedLog:
    """The segments of one directory, their positions and the appends to them."""

    def __init__(
        self,
        directory: Path,
        magic: bytes,
        segment_bytes: int,
        what: str,
        *,
        warm_bytes: int = 0,
        on_cold: Callable[[], None] | None = None,
    ) -> None:
        """``warm_bytes``: the warm tail's length (0: none); ``on_cold()`` is called
        (writer's lock held: keep it short) when a new range awaits ``take_cold``."""
        self._dir = directory
        self._magic = magic
        self._segment_bytes = segment_bytes
        self._what = what
        self._warm = WarmTail(warm_bytes, segment_bytes, on_cold)
        self._segments: list[Segment] = []
        self._bases: list[int] = []
        # What readers outside the writer's lock (a receive's body reads) look segments
        # up in, taken as one (see the module docstring).
        self._live = (self._segments, self._bases)
        self._unsynced: list[int] = []  # fds written since the last sync (a roll leaves two)
        directory.mkdir(parents=True, exist_ok=True)
        try:
            self._open_segments(sorted(directory.glob(f"*{SUFFIX}")))
        except BaseException:  # refused: close what was opened
            self.close(cut_tail=False)
            raise

    def _open_segments(self, paths: list[Path]) -> None:
        for path in paths:
            seg = Segment.open(path, self._magic, self._what)
            self._segments.append(seg)
            self._bases.append(seg.base)
        for prev, nxt in itertools.pairwise(self._segments):
            if prev.end != nxt.base:
                raise CorruptData(
                    f"{self._what}: gap or overlap between segments {prev.base} and {nxt.base}"
                )

    # -- positions --------------------------------------------------------
    @property
    def start(self) -> int:
        """First readable position (after retention), or ``end`` when empty."""
        return self._segments[0].base + HEADER_SIZE if self._segments else 0

    @property
    def end(self) -> int:
        return self._segments[-1].end if self._segments else HEADER_SIZE

    @property
    def segments(self) -> list[Segment]:
        return list(self._segments)

    def first_record_pos(self, base: int) -> int:
        return base + HEADER_SIZE

    # -- writing ----------------------------------------------------------
    def reserve(self, size: int, now_ms: int) -> int:
        """The position where an ``append`` of ``size`` bytes will land (rolls if needed)."""
        seg = self._segments[-1] if self._segments else None
        if seg is None or (seg.size > HEADER_SIZE and seg.size + size > self._segment_bytes):
            if seg is not None:
                self._warm.cut(seg)  # sealed: exactly what was written
            seg = self._new_segment(self.end if seg else 0, now_ms)
        return seg.end

    def _new_segment(self, base: int, now_ms: int) -> Segment:
        seg = Segment.create(self._dir, self._magic, base, now_ms)
        self._segments.append(seg)
        self._bases.append(base)
        return seg

    def prepare(self, now_ms: int) -> None:
        """Make the log ready for its first append: an empty log gets its first file
        now (creating one fsyncs it and its directory: tens of ms that the first
        write would otherwise wait for, under its owner's lock), and the newest
        file its warm tail."""
        self.reserve(0, now_ms)
        self._warm.keep(self._segments[-1])

    def append(self, data: bytes | bytearray | memoryview, now_ms: int) -> int:
        """Write ``data`` at the end (one segment, one write); return its position.
        Raises ``StorageFull`` if the disk or quota is full: then nothing is appended
        (a partly written tail lies past the end, and the next append overwrites it)."""
        with self._writing():
            pos = self.reserve(len(data), now_ms)
            self._write(data)
        return pos

    def append_at(self, pos: int, data: bytes | bytearray | memoryview, now_ms: int) -> None:
        """Write ``data`` at ``pos``, where another copy of this log (a replica's
        master) wrote it: at the end, or one file header past it, where that copy
        began a new segment. Positions stay the same in both copies whatever their
        segment sizes. ``ValueError`` for any other position; ``StorageFull`` as
        for ``append``."""
        end = self.end
        with self._writing():
            if not self._segments and pos == HEADER_SIZE:
                self._new_segment(0, now_ms)
            elif self._segments and pos == end + HEADER_SIZE:
                self._warm.cut(self._segments[-1])  # sealed: exactly what was written
                self._new_segment(end, now_ms)
            elif not self._segments or pos != end:
                raise ValueError(f"{self._what}: cannot write at {pos}; the log ends at {end}")
            self._write(data)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        try:
            yield
        except OSError as exc:
            full = storage_full(exc, f"append to the {self._what} in {self._dir}")
            if full is None:
                raise
            raise full from exc

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        seg = self._segments[-1]
        write_at(seg.fd, data, seg.size)
        seg.size += len(data)
        seg.ready = max(seg.ready, seg.size)
        if not self._unsynced or self._unsynced[-1] != seg.fd:
            self._unsynced.append(seg.fd)
        self._warm.keep(seg)

    def warm_tail(self, floor: int) -> int:
        """Zero bytes at the end of the newest file past ``floor``: warm tail, not
        data (for reports, and ``truncate(zeros=)``; see ``warmtail.tail_zeros``)."""
        return tail_zeros(self._segments[-1], floor) if self._segments else 0

    def take_cold(self) -> list[tuple[int, int, int]]:
        """See ``WarmTail.take_cold``."""
        return self._warm.take_cold()

    def take_unsynced(self) -> list[int]:
        """File descriptors written since the last call (to fsync outside the writer's lock)."""
        pending, self._unsynced = self._unsynced, []
        return pending

    def sync(self) -> None:
        """fsync every segment written since the last sync."""
        for fd in self.take_unsynced():
            os.fsync(fd)

    def truncate(self, pos: int, *, zeros: int = 0) -> None:
        """Cut everything at and after ``pos`` (recovery of a torn or diverged tail).
        ``zeros``: that many bytes at the end are known zeros (``warm_tail``): a cut
        inside them keeps them as the newest file's warm tail, with no write and no
        fsync (a kill leaves one, and syncing a cut then flushed every dirty page)."""
        seg = self._segments[-1] if self._segments else None
        if seg is not None and seg.base + HEADER_SIZE <= pos and seg.end - zeros <= pos <= seg.end:
            seg.size = pos - seg.base
            return
        while (
            self._segments
            and self._segments[-1].base + HEADER_SIZE > pos
            and len(self._segments) > 1
        ):
            seg = self._segments[-1]
            self._replace_lists(self._segments[:-1], self._bases[:-1])
            seg.remove(self._dir)
        if self._segments:
            seg = self._segments[-1]
            keep = max(HEADER_SIZE, pos - seg.base)
            if keep < seg.ready:  # what was written past ``pos``, or a warm tail
                seg.drop_view()
                os.ftruncate(seg.fd, keep)
                os.fsync(seg.fd)
                seg.size = seg.ready = keep
                self._warm.forget()

    def delete_segment(self, base: int) -> None:
        """Delete a sealed segment (retention). Never the newest one."""
        if not self._segments or base != self._segments[0].base or len(self._segments) == 1:
            raise ValueError("only the oldest sealed segment can be deleted")
        seg = self._segments[0]
        self._replace_lists(self._segments[1:], self._bases[1:])
        seg.remove(self._dir)

    def _replace_lists(self, segments: list[Segment], bases: list[int]) -> None:
        """Drop segments by new lists, never in place: a reader outside the writer's
        lock may hold an index into the old ones (see ``_live``)."""
        self._segments, self._bases = segments, bases
        self._live = (segments, bases)

    # -- reading (see ``views``) -----------------------------------------
    def segment_at(self, pos: int) -> Segment | None:
        segs, bases = self._live
        return segment_at(segs, bases, pos)

    def read(self, pos: int, size: int) -> bytes:
        """Up to ``size`` bytes at ``pos`` (fewer at a segment end); b"" if not present."""
        segs, bases = self._live
        return read_at(segs, bases, pos, size)

    def views(self, positions: np.ndarray) -> list[View]:
        """Record starts grouped by segment, for reading many scattered records
        without a system call each (see ``views.views_at``)."""
        segs, bases = self._live  # one snapshot for the whole call
        return views_at(segs, bases, positions)

    def drop_views(self) -> None:
        """Let every segment's map go (unmapped once no reader holds it): the pages
        read through a map stay in the process's RSS until then."""
        for seg in self._segments:
            seg.drop_view()

    def close(self, *, cut_tail: bool = True) -> None:
        """Close every file; ``cut_tail`` False leaves a warm tail as a kill would."""
        if cut_tail and self._segments:
            self._warm.cut(self._segments[-1])
        for seg in self._segments:
            seg.close()
        self._replace_lists([], [])
        self._warm.forget()
