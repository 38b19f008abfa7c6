"""Repairs of what ``checks`` found (``delayq verify --fix``). Writes only what
can be derived again, and never cuts a valid record:

- a torn tail (bytes after the newest segment's last valid record that are no
  record) is cut, as recovery cuts it; a warm tail of zeros is left alone;
- a wheel slot that points past the valid TimerLog end or disagrees with its
  chain is cleared and rebuilt from the TimerLog's records of that slot, in file
  order (each record carries its slot and chain index: what recovery does for a
  slot left dangling by a power loss);
- a state byte still PENDING after a record before the checkpoint ended the
  message is set from that record;
- a damaged ``keys.idx`` (or one the log disagrees with) is deleted: the next
  start rebuilds the key indexes from the log;
- damage that only a replay of the whole CommitLog rebuilds (a corrupt or
  missing checkpoint, one past the logs' ends, a short or corrupt ready queue,
  a missing state chunk) sets the checkpoint aside (``checkpoint.json.bad``):
  the next start replays every record from the first, which is what a start
  without a checkpoint does. Only while the CommitLog is complete (retention
  deleted none of it): otherwise what a replay would need is gone, and nothing
  is done.

Not repaired, and said so: a damaged record with valid records after it (in
either log; cutting there would lose them), a wheel chain running into a
damaged TimerLog record, bad file headers and gaps between segments.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np

from ..formats.messagestate import state_of
from ..formats.timer import CODEC as TIMER_CODEC
from ..formats.timer import RECORD_DTYPE as TIMER_DTYPE
from ..formats.timer import TIMER_RECORD_SIZE
from ..store.logview import LogView
from ..store.timerlog import TimerLog
from ..store.wheel import TimerWheel
from ..timers.lifecycle.recovery import cut_after, relink
from .checker import Checker, LogFacts
from .checkpoint import CHECKPOINT
from .keyindex import repair as repair_keys
from .logs import timer_blocks

__all__ = ["SET_ASIDE", "repair"]

SET_ASIDE = CHECKPOINT + ".bad"
_READ_RECORDS = 1 << 16


def repair(c: Checker) -> None:
    """Repair what ``c`` (run, stores still open) found; mark each finding fixed or
    say in its ``action`` why not."""
    for f in c.report.findings:
        if f.damage and not f.fixable:
            f.action = "not repaired: see the detail"
    for log, facts in ((c.cl, c.cl_facts), (c.tl, c.tl_facts)):
        if log is not None:
            _cut_torn_tail(c, log, facts)
    if c.wheel is not None and c.tl is not None and c.rebuild_slots:
        counts = _rebuild_slots(c.wheel, c.tl, set(c.rebuild_slots))
        for slot, f in c.rebuild_slots.items():
            n = counts.get(slot, 0)
            f.fixed = True
            f.action = (
                f"rebuilt from its {n} TimerLog records"
                if n
                else "cleared: the TimerLog holds no record of it"
            )
    if c.states is not None:
        for f, m in c.mismatches:
            c.states.set(m.seq, m.state)
            f.fixed, f.action = True, f"set to {state_of(m.state).name}"
        c.states.flush()
        for f in c.report.findings:
            if f.kind == "state-leftover":
                f.fixed, f.action = True, "deleted (every entry of a retired chunk is done)"
    repair_keys(c)
    _replay(c)


def _cut_torn_tail(c: Checker, log: LogView, facts: LogFacts) -> None:
    """Cut the newest segment after its last valid record, keeping a warm tail of
    zeros if the cut falls in one (as recovery does)."""
    at = facts.torn_at
    if at is None:
        return
    before = log.end
    cut_after(log, at)
    for f in c.report.findings:
        if f.kind == "torn-tail" and f.file.startswith(log.what + "/"):
            f.fixed, f.action = True, f"cut at {at} ({before - at} bytes)"
    facts.valid_end, facts.torn_at = at, None


def _rebuild_slots(wheel: TimerWheel, tl: TimerLog, slots: set[int]) -> dict[int, int]:
    """Clear ``slots`` and link their TimerLog records into them again, in file
    order (``timers.lifecycle.recovery.relink``: a record with no prev starts the chain).
    Returns the records linked per slot."""
    for slot in slots:
        wheel.clear(slot)
    linked: dict[int, int] = {}
    for pos, rec in _valid_records(tl, slots):
        slot = int(rec["slot"])
        relink(wheel, pos, slot, int(rec["prev"]), int(rec["chain_index"]))
        linked[slot] = linked.get(slot, 0) + 1
    wheel.flush()
    return linked


def _valid_records(tl: TimerLog, slots: set[int]) -> Iterator[tuple[int, np.void]]:
    """Every valid TimerLog record of ``slots`` as (position, record), in file
    order, skipping damaged ones (unlike ``TimerLog.scan``, which stops there)."""
    size = TIMER_RECORD_SIZE
    wanted = np.array(sorted(slots), dtype=np.int64)
    for seg in tl.log.segments:
        for pos, data, n in timer_blocks(tl, seg, _READ_RECORDS * size):
            if not n:
                break
            block = np.frombuffer(data, dtype=TIMER_DTYPE, count=n)
            keep = TIMER_CODEC.valid(data, n) & np.isin(block["slot"], wanted)
            for i in np.flatnonzero(keep).tolist():
                yield pos + i * size, block[i]


def _replay(c: Checker) -> None:
    """Set the checkpoint aside for the findings a whole replay repairs."""
    todo = [f for f in c.needs_replay if f.damage]
    if not todo:
        return
    if not c.complete:
        for f in todo:
            f.action = (
                "not repaired: only a replay of the whole CommitLog rebuilds this, and "
                "retention has deleted its first segments"
            )
        return
    path = c.root / CHECKPOINT
    if path.exists():
        os.replace(path, c.root / SET_ASIDE)
        done = f"checkpoint set aside ({SET_ASIDE}): the next start replays the whole CommitLog"
    else:
        done = "nothing to write: the next start replays the whole CommitLog"
    for f in todo:
        f.fixed, f.action = True, done
