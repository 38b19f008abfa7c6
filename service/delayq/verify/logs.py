"""The CommitLog and the TimerLog: their segments, every record to the end, the
tail of each segment, and the CommitLog's kept records.

Each segment's header must carry the base its name says, and the segments must
follow each other (``gap``); a log whose segments do not is not walked. Then
every record's frame and CRC (TimerLog: magic and check) from the first record
of each segment to its end (``frames`` walks the CommitLog past damage):

- a bad record with valid records after it is ``corrupt-record`` damage, never
  repaired (cutting there would lose them); the detail says whether a start
  would cut there (at or after the checkpoint's replay start) or a read of it
  is quarantined (before it). A sealed segment ending in bytes that are no
  record is the same;
- bad bytes after the newest segment's last valid record are a ``torn-tail``
  (damage the fix cuts, as recovery does);
- zeros there are a kill's ``warm-tail``: a note, not damage.

The walk collects what later checks need: the valid ends (``LogFacts``), each
segment's top seq (the checkpoint's next_seq), the records that ended a message
(the state map). Kept records (``commitlog/kept``) get their headers checked
and must open (``unreadable`` otherwise).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

import numpy as np

from .. import formats
from ..errors import CorruptData
from ..formats.fileheader import HEADER_SIZE
from ..formats.kept import MAGIC as KEPT_MAGIC
from ..formats.timer import CODEC as TIMER_CODEC
from ..formats.timer import TIMER_RECORD_SIZE
from ..store.commitlog import MAGIC as CL_MAGIC
from ..store.commitlog import CommitLog
from ..store.datadir import COMMITLOG
from ..store.keptrecords import KeptRecords
from ..store.logview import LogView
from ..store.segment import Segment
from ..store.timerlog import MAGIC as TL_MAGIC
from ..store.timerlog import TimerLog
from .checker import Checker, LogFacts
from .frames import READ, frames
from .statemap import ended_by

__all__ = ["check", "timer_blocks"]

_Log = TypeVar("_Log", bound=LogView)
_SHOWN = 20  # damaged timer records named one by one per segment


def check(c: Checker) -> None:
    """Open both logs into ``c`` and walk them (and the kept records)."""
    c.cl = _open(c, CommitLog, COMMITLOG, CL_MAGIC)
    c.tl = _open(c, TimerLog, "timerlog", TL_MAGIC)
    if c.cl is not None:
        segs = c.cl.log.segments
        c.complete = not segs or segs[0].base == 0
        _walk_commitlog(c, c.cl)
        _kept(c)
    if c.tl is not None:
        _walk_timerlog(c, c.tl)


def timer_blocks(tl: TimerLog, seg: Segment, read: int) -> Iterator[tuple[int, bytes, int]]:
    """One TimerLog segment in reads of up to ``read`` bytes, from its first record:
    (position, the bytes, how many whole records they hold). Ends after a read
    that holds none (a partial record at the end of the file)."""
    size = TIMER_RECORD_SIZE
    pos = tl.log.first_record_pos(seg.base)
    while pos < seg.end:
        data = tl.log.read(pos, min(read, seg.end - pos))
        n = len(data) // size
        yield pos, data, n
        if not n:
            return
        pos += n * size


def _open(c: Checker, kind: type[_Log], name: str, magic: bytes) -> _Log | None:
    folder = c.root / name
    if not folder.is_dir():
        c.add(name, "missing", None, f"no {name}/ folder", fixable=False)
        return None
    fine = True
    for path in sorted(folder.glob("*.seg")):
        if c.named_header(path, magic, 20, "header base {base} != its name") is None:
            fine = False
    if not fine:
        return None
    try:
        return kind(folder, 1 << 40)  # segment size only matters to appends: none here
    except CorruptData as exc:  # segments that do not follow each other
        c.add(name, "gap", None, str(exc), fixable=False)
        return None


def _seg_name(log: LogView, seg: Segment) -> str:
    return f"{log.what}/{seg.base:020d}.seg"


def _walk_commitlog(c: Checker, cl: CommitLog) -> None:
    facts = c.cl_facts
    # where the next start replays from: a bad record past it is where it cuts
    replay = 0 if c.ckpt is None else min(c.ckpt.replay_from, c.ckpt.applied_end)
    segs = cl.log.segments
    facts.valid_end = HEADER_SIZE
    for i, seg in enumerate(segs):
        name = _seg_name(cl, seg)
        count, top = 0, -1
        last_good = cl.log.first_record_pos(seg.base)
        bad: list[tuple[int, str]] = []
        for pos, got, length in frames(cl, seg):
            if isinstance(got, CorruptData):
                bad.append((pos, str(got)))
                continue
            count += 1
            last_good = pos + length
            c.ended += ended_by(pos, got)
            if isinstance(got, formats.Message):
                top = max(top, got.seq)
            elif isinstance(got, formats.Block) and (c.ckpt is None or pos >= c.ckpt.applied_end):
                c.blocked_in_log += got.heads["seq"].tolist()  # replayed into a block file
        if top >= 0:
            c.max_seq.append((last_good, top))
        facts.records += count
        c.report.file(name).facts.update(records=count, bytes=seg.end - seg.base)
        newest = i == len(segs) - 1
        if newest:
            facts.valid_end = last_good
        middle = [(p, why) for p, why in bad if p < last_good]
        facts.bad += len(middle)
        for pos, why in middle:
            after = sum(1 for p, _ in bad if p > pos)
            c.add(
                name,
                "corrupt-record",
                pos,
                f"{why}; valid records follow it, so it is not cut"
                + (
                    " (a start replays from before it and would cut the log here, "
                    "dropping every record after it: keep a copy of the directory)"
                    if pos >= replay
                    else " (before the checkpoint's replay start: a read of it is quarantined)"
                )
                + (f"; {after} more bad spots after it" if after else ""),
                fixable=False,
            )
            break  # one per segment: the rest follow from it
        if seg.end > last_good:
            tail = [p for p, _ in bad if p >= last_good]
            _tail(c, cl, seg, newest, last_good, tail[0] if tail else last_good, facts)


def _walk_timerlog(c: Checker, tl: TimerLog) -> None:
    facts = c.tl_facts
    segs = tl.log.segments
    size = TIMER_RECORD_SIZE
    for i, seg in enumerate(segs):
        newest = i == len(segs) - 1
        name = _seg_name(tl, seg)
        last_good, bad, count = tl.log.first_record_pos(seg.base), [], 0
        for pos, data, n in timer_blocks(tl, seg, READ):
            ok = TIMER_CODEC.valid(data, n) if n else np.zeros(0, dtype=bool)
            good = np.flatnonzero(ok)
            if len(good):
                last_good = pos + (int(good[-1]) + 1) * size
            count += len(good)
            bad += (pos + np.flatnonzero(~ok) * size).tolist()
            if n * size < len(data):  # a partial record at the end of the file
                bad.append(pos + n * size)
        facts.records += count
        c.report.file(name).facts.update(records=count, bytes=seg.end - seg.base)
        if newest:
            facts.valid_end = last_good
        middle = [p for p in bad if p < last_good]
        facts.bad += len(middle)
        for p in middle[:_SHOWN]:
            c.add(
                name,
                "corrupt-record",
                p,
                "timer record fails its magic/check; valid records follow it (not cut)",
                fixable=False,
            )
        if len(middle) > _SHOWN:
            c.add(
                name,
                "corrupt-record",
                middle[_SHOWN],
                f"{len(middle) - _SHOWN} more damaged timer records",
                fixable=False,
            )
        if seg.end > last_good:
            tail = [p for p in bad if p >= last_good]
            _tail(c, tl, seg, newest, last_good, tail[0] if tail else last_good, facts)
    if not segs:
        facts.valid_end = HEADER_SIZE


def _tail(
    c: Checker,
    log: LogView,
    seg: Segment,
    newest: bool,
    last_good: int,
    first_bad: int,
    facts: LogFacts,
) -> None:
    """Name what lies after the segment's last valid record (``last_good``), given
    that the first bad spot at or after it is ``first_bad``."""
    name = _seg_name(log, seg)
    if newest:
        zeros = log.log.warm_tail(last_good)
    else:
        rest = log.log.read(last_good, seg.end - last_good)
        zeros = len(rest) - len(rest.rstrip(b"\0"))
    data = seg.end - last_good - zeros
    if data <= 0:
        if zeros and newest:
            c.add(
                name,
                "warm-tail",
                last_good,
                f"{zeros} bytes of zeros after the last record (normal after a kill)",
                fixable=False,
                damage=False,
            )
        elif zeros:
            c.add(
                name,
                "corrupt-record",
                last_good,
                f"{zeros} bytes of zeros end a sealed segment: a start cuts the log here, "
                "and every later segment with it",
                fixable=False,
            )
        return
    if newest:
        facts.torn_at = last_good
        c.add(
            name,
            "torn-tail",
            first_bad,
            f"{data} bytes after the last valid record at {last_good} are no record "
            "(a write cut short)",
            fixable=True,
        )
    else:
        c.add(
            name,
            "corrupt-record",
            first_bad,
            f"{data} bytes of a sealed segment after its last valid record at {last_good} "
            "are no record; later segments hold valid ones (not cut)",
            fixable=False,
        )


def _kept(c: Checker) -> None:
    folder = c.root / COMMITLOG / "kept"
    if not folder.is_dir():
        return
    fine = True
    for path in sorted(folder.glob("*.kept")):
        head = c.named_header(path, KEPT_MAGIC, 20, "header base != name")
        if head is None:
            fine = False
        else:
            c.report.file(c.rel(path)).facts["records"] = head.param
    if fine:
        try:
            KeptRecords(folder)
        except (CorruptData, OSError) as exc:
            c.add("commitlog/kept", "unreadable", None, str(exc), fixable=False)
