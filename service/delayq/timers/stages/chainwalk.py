"""Walking a fired wheel slot's chain through the TimerLog (reads only, no lock).

A slot's TimerLog records form a list, newest first: each record's ``prev`` is
the position of the slot's record before it, -1 ending the list. Records linked
in one batch are adjacent in the file, so the list runs down through them: the
walk reads blocks of records and takes such runs whole, jumping between them.

Invariants it checks: every record on the list passes its magic and checksum and
names the slot; a link only ever points back. The first record that fails ends
the walk, reported with how many records it made unreachable. The records behind
a fired slot never change, so the walk needs no lock; it yields the GIL now and
then (see ``WALK_NAP_S``).
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable

import numpy as np

from ...batchops import join_rows
from ...formats.timer import CODEC as TIMER_CODEC
from ...formats.timer import RECORD_DTYPE as TIMER_DTYPE
from ...formats.timer import TIMER_RECORD_SIZE
from ...store.segments import SegmentedLog

__all__ = ["walk_chain"]

CHAIN_BLOCK = 2048  # TimerLog records read per block of a chain walk (~1 ms of the GIL)
# A chain walk holds the GIL for a few ms per fired slot; the release stage, whose
# messages are due meanwhile, and the server's event loop, handing them out, would
# wait for a forced GIL switch (5 ms): between blocks the walk naps this long
# whenever release is past its wake-up time, and after each WALK_SLICE_S it held.
WALK_NAP_S = 0.0001
WALK_SLICE_S = 0.0003


def walk_chain(
    log: SegmentedLog, slot: int, last: int, num: int, must_yield: Callable[[], bool]
) -> tuple[np.ndarray, list[tuple[int, str]]]:
    """The ``num`` TimerLog records of ``slot``'s chain ending at ``last``, newest
    first, and the problems found as (position, why). ``must_yield()``: whether
    another thread waits for the GIL with work due now (the walk naps at once)."""
    problems: list[tuple[int, str]] = []
    size = TIMER_RECORD_SIZE
    blocks: list[np.ndarray] = []
    seen = 0
    pos = last
    # records per read: doubled (to CHAIN_BLOCK) while a run reaches past a block;
    # after a jump, twice what the block held of the chain (its runs are short when
    # many slots were linked in each batch: reading 512 for 50 cost ~5 ms a slot)
    cap = 512
    # real time (not the Clock's): the walk shares the GIL by slices of CPU time
    nap_at = time.perf_counter() + WALK_SLICE_S
    while pos >= 0:
        seg = log.segment_at(pos)
        if (
            seg is None
            or (pos - seg.base) % size != (log.first_record_pos(seg.base) - seg.base) % size
        ):
            problems.append((pos, f"slot {slot}: no record there; {num - seen} unreachable"))
            break
        if must_yield() or time.perf_counter() >= nap_at:  # let others run
            time.sleep(WALK_NAP_S)
            nap_at = time.perf_counter() + WALK_SLICE_S
        want = max(1, min(num - seen, cap))
        start = max(pos - size * (want - 1), log.first_record_pos(seg.base))
        data = log.read(start, pos + size - start)
        block = np.frombuffer(data, dtype=TIMER_DTYPE)
        prevs = block["prev"]
        ok = TIMER_CODEC.valid(data, len(block)) & (block["slot"] == slot)
        # the chain runs down through records linked in one batch (each one's
        # prev is the record before it): walk such runs whole, jump between them
        down = np.zeros(len(block), dtype=bool)
        down[1:] = prevs[1:] == start + size * np.arange(len(block) - 1)
        stops = np.flatnonzero(~ok | ~down)  # never empty: down[0] is False
        ok_list, prev_list, stop_list = ok.tolist(), prevs.tolist(), stops.tolist()
        idx = (pos - start) // size
        bad = None
        seen_before = seen
        while True:
            low = stop_list[bisect.bisect_right(stop_list, idx) - 1]  # run is low..idx
            blocks.append(block[low + 1 : idx + 1][::-1])
            seen += idx - low
            if not ok_list[low]:
                idx = low
                bad = "checksum, magic or slot mismatch"
                break
            blocks.append(block[low : low + 1])
            seen += 1
            nxt = prev_list[low]
            if nxt >= start + low * size:  # a chain only ever points back
                idx = low
                bad = "link does not point back"
                break
            if nxt < start or (nxt - start) % size:
                if nxt == start - size:  # the run goes on below this block
                    cap = min(2 * cap, CHAIN_BLOCK)
                else:
                    cap = min(max(16, 2 * (seen - seen_before)), CHAIN_BLOCK)
                pos = nxt
                break
            idx = (nxt - start) // size
        if bad:
            problems.append((start + idx * size, f"slot {slot}: {bad}; {num - seen} unreachable"))
            break
    if not blocks:
        return np.empty(0, dtype=TIMER_DTYPE), problems
    return blocks[0] if len(blocks) == 1 else join_rows(blocks, TIMER_DTYPE), problems
