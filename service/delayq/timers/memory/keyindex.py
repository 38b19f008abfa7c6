"""The key index: a shard's keyed SCHEDULE records by (topic id, name), so that a
schedule can find the pending message holding its key (``if_exists``) or its
dedup id, and lookup, cancel and reschedule can act by key.

An entry is (seq, position, hold_until_ms) filed under (topic id, name): the
message's seq (its state-map index: whether it is still pending), the position of
its SCHEDULE record (its id, with the record's epoch) and until when it holds its
name after it ended (accepted_ms + dedup window; 0: not after). Entries are not
removed when their message ends: ``sweep`` drops those whose message is no longer
live and whose hold passed, and callers skip ended ones by the state map. ``find``
may return entries of another name (a hash collision in a compact form): a caller
confirms each by its record, which it reads anyway. Adding an entry at a position
already held is a no-op, so replaying a log tail twice is harmless.

Derived data, built from the CommitLog on open (and kept by replay and by a
replica's applied chunks). Not thread-safe: the shard's lock guards it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

__all__ = ["Entry", "KeyIndex"]


class Entry(NamedTuple):
    seq: int
    pos: int
    hold_until_ms: int


class KeyIndex:
    def __init__(self) -> None:
        self._by_name: dict[tuple[int, bytes], list[Entry]] = {}
        self._name_at: dict[int, tuple[int, bytes]] = {}  # position -> its name

    def __len__(self) -> int:
        return len(self._name_at)

    def add(
        self,
        tids: np.ndarray,
        names: Sequence[bytes],
        seqs: np.ndarray,
        positions: np.ndarray,
        hold_until_ms: np.ndarray,
    ) -> None:
        """File the records at ``positions`` under their (topic id, name), a row each."""
        for tid, name, seq, pos, hold in zip(
            tids.tolist(),
            names,
            seqs.tolist(),
            positions.tolist(),
            hold_until_ms.tolist(),
            strict=True,
        ):
            if pos in self._name_at:
                continue
            at = (tid, name)
            self._name_at[pos] = at
            self._by_name.setdefault(at, []).append(Entry(seq, pos, hold))

    def find(self, tid: int, name: bytes) -> list[Entry]:
        """The entries filed under (``tid``, ``name``), by position (see the module
        docstring: maybe others, and maybe of ended messages)."""
        got = self._by_name.get((tid, name), [])
        return sorted(got, key=lambda e: e.pos)

    def discard(self, positions: np.ndarray) -> None:
        """Drop the entries at these positions (if held)."""
        for pos in positions.tolist():
            self._drop(pos)

    def sweep(self, live: Callable[[np.ndarray], np.ndarray], now_ms: int) -> int:
        """Drop the entries whose message is not ``live`` (a bool per seq) and whose
        hold passed ``now_ms``; returns how many."""
        every = [e for entries in self._by_name.values() for e in entries]
        if not every:
            return 0
        seqs = np.array([e.seq for e in every], dtype=np.uint64)
        alive = live(seqs).tolist()
        gone = [
            e.pos for e, a in zip(every, alive, strict=True) if not a and e.hold_until_ms <= now_ms
        ]
        for pos in gone:
            self._drop(pos)
        return len(gone)

    def drop_from(self, end: int) -> None:
        """Forget records at or after ``end`` (the log was cut there)."""
        for pos in [p for p in self._name_at if p >= end]:
            self._drop(pos)

    def clear(self) -> None:
        self._by_name.clear()
        self._name_at.clear()

    def _drop(self, pos: int) -> None:
        at = self._name_at.pop(pos, None)
        if at is None:
            return
        left = [e for e in self._by_name[at] if e.pos != pos]
        if left:
            self._by_name[at] = left
        else:
            del self._by_name[at]
