"""Reading a segmented log at positions: ``read_at`` (pread) and ``views_at``
(read-only memory maps, for many scattered records without a system call each).

Every function takes one snapshot of the log's segment set, ``segs`` and their
``bases`` (the log's ``_live``), and looks positions up in it. A position is in a
segment from its first record (after the file header) up to its written end;
positions anywhere else are in none.

Reads may run concurrently with an append or a retention delete (the writer
only appends to a snapshot's lists, or replaces them whole), not with a
truncate. A segment's map is made again to the written size when a read reaches
past it; an old map is dropped, never closed, so a reader still holding it
keeps a valid one.
"""

from __future__ import annotations

import bisect
import mmap
import os

import numpy as np

from ..batchops import FEW
from ..formats.fileheader import HEADER_SIZE
from .segment import Segment

__all__ = ["View", "read_at", "segment_at", "views_at"]

View = tuple[np.ndarray | None, mmap.mmap, np.ndarray]
"""Rows of the positions asked for (None: all of them), a map, their offsets in it."""


def segment_at(segs: list[Segment], bases: list[int], pos: int) -> Segment | None:
    """The segment of ``segs`` (``bases``: their bases) holding ``pos``, if any."""
    i = bisect.bisect_right(bases, pos) - 1
    if i < 0:
        return None
    seg = segs[i]
    return seg if seg.base + HEADER_SIZE <= pos < seg.end else None


def read_at(segs: list[Segment], bases: list[int], pos: int, size: int) -> bytes:
    """Up to ``size`` bytes at ``pos`` (fewer at a segment end); b"" if not present."""
    seg = segment_at(segs, bases, pos)
    if seg is None:
        return b""
    return os.pread(seg.fd, min(size, seg.end - pos), pos - seg.base)


def views_at(segs: list[Segment], bases: list[int], positions: np.ndarray) -> list[View]:
    """Record starts grouped by segment: per segment, the rows of ``positions`` in
    it (None: all of them), a read-only map of the segment and the offsets in it.
    The map covers everything written before it was made, so every record that
    starts at one of those offsets lies whole inside it. Positions in no segment
    (before the log's start, past its end, inside a file header) are in no group."""
    if len(positions) < FEW:
        return _few_views(positions.tolist(), segs, bases)
    if not len(positions):
        return []
    low, high = int(positions.min()), int(positions.max())
    seg = segment_at(segs, bases, low)
    if seg is not None and high < seg.end:  # the usual case: all in one segment
        return [(None, _view(seg, high - seg.base + 1), positions - seg.base)]
    base_array = np.asarray(bases, dtype=np.int64)
    found = np.searchsorted(base_array, positions, side="right") - 1
    at = np.maximum(found, 0)
    offs = positions - base_array[at]
    written = np.array([seg.size for seg in segs], dtype=np.int64)[at]
    inside = (found >= 0) & (offs >= HEADER_SIZE) & (offs < written)
    low = int(found.min())
    if low == int(found.max()) and inside.all():  # the usual case: one segment
        return [(None, _view(segs[low], int(offs.max()) + 1), offs)]
    out: list[View] = []
    for i in np.unique(found[inside]).tolist():
        rows = np.flatnonzero(inside & (found == i))
        out.append((rows, _view(segs[i], int(offs[rows].max()) + 1), offs[rows]))
    return out


def _few_views(positions: list[int], segs: list[Segment], bases: list[int]) -> list[View]:
    """``views_at`` one position at a time (for a few)."""
    groups: dict[int, tuple[Segment, list[int], list[int]]] = {}
    for k, pos in enumerate(positions):
        seg = segment_at(segs, bases, pos)
        if seg is not None:
            rows, offs = groups.setdefault(seg.base, (seg, [], []))[1:]
            rows.append(k)
            offs.append(pos - seg.base)
    out: list[View] = []
    for seg, rows, offs in groups.values():
        view = _view(seg, max(offs) + 1)
        whole = len(rows) == len(positions)
        out.append((None if whole else np.array(rows), view, np.array(offs, dtype=np.int64)))
    return out


def _view(seg: Segment, upto: int) -> mmap.mmap:
    """A read-only map of ``seg`` covering at least its first ``upto`` bytes:
    made again (to all written bytes) when the file grew past the old one.

    What a map covers is its own length, never a size recorded beside it: the
    writer appends while a reader makes a map (the ``mmap`` call lets go of the
    GIL), and a size read again afterwards would say more than the map holds,
    so records past its end would read as torn."""
    view = seg.view
    if view is None or len(view) < upto:
        view = seg.view = mmap.mmap(seg.fd, seg.size, prot=mmap.PROT_READ)
    return view
