"""The TimerWheel (``timerwheel``): its slots against the TimerLog.

Every occupied slot must point inside the valid TimerLog (what recovery
rebuilds): one that points past its end is ``slot-past-end``. Every slot not
yet fired (at or after the checkpoint's scan slot, its records not deleted by
retention) has its chain walked from its head, as the scan does
(``timers.stages.chainwalk``): it must end at the slot's first record with the slot's
count (``slot-mismatch`` otherwise). Both are damage the fix rebuilds from the
slot's TimerLog records. A chain that runs into a damaged or foreign record is
``chain-broken``: damage not repaired (its messages' CommitLog records are
untouched). A missing wheel is damage only where the TimerLog holds records.
"""

from __future__ import annotations

import numpy as np

from ..errors import CorruptData
from ..store.datadir import TIMERWHEEL as WHEEL
from ..store.wheel import MAGIC as WHEEL_MAGIC
from ..store.wheel import TimerWheel
from ..timers.stages.chainwalk import walk_chain
from .checker import Checker

__all__ = ["check"]


def check(c: Checker) -> None:
    """Open the wheel into ``c.wheel`` and check its slots against the walked TimerLog."""
    path = c.root / WHEEL
    if not path.exists():
        if c.tl is not None and c.tl_facts.records:
            c.add(WHEEL, "missing", None, "no timerwheel file", fixable=False)
        return
    head = c.header(path, WHEEL_MAGIC)
    if head is None:
        return
    try:
        c.wheel = TimerWheel(path, head.base, head.param, c.now_ms)
    except (CorruptData, OSError) as exc:
        c.add(WHEEL, "bad-header", 0, str(exc), fixable=False)
        return
    rep = c.report.file(WHEEL)
    tl = c.tl
    if tl is None:
        return
    end = c.tl_facts.valid_end
    start = tl.log.start
    scan_from = -1 if c.ckpt is None else c.ckpt.scan_from_slot
    occupied = walked = 0
    for slot, e in c.wheel.occupied():
        occupied += 1
        if e.last >= end or e.first >= end:
            c.rebuild_slots[slot] = c.add(
                WHEEL,
                "slot-past-end",
                slot,
                f"slot {slot} (first {e.first}, last {e.last}, {e.num} records) points "
                f"past the valid TimerLog end {end}",
                fixable=True,
            )
            continue
        if slot < scan_from or e.first < start:
            continue  # fired: never read again (retention may have taken its records)
        walked += 1
        chain, problems = walk_chain(tl.log, slot, e.last, e.num, _never)
        if problems:
            pos, why = problems[0]
            c.add(
                WHEEL,
                "chain-broken",
                slot,
                f"{why} (TimerLog position {pos}); the messages behind it are unreachable "
                "from the wheel (their CommitLog records are untouched)",
                fixable=False,
            )
            continue
        oldest = _oldest_position(chain, e.last)
        counted = chain["chain_index"].tolist() == list(range(e.num - 1, -1, -1))
        if len(chain) != e.num or not counted or oldest != e.first:
            c.rebuild_slots[slot] = c.add(
                WHEEL,
                "slot-mismatch",
                slot,
                f"slot {slot} says first {e.first}, {e.num} records; its chain has "
                f"{len(chain)} from {oldest}",
                fixable=True,
            )
    rep.facts.update(slots=head.base, precision_ms=head.param, occupied=occupied, walked=walked)


def _never() -> bool:
    return False


def _oldest_position(chain: np.ndarray, last: int) -> int:
    """The TimerLog position of a walked chain's oldest record: the record the
    one before it links to (``prev``), or ``last`` for a chain of one."""
    if len(chain) <= 1:
        return last
    return int(chain["prev"][-2])
