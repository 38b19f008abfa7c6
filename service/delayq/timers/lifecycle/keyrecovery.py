"""The key indexes at open and close: ``open_keys`` fills a shard's ``keys`` and
``dedups`` (``memory.keyindex``) once recovery brought its state map up to its
CommitLog; ``close_keys`` is the matching hook at a clean close.

Built from the log: one vectorised walk over every segment's SCHEDULE records
(their fixed parts, CRC unchecked, as an export's walk), then the kept records
of segments retention deleted. A record is filed when it has a key or headers
(a dedup id is one) and its message is live (pending, or in a compaction block)
or was accepted less than ``max_dedup_window_ms`` ago (its window may hold its
name still); only those are decoded (CRC checked; a damaged one is skipped, as
recovery cut the torn tail already). Filing is idempotent, so the records the
replay filed already cost nothing more. The work grows with the log: the hook
is where a saved index file would be loaded instead (and written at close).

Runs on a shard being opened (no other thread yet) or closed (lock held).
"""

from __future__ import annotations

import mmap

import numpy as np

from ... import formats
from ...formats.commitlog import unchecked_schedules
from ..keyfiling import file_keyed
from ..state import ShardState

__all__ = ["build_keys", "close_keys", "open_keys"]

_ROWS = 65536  # records decoded at once: bounds the copies of keys, headers, bodies


def open_keys(state: ShardState) -> None:
    """Fill the shard's key indexes (the hook a saved index would load at)."""
    build_keys(state)


def close_keys(state: ShardState) -> None:
    """At a clean close (the hook a saved index would be written at): nothing yet."""


def build_keys(state: ShardState) -> int:
    """File every keyed SCHEDULE record of the log whose message may hold its name
    now; return how many records were decoded."""
    since = state.clock.now_ms() - state.settings.max_dedup_window_ms
    log = state.cl.log
    decoded = 0
    for seg in log.segments:
        first = log.first_record_pos(seg.base)
        if seg.end <= first:
            continue
        with mmap.mmap(seg.fd, seg.end - seg.base, prot=mmap.PROT_READ) as view:
            offs, heads = unchecked_schedules(view, first - seg.base)
            rows = _wanted(state, heads, since)
            offs = offs[rows]
            del heads
            for i in range(0, len(offs), _ROWS):
                part = offs[i : i + _ROWS]
                cols = formats.decode_messages(view, part, payload=True)
                _file(state, cols, part + seg.base)
                decoded += len(part)
                del cols
    positions, _ = state.cl.kept.below(log.start)
    if len(positions):
        cols = state.cl.read_scheduled(positions, payload=True)
        rows = np.flatnonzero(_wanted(state, cols.heads, since) & cols.ok)
        for i in range(0, len(rows), _ROWS):
            part = rows[i : i + _ROWS]
            _file(state, cols, positions[part], part)
            decoded += len(part)
    return decoded


def _wanted(state: ShardState, heads: np.ndarray, since: int) -> np.ndarray:
    """Rows with a key or headers whose message is live or accepted after ``since``."""
    named = (heads["key_len"] > 0) | (heads["headers_len"] > 0)
    rows: np.ndarray = named.copy()
    if rows.any():
        at = np.flatnonzero(rows)
        rows[at] = state.live(heads["seq"][at]) | (heads["accepted_ms"][at] > since)
    return rows


def _file(
    state: ShardState,
    cols: formats.MessageColumns,
    positions: np.ndarray,
    rows: np.ndarray | None = None,
) -> None:
    """File rows (None: all) of decoded records at ``positions``; skip damaged ones."""
    pick = np.arange(len(positions)) if rows is None else rows
    ok = cols.ok[pick]
    if not ok.all():
        pick, positions = pick[ok], positions[ok]
    heads = cols.heads[pick]
    at = pick.tolist()
    file_keyed(
        state.keys,
        state.dedups,
        heads["topic_id"].astype(np.int64),
        [cols.keys[i] for i in at],
        [cols.headers[i] for i in at],
        heads["seq"],
        positions.astype(np.int64),
        heads["accepted_ms"].astype(np.int64),
    )
