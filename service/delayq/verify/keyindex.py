"""The saved key indexes (``keys.idx``, ``store.keyfile``) against the CommitLog's
keyed SCHEDULE records: what a rebuild from the log would file.

The file is derived (a start without it rebuilds the indexes from the log), so
every finding here is repaired by deleting it. Only a file saved for the log as
it is now is compared (a start loads no other: a file saved for another end, of
another hash or table count is a ``keys-stale`` note, deleted by the next start).

A rebuild files, per table, every SCHEDULE record (in the segments or kept past
retention) that has the table's name: table 0 its key, table 1 its dedup id;
an entry is (hash of topic id and name, seq, position, hold): the dedup id and
the hold (accepted_ms + the record's dedup window, or 0) as the engine files
them (``formats.keyheaders.holds_of``). Damage:

- ``keys-corrupt``: the file is short, of another kind, or fails its CRC;
- ``keys-mismatch``: an entry that no such record gives (another position,
  seq, name or hold), or a record the index must hold that it misses: one whose
  message is live (the state map: pending or blocked) or whose hold is not over.
  Entries of ended messages whose hold is over may be there or not (an index
  drops them as it sweeps).
"""

from __future__ import annotations

from array import array

import numpy as np

from .. import formats
from ..errors import CorruptData
from ..formats.keyheaders import holds_of
from ..formats.keyindex import Columns
from ..formats.messagestate import is_live
from ..store.datadir import KEYS
from ..store.keyfile import read_keys
from ..timers.memory.keyindex import HASH_KIND, hash_names
from .checker import Checker

__all__ = ["check", "repair"]

_TABLES = 2  # the engine's key index, then its dedup ids
_FIXABLE = ("keys-corrupt", "keys-mismatch")
_BATCH = 1 << 16  # records whose holds are read at once


class _Rows:
    """A table's rows as a rebuild gives them (compact: 28 bytes a row)."""

    def __init__(self) -> None:
        self.tids = array("I")
        self.names: list[bytes] = []
        self.seqs = array("Q")
        self.pos = array("q")
        self.holds = array("q")

    def add(self, tid: int, name: bytes, seq: int, pos: int, hold: int) -> None:
        self.tids.append(tid)
        self.names.append(name)
        self.seqs.append(seq)
        self.pos.append(pos)
        self.holds.append(hold)

    def columns(self) -> Columns:
        tids = np.frombuffer(self.tids, dtype=np.uint32)
        return (
            hash_names(tids, self.names),
            np.frombuffer(self.seqs, dtype=np.uint64),
            np.frombuffer(self.pos, dtype=np.int64),
            np.frombuffer(self.holds, dtype=np.int64),
        )


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
    for t, (saved, rebuilt) in enumerate(zip(tables, _rebuild(c), strict=True)):
        why = _compare(c, saved, rebuilt)
        if why:
            c.add(KEYS, "keys-mismatch", None, f"table {t}: {why}", fixable=True)


def repair(c: Checker) -> None:
    """Delete a damaged file (the next start rebuilds the indexes)."""
    found = [f for f in c.report.findings if f.kind in _FIXABLE]
    if found:
        (c.root / KEYS).unlink(missing_ok=True)
    for f in found:
        f.fixed, f.action = True, "deleted: the next start rebuilds the indexes from the log"


def _rebuild(c: Checker) -> list[Columns]:
    """Each table's rows from the CommitLog's SCHEDULE records, by position."""
    cl = c.cl
    assert cl is not None
    rows = [_Rows() for _ in range(_TABLES)]
    kept, _ = cl.kept.below(cl.log.start)
    records = [(p, r) for p, r in zip(kept.tolist(), cl.read_many(kept.tolist()), strict=True)]
    batch: list[tuple[int, formats.Message]] = []
    for pos, rec in records + [(p, r) for p, r, _ in cl.scan(cl.log.start)]:
        if isinstance(rec, formats.Message) and rec.type == formats.RecordType.SCHEDULE:
            batch.append((pos, rec))
            if len(batch) == _BATCH:
                _file(rows, batch)
                batch = []
    _file(rows, batch)
    return [r.columns() for r in rows]


def _file(rows: list[_Rows], batch: list[tuple[int, formats.Message]]) -> None:
    """File a batch of SCHEDULE records (position, record) in ``rows``."""
    accepted = np.array([r.accepted_ms for _, r in batch], dtype=np.int64)
    holds, dedup_ids = holds_of(accepted, [r.headers for _, r in batch], len(batch))
    for (pos, rec), hold, dedup_id in zip(batch, holds.tolist(), dedup_ids, strict=True):
        for table, name in enumerate((rec.key.encode(), dedup_id)):
            if name:
                rows[table].add(rec.topic_id, name, rec.seq, pos, hold)


def _compare(c: Checker, saved: Columns, rebuilt: Columns) -> str:
    """Why ``saved`` is not what the index may hold of ``rebuilt`` ("" if it is)."""
    s_hash, s_seq, s_pos, s_hold = saved
    r_hash, r_seq, r_pos, r_hold = rebuilt
    at = np.minimum(np.searchsorted(r_pos, s_pos), max(len(r_pos) - 1, 0))
    if len(r_pos):
        same = (
            (r_pos[at] == s_pos)
            & (r_hash[at] == s_hash)
            & (r_seq[at] == s_seq)
            & (r_hold[at] == s_hold)
        )
    else:
        same = np.zeros(len(s_pos), dtype=bool)
    if not same.all():
        bad = np.flatnonzero(~same)
        return (
            f"{len(bad)} entries no keyed SCHEDULE record gives (first at position "
            f"{int(s_pos[bad[0]])})"
        )
    held = r_hold > c.now_ms
    if c.states is not None:
        held |= is_live(c.states.raw_many(r_seq))
    missing = np.flatnonzero(held & ~np.isin(r_pos, s_pos))
    if len(missing):
        return (
            f"{len(missing)} keyed messages still holding their name are not in it "
            f"(first at position {int(r_pos[missing[0]])})"
        )
    return ""
