"""Retired chunks of the state map (``statemap``): which chunks are retired
(``Retired``), their file ``<data>/state/retired.json`` (``load_retired``,
``write_retired``), and the search for a live entry that decides whether a
chunk may retire (``first_pending``).

``retired.json``: ``{"chunk_entries": CHUNK, "retired": [[first, last], ...]}``,
the retired chunk numbers as sorted, merged inclusive ranges, replaced whole
(``create_file``: a new file, fsynced, renamed over the old). Invariants: the set
only grows; a chunk is recorded retired before its files are deleted (so a kill
between the two leaves a file the next open deletes); a file made with another
chunk size is refused (``CorruptData``), never read with this one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ..errors import CorruptData
from ..formats.messagestate import BLOCKED, MessageState, is_live
from .newfile import create_file

__all__ = [
    "RETIRED_FILE",
    "Retired",
    "first_pending",
    "load_retired",
    "retired_ranges",
    "write_retired",
]

RETIRED_FILE = "retired.json"
_SCAN_BLOCK = 1 << 16  # entries looked at per step of a search for a pending one


def first_pending(states: np.ndarray, start: int = 0) -> int:
    """The index of the first live entry (PENDING, or BLOCKED: ``is_live``) of
    ``states`` at or after ``start``, or ``len(states)`` if there is none; looks at
    one block at a time, so a live entry early on costs little."""
    for at in range(start, len(states), _SCAN_BLOCK):
        part = states[at : at + _SCAN_BLOCK]
        k = int(part.argmin())
        if part[k] == MessageState.PENDING:  # the usual live entry: found without a mask
            return at + k
        if part[k] <= BLOCKED and (live := np.flatnonzero(is_live(part))).size:
            return at + int(live[0])
    return len(states)


def retired_ranges(chunks: Iterable[int]) -> list[list[int]]:
    """Chunk numbers as sorted, merged inclusive ranges ``[first, last]``."""
    out: list[list[int]] = []
    for n in sorted(set(chunks)):
        if out and out[-1][1] == n - 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    return out


class Retired:
    """A set of chunk numbers that mostly grows from 0 up: every chunk below
    ``floor``, and a set of those above it (a chunk held by a long-pending message
    retires late), so a year of history is one number, not a set of thousands."""

    def __init__(self, chunks: Iterable[int] = ()) -> None:
        self.floor = 0
        self._above: set[int] = set()
        self.update(chunks)

    @classmethod
    def from_ranges(cls, ranges: Iterable[tuple[int, int]]) -> Retired:
        """The set of ``ranges`` (inclusive), without listing the floor's run."""
        got = cls()
        for first, last in sorted(ranges):
            if first <= got.floor:
                got.floor = max(got.floor, last + 1)
            else:
                got.update(range(first, last + 1))
        got.update(())
        return got

    def __contains__(self, n: int) -> bool:
        return n < self.floor or n in self._above

    def update(self, chunks: Iterable[int]) -> None:
        self._above.update(n for n in chunks if n >= self.floor)
        while self.floor in self._above:
            self._above.discard(self.floor)
            self.floor += 1

    def ranges(self) -> list[list[int]]:
        """Sorted, merged inclusive ranges ``[first, last]``."""
        head = [[0, self.floor - 1]] if self.floor else []
        return head + retired_ranges(self._above)  # each above floor + 1: none to merge

    def all(self) -> frozenset[int]:
        return frozenset(range(self.floor)) | self._above


def load_retired(directory: Path, entries: int) -> Retired:
    """The retired chunks recorded in ``directory`` (none when it has no file);
    ``CorruptData`` when the file does not parse or has chunks of other than
    ``entries`` entries."""
    path = directory / RETIRED_FILE
    if not path.exists():
        return Retired()
    try:
        doc = json.loads(path.read_text())
        recorded, ranges = int(doc["chunk_entries"]), doc["retired"]
        retired = Retired.from_ranges((int(first), int(last)) for first, last in ranges)
    except (ValueError, KeyError, TypeError, OSError) as exc:
        raise CorruptData(f"state {RETIRED_FILE} unreadable: {exc}") from exc
    if recorded != entries:
        raise CorruptData(
            f"state {RETIRED_FILE}: chunks of {recorded} entries, this build uses {entries}"
        )
    return retired


def write_retired(directory: Path, entries: int, retired: Retired) -> None:
    """Record ``retired`` (chunks of ``entries`` entries) durably in ``directory``
    (the directory itself is the caller's to fsync)."""
    doc = {"chunk_entries": entries, "retired": retired.ranges()}
    os.close(create_file(directory / RETIRED_FILE, json.dumps(doc).encode()))
