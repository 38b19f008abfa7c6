"""Filing keyed SCHEDULE records in a shard's two key indexes
(``memory.keyindex``): ``keys`` by (topic id, key) and ``dedups`` by (topic id,
dedup id), each entry with until when it holds its name after its message ended
(the record's ``delayq-dedup-until``: ``formats.keyheaders``).

``KeySweep`` drops the entries of ended messages whose hold passed (a message
handed over to a joining shard has not ended here: ``ShardState.key_held``), from the
checkpoint (the flush thread), under the shard's lock: at most
``KEY_SWEEP_ROWS`` rows of each index a pass (``KeyIndex.sweep``'s ``limit``,
from where the last pass stopped), so its reading stays short whatever the
index's size (the compaction it may trigger does not: ``docs/engine.md``, Known
limits); an index of ``KEY_SWEEP_FLOOR`` entries or fewer is left as it is (its
stale entries cost little: callers skip them by the state map).

One function, ``file_keyed``, for every way a record comes to exist:
accepted (``stages.accept``), built at open (``lifecycle.keyrecovery``, after
recovery's replay), applied from a master's chunk (``lifecycle.replicated``):
so an index holds the same entries on a master, on its replicas and after a
restart (``file_heads``: the same, by records' decoded fixed parts, for the
build and a replica's chunks). Filing a position twice is a no-op.

Not thread-safe: called with the shard's lock held (or on a shard not yet open).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from ..formats.keyheaders import holds_of
from .memory.keyindex import KeyIndex

__all__ = [
    "HEADS",
    "KEY_SWEEP_FLOOR",
    "KEY_SWEEP_ROWS",
    "Indexes",
    "KeySweep",
    "NameHashes",
    "file_heads",
    "file_keyed",
    "hashes_of",
]

NameHashes = tuple[np.ndarray | None, np.ndarray | None]
"""A batch's keys and dedup ids hashed as its ``KeyIndex``es file them (one per
row, each column or None: not hashed yet)."""


def hashes_of(hashes: NameHashes, rows: np.ndarray) -> NameHashes:
    """``hashes`` of ``rows`` only (positions, or a mask)."""
    keys, dedups = hashes
    return (None if keys is None else keys[rows], None if dedups is None else dedups[rows])


KEY_SWEEP_FLOOR = 4096
"""An index this small is not swept."""
KEY_SWEEP_ROWS = 1 << 20
"""Rows of an index one checkpoint's sweep looks at (a few ms of numpy): 10M
entries are passed in ten checkpoints (ten seconds at the default interval)."""


def file_keyed(
    keys: KeyIndex,
    dedups: KeyIndex,
    tids: np.ndarray | int | Sequence[int],
    names: Sequence[bytes] | Sequence[str] | None,
    headers: Sequence[bytes] | None,
    seqs: np.ndarray,
    positions: np.ndarray,
    hashes: NameHashes = (None, None),
) -> None:
    """File the records at ``positions`` (their topic ids, keys (bytes, or str as
    decoded; None: all empty), encoded headers (None: all empty) and seqs) that
    have a key or a dedup id. ``hashes``: each row's key and dedup id as hashed
    by ``keys.hashes`` and ``dedups.hashes``, where the caller has them."""
    n = len(positions)
    if not n or (names is None and headers is None):
        return
    holds, dedup_ids = holds_of(headers, n)
    t = np.asarray(tids, dtype=np.int64)
    if t.ndim == 0:  # one topic for all
        t = np.full(n, t, dtype=np.int64)
    seqs, positions = np.asarray(seqs), np.asarray(positions)
    cols: tuple[tuple[KeyIndex, Sequence[bytes] | Sequence[str] | None, np.ndarray | None], ...] = (
        (keys, names, hashes[0]),
        (dedups, None if headers is None else dedup_ids, hashes[1]),
    )
    for index, col, hashed in cols:
        if col is None:
            continue
        if all(col):  # every row named (the usual keyed batch): no step a row
            named = col if isinstance(col[0], bytes) else [_bytes(v) for v in col]
            index.add(t, named, seqs, positions, holds, hashes=hashed)  # type: ignore[arg-type]
            continue
        rows = [i for i, name in enumerate(col) if name]
        if rows:
            r = np.array(rows, dtype=np.int64)
            index.add(
                t[r],
                [_bytes(col[i]) for i in rows],
                seqs[r],
                positions[r],
                holds[r],
                hashes=None if hashed is None else hashed[r],
            )


HEADS = np.dtype([("topic_id", "<i8"), ("seq", "<u8")])
"""The fields of a record's fixed part ``file_heads`` reads (a decoded head has
them among others)."""


class Indexes(Protocol):
    """A shard's two key indexes (``ShardState``'s)."""

    keys: KeyIndex
    dedups: KeyIndex


def file_heads(
    into: Indexes,
    heads: np.ndarray,
    names: Sequence[bytes] | Sequence[str] | None,
    headers: Sequence[bytes] | None,
    positions: np.ndarray,
) -> None:
    """``file_keyed`` into ``into``'s indexes of the records at ``positions``, by
    their fixed parts ``heads`` (fields of ``HEADS``), keys and encoded headers."""
    file_keyed(
        into.keys,
        into.dedups,
        heads["topic_id"].astype(np.int64),
        names,
        headers,
        heads["seq"],
        positions.astype(np.int64),
    )


def _bytes(name: bytes | str) -> bytes:
    return name.encode() if isinstance(name, str) else bytes(name)


class KeySweep:
    """The checkpoint's sweep of the key indexes (see the module docstring). Not
    thread-safe: run with the shard's lock held."""

    def __init__(self, rows: int = KEY_SWEEP_ROWS) -> None:
        self._rows = rows

    def run(
        self, indexes: Sequence[KeyIndex], live: Callable[[np.ndarray], np.ndarray], now: int
    ) -> int:
        """Sweep a bounded part of each index; return how many entries went."""
        return sum(
            index.sweep(live, now, limit=self._rows)
            for index in indexes
            if len(index) > KEY_SWEEP_FLOOR
        )
