"""The key indexes at open and close: ``open_keys`` fills a shard's ``keys`` and
``dedups`` (``memory.keyindex``) once recovery brought its state map up to its
CommitLog: loaded from ``keys.idx`` (``store.keyfile``) when a clean close saved
it for the log's end as it is now, else built from the log; ``close_keys``
saves them at a clean close, after the last append (a failed save is logged and
leaves no file: the close goes on).

Built from the log: first the kept records of segments retention deleted (their
positions are below the segments', so the index is filed in rising order), read
``_KEPT_ROWS`` at a time, their fixed parts first and only the wanted ones
decoded whole (CRC checked); then one vectorised walk over every segment's
SCHEDULE records (their fixed parts, CRC unchecked, as an export's walk). A
record is wanted when it has a key or headers (a dedup id is one) and its
message is live (pending, or in a compaction block) or handed over to a joining
shard (``ShardState.key_held``: holding its key still), or has headers and was
accepted less than ``max_dedup_window_ms`` ago (a window in them may hold its
name still); of a segment's, only the keys and headers are cut out of its map
(no CRC, no body: every use of an entry reads its record whole and checks it).
Recovery's replay files nothing: the load or the build covers the whole log.
The build's work grows with the log; the load's with the index. The file is
deleted as it is loaded (a kill after the open finds none and builds).

Runs on a shard being opened (no other thread yet) or closed (lock held).
"""

from __future__ import annotations

import logging
import mmap
import time

import numpy as np

from ... import formats
from ...batchops import spans
from ...formats.commitlog import unchecked_schedules
from ...formats.message import MESSAGE_FIXED
from ...store.keyfile import load_keys, save_keys
from ..keyfiling import file_heads
from ..memory.keyindex import HASH_KIND, KeyIndex
from ..state import ShardState

__all__ = ["build_keys", "close_keys", "open_keys"]

log = logging.getLogger("delayq.engine")

_ROWS = 65536  # a segment's records filed at once: bounds the copies of keys and headers
_KEPT_ROWS = 128  # kept records read at once: bounds their copies (bodies: 128 x 256 KiB)


def open_keys(state: ShardState) -> None:
    """Fill the shard's key indexes: loaded if saved for this log's end, else built
    (``state.recovery["keys"]`` says which, ``["keys_seconds"]`` how long)."""
    started = time.perf_counter()  # real time (not the Clock's): the work's seconds
    data_dir = state.files.dir
    saved = load_keys(data_dir, state.cl.end, KeyIndex.filled, tables=2, hash_kind=HASH_KIND)
    if saved is not None:
        state.keys, state.dedups = saved
        state.recovery["keys"] = "loaded"
    else:
        state.keys.clear()
        state.dedups.clear()
        build_keys(state)
        state.recovery["keys"] = "built"
    state.recovery["keys_seconds"] = round(time.perf_counter() - started, 4)


def close_keys(state: ShardState) -> None:
    """Save the key indexes for the log's end (a clean close, after its last append).
    The file is derived: a failed save (a full disk) is logged and the close goes
    on, no file left (``write_atomic_with`` removes its temp file); the next open
    builds the indexes from the log."""
    data_dir = state.files.dir
    try:
        save_keys(data_dir, (state.keys, state.dedups), state.cl.end, state.clock.now_ms())
    except OSError as exc:
        log.warning(
            "key index not saved: the next open builds it from the log",
            extra={"data_dir": str(data_dir), "error": str(exc)},
        )


def build_keys(state: ShardState) -> int:
    """File every keyed SCHEDULE record of the log whose message may hold its name
    now; return how many records were decoded. The kept records go first: their
    positions are below the segments', so the index is filed in rising order."""
    since = state.clock.now_ms() - state.settings.max_dedup_window_ms
    log = state.cl.log
    decoded = _file_kept(state, since)
    for seg in log.segments:
        first = log.first_record_pos(seg.base)
        if seg.end <= first:
            continue
        with mmap.mmap(seg.fd, seg.end - seg.base, prot=mmap.PROT_READ) as view:
            offs, heads = unchecked_schedules(view, first - seg.base)
            rows = _wanted(state, heads, since)
            offs, heads = offs[rows], heads[rows]
            for i in range(0, len(offs), _ROWS):
                _file_raw(state, view, offs[i : i + _ROWS], heads[i : i + _ROWS], seg.base)
                decoded += min(_ROWS, len(offs) - i)
            del heads
    return decoded


def _file_kept(state: ShardState, since: int) -> int:
    """File the wanted kept records (of segments retention deleted), ``_KEPT_ROWS``
    at a time: their fixed parts read first (no key, headers or body decoded),
    then only the wanted ones decoded whole; return how many were."""
    positions, _ = state.cl.kept.below(state.cl.log.start)
    decoded = 0
    for i in range(0, len(positions), _KEPT_ROWS):
        part = positions[i : i + _KEPT_ROWS]
        heads = state.cl.read_scheduled(part, payload=False)
        want = part[_wanted(state, heads.heads, since) & heads.ok]
        if len(want):
            _file(state, state.cl.read_scheduled(want, payload=True), want)
            decoded += len(want)
    return decoded


def _wanted(state: ShardState, heads: np.ndarray, since: int) -> np.ndarray:
    """Rows with a key or headers whose message is live (or forwarded, holding
    its key: ``ShardState.key_held``), or that have headers (a window is one) and
    were accepted after ``since``."""
    has_headers = heads["headers_len"] > 0
    rows: np.ndarray = (heads["key_len"] > 0) | has_headers
    if rows.any():
        at = np.flatnonzero(rows)
        held = has_headers[at] & (heads["accepted_ms"][at] > since)
        rows[at] = state.key_held(heads["seq"][at]) | held
    return rows


def _file_raw(
    state: ShardState, view: mmap.mmap, offs: np.ndarray, heads: np.ndarray, base: int
) -> None:
    """File records of a segment's map at ``offs`` (their fixed parts ``heads``): the
    keys and headers cut straight from the map, no CRC checked, no body copied (an
    entry of a damaged record is harmless: every use confirms it by reading its
    record whole, CRC and all)."""
    at = offs + MESSAGE_FIXED
    key_end = at + heads["key_len"]
    keys = spans(view, at.tolist(), key_end.tolist())
    lengths = heads["headers_len"]
    headers = None
    if lengths.any():
        headers = spans(view, key_end.tolist(), (key_end + lengths).tolist())
    file_heads(state, heads, keys, headers, offs + base)


def _file(state: ShardState, cols: formats.MessageColumns, positions: np.ndarray) -> None:
    """File decoded records at ``positions``; skip damaged ones."""
    ok = cols.ok
    at = np.flatnonzero(ok).tolist()
    file_heads(
        state,
        cols.heads[ok],
        [cols.keys[i] for i in at],
        [cols.headers[i] for i in at],
        positions[ok],
    )
