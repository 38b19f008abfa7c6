"""The saved key indexes (``keys.idx``, ``store.keyfile``) against the CommitLog's
keyed SCHEDULE records, entry by entry at their positions.

The file is derived (a start without it rebuilds the indexes from the log), so
every finding here is repaired by deleting it. Only a file saved for the log as
it is now is compared (a start loads no other: a file saved for another end, of
another hash or table count is a ``keys-stale`` note, deleted by the next start).

An index files, per table, SCHEDULE records (in the segments or kept past
retention) that have the table's name: table 0 its key, table 1 its dedup id;
an entry is (hash of topic id and name, seq, position, hold): the dedup id and
the hold (accepted_ms + the record's dedup window, or 0) as the engine files
them (``formats.keyheaders.holds_of``). Damage:

- ``keys-corrupt``: the file is short, of another kind, or fails its CRC;
- ``keys-mismatch``: entries out of position order (a start refuses them); an
  entry whose record says otherwise (at its position a SCHEDULE record without
  the table's name, or of another name, seq or hold), or one at or after the
  log's start where no SCHEDULE record begins; or a record the index must hold
  that it misses: one whose message is live (the state map: pending or blocked)
  or whose hold is not over. Entries of ended messages may be there or not (an
  index drops them as it sweeps, and a small one is never swept): one below
  the log's start whose record retention deleted (not kept) is no damage.

Bounded memory whatever the log's history: the saved columns (as the file holds
them) and a flag per entry, then the records a chunk at a time: their fixed
parts first (a segment's straight from its map, CRC unchecked as the engine's
build reads them; kept records decoded without payload), and the keys and
headers only of the records an entry is at or whose headers may hold a name
(cut from the map; kept records read again, a record at a time).
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Sequence

import numpy as np

from ..batchops import spans
from ..errors import CorruptData
from ..formats.commitlog import unchecked_schedules
from ..formats.keyheaders import holds_of
from ..formats.keyindex import Columns
from ..formats.message import MESSAGE_FIXED
from ..formats.messagestate import is_live
from ..store.commitlog import CommitLog
from ..store.datadir import KEYS
from ..store.keyfile import read_keys
from ..timers.memory.keyindex import HASH_KIND, hash_names
from .checker import Checker

__all__ = ["check", "repair"]

_TABLES = 2  # the engine's key index, then its dedup ids
_FIXABLE = ("keys-corrupt", "keys-mismatch")
_ROWS = 1 << 16  # records whose fixed parts are looked at at once
_KEPT_ROWS = 256  # kept records read at once (their bodies come along: at most 64 MiB)

Payload = Callable[[np.ndarray, np.ndarray], tuple[Sequence[bytes], Sequence[bytes]]]
"""The keys and encoded headers of records (their fixed parts, their positions)."""


class _Saved:
    """One saved table and what the walk found of it: a flag per entry met at
    its position, and the first wrong and missing positions with their counts."""

    def __init__(self, cols: Columns) -> None:
        self.hash, self.seq, self.pos, self.hold = cols
        self.met = np.zeros(len(self.pos), dtype=bool)
        self.wrong: list[int] = [0, -1]  # count, first position
        self.missing: list[int] = [0, -1]

    def rows_at(self, positions: np.ndarray) -> np.ndarray:
        """The entry at each position, -1 for none."""
        if not len(self.pos):
            return np.full(len(positions), -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.pos, positions), len(self.pos) - 1)
        return np.where(self.pos[at] == positions, at, -1)

    @staticmethod
    def note(tally: list[int], positions: np.ndarray) -> None:
        if len(positions):
            first = int(positions.min())
            tally[1] = min(tally[1], first) if tally[0] else first
            tally[0] += len(positions)

    def why(self, log_start: int, kept: np.ndarray) -> str:
        """Why this table is wrong ("" if it is not), once every record was met."""
        unmet = self.pos[~self.met]
        # below the log's start, a record no longer kept (retention deleted it)
        # leaves no trace to compare with: the entry is of an ended message
        self.note(self.wrong, unmet[(unmet >= log_start) | np.isin(unmet, kept)])
        if self.wrong[0]:
            return (
                f"{self.wrong[0]} entries no keyed SCHEDULE record gives (first at "
                f"position {self.wrong[1]})"
            )
        if self.missing[0]:
            return (
                f"{self.missing[0]} keyed messages still holding their name are not "
                f"in it (first at position {self.missing[1]})"
            )
        return ""


def check(c: Checker) -> None:
    try:
        got = read_keys(c.root)
    except (CorruptData, OSError) as exc:
        c.add(KEYS, "keys-corrupt", None, str(exc), fixable=True)
        return
    if got is None or c.cl is None:
        return
    head, tables = got
    c.report.file(KEYS).facts.update(entries=list(head.counts), log_end=head.log_end)
    end = c.cl_facts.valid_end
    if head.log_end != end or head.hash_kind != HASH_KIND or len(tables) != _TABLES:
        c.add(
            KEYS,
            "keys-stale",
            None,
            f"saved for a CommitLog ending at {head.log_end} (hash {head.hash_kind}, "
            f"{len(tables)} tables); it ends at {end}: the next start rebuilds the "
            "indexes from the log and deletes the file",
            fixable=False,
            damage=False,
        )
        return
    for t, cols in enumerate(tables):
        pos = cols[2]
        if len(pos) > 1 and bool((pos[1:] <= pos[:-1]).any()):
            c.add(
                KEYS,
                "keys-mismatch",
                None,
                f"table {t}: entries out of position order",
                fixable=True,
            )
            return
    saved = [_Saved(cols) for cols in tables]
    kept = _walk(c, c.cl, saved)
    for t, table in enumerate(saved):
        why = table.why(c.cl.log.start, kept)
        if why:
            c.add(KEYS, "keys-mismatch", None, f"table {t}: {why}", fixable=True)


def repair(c: Checker) -> None:
    """Delete a damaged file (the next start rebuilds the indexes)."""
    found = [f for f in c.report.findings if f.kind in _FIXABLE]
    if found:
        (c.root / KEYS).unlink(missing_ok=True)
    for f in found:
        f.fixed, f.action = True, "deleted: the next start rebuilds the indexes from the log"


def _walk(c: Checker, cl: CommitLog, saved: list[_Saved]) -> np.ndarray:
    """Meet every SCHEDULE record with ``saved``: the kept ones, then each segment's
    up to the valid end. Returns the positions of the kept records read whole (a
    damaged one is no entry's to judge)."""
    log = cl.log
    kept, _ = cl.kept.below(log.start)
    whole = np.zeros(len(kept), dtype=bool)

    def read(h: np.ndarray, positions: np.ndarray) -> tuple[list[bytes], list[bytes]]:
        raws = cl.kept.read_many(positions.tolist())  # each record alone: no joined copy
        at = [MESSAGE_FIXED + k for k in h["key_len"].tolist()]
        ends = [a + x for a, x in zip(at, h["headers_len"].tolist(), strict=True)]
        keys = [r[MESSAGE_FIXED:a] for r, a in zip(raws, at, strict=True)]
        return keys, [r[a:b] for r, a, b in zip(raws, at, ends, strict=True)]

    for i in range(0, len(kept), _KEPT_ROWS):
        part = kept[i : i + _KEPT_ROWS]
        cols = cl.read_scheduled(part, payload=False)
        whole[i : i + _KEPT_ROWS] = cols.ok
        _meet(c, saved, cols.heads[cols.ok], part[cols.ok], read)
    for seg in log.segments:
        first = log.first_record_pos(seg.base) - seg.base
        size = min(seg.end, c.cl_facts.valid_end) - seg.base
        if size <= first:
            continue
        with mmap.mmap(seg.fd, size, prot=mmap.PROT_READ) as view:
            offs, heads = unchecked_schedules(view, first)

            def cut(
                h: np.ndarray, positions: np.ndarray, base: int = seg.base, view: mmap.mmap = view
            ) -> tuple[list[bytes], list[bytes]]:
                at = positions - base + MESSAGE_FIXED  # cut from the map: no CRC, no body
                key_end = at + h["key_len"]
                keys = spans(view, at.tolist(), key_end.tolist())
                headers = spans(view, key_end.tolist(), (key_end + h["headers_len"]).tolist())
                return list(keys), list(headers)

            for i in range(0, len(offs), _ROWS):
                positions = offs[i : i + _ROWS].astype(np.int64) + seg.base
                _meet(c, saved, heads[i : i + _ROWS], positions, cut)
            del heads
    return kept[whole]


def _meet(
    c: Checker, saved: list[_Saved], heads: np.ndarray, positions: np.ndarray, payload: Payload
) -> None:
    """Meet records (their fixed parts ``heads``, at ``positions``) with each saved
    table: an entry at a record's position must be what the record files; a record
    that holds a name (its message live, or its hold not over) must have one. The
    keys and headers are read (``payload``) only of the records an entry is at or
    whose headers may hold a name or a window."""
    named = (heads["key_len"] > 0) | (heads["headers_len"] > 0)
    rows = np.flatnonzero(named)
    if not len(rows):
        return
    heads, positions = heads[rows], positions[rows]
    n = len(rows)
    live = np.zeros(n, dtype=bool)
    if c.states is not None:
        live = is_live(c.states.raw_many(heads["seq"]))
    found = [s.rows_at(positions) for s in saved]
    pick = np.flatnonzero(
        (heads["headers_len"] > 0) | np.logical_or.reduce([f >= 0 for f in found])
    )
    keys: list[bytes] = [b""] * n
    headers: list[bytes] = [b""] * n
    if len(pick):
        got_keys, got_headers = payload(heads[pick], positions[pick])
        for j, k, h in zip(pick.tolist(), got_keys, got_headers, strict=True):
            keys[j], headers[j] = bytes(k), bytes(h)
    holds, dedup_ids = holds_of(headers, n)
    held = live | (holds > c.now_ms)
    tids = heads["topic_id"]
    has_id = np.array([bool(d) for d in dedup_ids], dtype=bool)
    for table, at, names, has in zip(
        saved, found, (keys, dedup_ids), (heads["key_len"] > 0, has_id), strict=True
    ):
        hit = np.flatnonzero(at >= 0)
        entry = at[hit]
        table.met[entry] = True
        same = (
            has[hit]
            & (table.hash[entry] == hash_names(tids[hit], [names[i] for i in hit.tolist()]))
            & (table.seq[entry] == heads["seq"][hit])
            & (table.hold[entry] == holds[hit])
        )
        table.note(table.wrong, positions[hit[~same]])
        table.note(table.missing, positions[has & held & (at < 0)])
