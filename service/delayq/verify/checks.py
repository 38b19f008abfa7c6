"""The checks of a data directory (reads only; ``fix`` repairs what they found).

Every file is opened through its ``store`` class, so the checks follow the
formats wherever their codecs live. What is checked, file by file:

- every file: its 32-byte header (magic, version, base against its name, the
  shape the other files imply); a file of unknown kind is left alone;
- CommitLog and TimerLog segments: each record's frame and CRC (TimerLog: magic
  and check) from the first record to the end. A bad record with valid records
  after it is ``corrupt-record``; bad bytes after the newest segment's last
  valid record are a ``torn-tail``; zeros there are a kill's ``warm-tail`` (a
  note, not damage);
- the TimerWheel: every occupied slot against the valid TimerLog end (what
  recovery rebuilds, ``slot-past-end``), and every slot not yet fired (at or
  after the checkpoint's scan slot): its chain walked from its head (as the scan
  does, ``engine.chainwalk``) must end at its first record with its count;
- the checkpoint: present, readable, and not past the valid ends of the logs;
  its next_seq above every seq it covers;
- state map and ready queues, only where a mismatch is certain: a message is
  not PENDING once a DELIVER, CANCEL or rescheduling SCHEDULE record before the
  checkpoint's applied end ended it; no byte holds an unknown state; every
  ready queue holds the checkpoint's length, its covered entries intact.

Positions in findings are global log positions (logs), slot numbers (wheel) or
entry indexes (ready queues).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np

from .. import formats
from ..errors import CorruptData
from ..formats.fileheader import HEADER_SIZE, FileHeader
from ..formats.kept import MAGIC as KEPT_MAGIC
from ..formats.state import MessageState
from ..formats.timer import CODEC as TIMER_CODEC
from ..formats.timer import TIMER_RECORD_SIZE
from ..store.checkpoint import Checkpoint
from ..store.commitlog import MAGIC as CL_MAGIC
from ..store.commitlog import CommitLog
from ..store.keptrecords import KeptRecords
from ..store.logview import LogView
from ..store.readyindex import MAGIC as READY_MAGIC
from ..store.readyindex import ReadyIndex
from ..store.segment import Segment
from ..store.statemap import MAGIC as STATE_MAGIC
from ..store.statemap import RETIRED_FILE, Retired, StateMap
from ..store.timerlog import MAGIC as TL_MAGIC
from ..store.timerlog import TimerLog
from ..store.wheel import MAGIC as WHEEL_MAGIC
from ..store.wheel import TimerWheel
from ..timers.chainwalk import walk_chain
from .findings import Finding, Report

__all__ = ["Checker", "LogFacts", "Mismatch"]

_Log = TypeVar("_Log", bound=LogView)

CHECKPOINT = "checkpoint.json"
_READ = 4 << 20  # bytes read per step of a log walk
_RESYNC = 4 << 20  # how far past a garbled frame a walk looks for the next valid record
_READY_BLOCK = 1 << 16  # ready entries checked per read
_STATE_NAMES = {int(s): s.name for s in MessageState}


@dataclass
class LogFacts:
    """What a log walk found: where the newest segment's valid records end (a
    torn tail is cut there) and its bad spots."""

    valid_end: int = 0
    """End of the last valid record of the newest segment (its first record if none)."""
    torn_at: int | None = None
    """Where a torn tail starts (the fix cuts there), if there is one."""
    records: int = 0
    bad: int = 0


@dataclass
class Mismatch:
    """A state byte to set (a finding's repair)."""

    seq: int
    state: MessageState


@dataclass
class Checker:
    """Runs every check of ``root`` into ``report``. Opens the stores it reads
    (``close`` lets go of them); ``fix`` repairs through the same objects."""

    root: Path
    report: Report
    now_ms: int = 0
    cl: CommitLog | None = None
    tl: TimerLog | None = None
    wheel: TimerWheel | None = None
    states: StateMap | None = None
    ckpt: Checkpoint | None = None
    cl_facts: LogFacts = field(default_factory=LogFacts)
    tl_facts: LogFacts = field(default_factory=LogFacts)
    mismatches: list[tuple[Finding, Mismatch]] = field(default_factory=list)
    rebuild_slots: dict[int, Finding] = field(default_factory=dict)
    needs_replay: list[Finding] = field(default_factory=list)
    """Findings repaired by a replay of the whole CommitLog (the checkpoint set aside)."""
    complete: bool = False
    """The CommitLog starts at position 0: retention deleted nothing, so a start
    without a checkpoint replays every fact and rebuilds all derived state."""
    # what the CommitLog walk collected for the state checks: (position, seq, state)
    _ended: list[tuple[int, int, MessageState]] = field(default_factory=list)
    _max_seq: list[tuple[int, int]] = field(default_factory=list)  # (position, seq) per segment

    # -- entry point ------------------------------------------------------
    def run(self, *, open_state: bool) -> None:
        """Every check. ``open_state`` False: a directory whose state map a start
        would change (a retired chunk's leftover file) is not opened."""
        self._strays()
        self._checkpoint()
        self.cl = self._open_log(CommitLog, "commitlog", CL_MAGIC)
        self.tl = self._open_log(TimerLog, "timerlog", TL_MAGIC)
        if self.cl is not None:
            segs = self.cl.log.segments
            self.complete = not segs or segs[0].base == 0
            self._walk_commitlog(self.cl)
            self._kept()
        if self.tl is not None:
            self._walk_timerlog(self.tl)
        self._checkpoint_vs_logs()
        self._wheel()
        self._state(open_state)
        self._ready()

    def close(self) -> None:
        for log in (self.cl, self.tl):
            if log is not None:
                log.close(cut_tail=False)  # a warm tail is left as it was
        if self.wheel is not None:
            self.wheel.close()
        if self.states is not None:
            self.states.close()
        self.cl = self.tl = self.wheel = self.states = None

    # -- helpers ----------------------------------------------------------
    def _add(
        self,
        file: str,
        kind: str,
        position: int | None,
        detail: str,
        *,
        fixable: bool,
        damage: bool = True,
    ) -> Finding:
        return self.report.add(Finding(file, kind, position, detail, fixable, damage))

    def _replay(self, file: str, kind: str, position: int | None, detail: str) -> Finding:
        """A finding that a replay of the whole CommitLog repairs (if it is complete)."""
        f = self._add(file, kind, position, detail, fixable=True)
        self.needs_replay.append(f)
        return f

    def _rel(self, path: Path) -> str:
        return str(path.relative_to(self.root))

    def _header(self, path: Path, magic: bytes) -> FileHeader | None:
        """The file's header, or None after a ``bad-header`` finding."""
        try:
            with open(path, "rb") as fh:
                return FileHeader.decode(fh.read(HEADER_SIZE), magic, self._rel(path))
        except (CorruptData, OSError) as exc:
            self._add(self._rel(path), "bad-header", 0, str(exc), fixable=False)
            return None

    def _strays(self) -> None:
        for path in sorted(self.root.rglob("*")):
            if path.is_file() and path.suffix in (".new", ".tmp"):
                self._add(
                    self._rel(path),
                    "stray",
                    None,
                    "left by a kill while it was being made; never read (the next "
                    "make of the same name overwrites it)",
                    fixable=False,
                    damage=False,
                )

    # -- checkpoint -------------------------------------------------------
    def _checkpoint(self) -> None:
        path = self.root / CHECKPOINT
        rep = self.report.file(CHECKPOINT)
        try:
            self.ckpt = Checkpoint.load(path)
        except CorruptData as exc:
            self._replay(CHECKPOINT, "checkpoint-corrupt", None, str(exc))
            return
        if self.ckpt is None:
            self._replay(
                CHECKPOINT,
                "checkpoint-missing",
                None,
                "no checkpoint: the next start replays the whole CommitLog",
            )
            return
        c = self.ckpt
        rep.facts.update(
            shard=c.shard,
            epoch=c.epoch,
            applied_end=c.applied_end,
            replay_from=c.replay_from,
            timerlog_end=c.timerlog_end,
            scan_from_slot=c.scan_from_slot,
            next_seq=c.next_seq,
        )

    def _checkpoint_vs_logs(self) -> None:
        c = self.ckpt
        if c is None:
            return
        if self.cl is not None:
            valid = self.cl_facts.valid_end
            if c.applied_end > valid or c.replay_from > c.applied_end:
                self._replay(
                    CHECKPOINT,
                    "checkpoint-ahead",
                    c.applied_end,
                    f"applied_end {c.applied_end} / replay_from {c.replay_from}: past the "
                    f"valid CommitLog end {valid}",
                )
        if self.tl is not None:
            valid = self.tl_facts.valid_end
            if c.timerlog_end > valid:
                self._replay(
                    CHECKPOINT,
                    "checkpoint-ahead",
                    c.timerlog_end,
                    f"timerlog_end {c.timerlog_end}: past the valid TimerLog end {valid}",
                )
        late = [
            (pos, seq) for pos, seq in self._max_seq if pos < c.applied_end and seq >= c.next_seq
        ]
        if late:
            pos, seq = late[0]
            self._replay(
                CHECKPOINT,
                "checkpoint-seq",
                pos,
                f"next_seq {c.next_seq}, yet the record at {pos} before applied_end has seq {seq}",
            )

    # -- logs -------------------------------------------------------------
    def _open_log(self, kind: type[_Log], name: str, magic: bytes) -> _Log | None:
        folder = self.root / name
        if not folder.is_dir():
            self._add(name, "missing", None, f"no {name}/ folder", fixable=False)
            return None
        paths = sorted(folder.glob("*.seg"))
        fine = True
        for path in paths:
            head = self._header(path, magic)
            if head is None:
                fine = False
            elif str(head.base).zfill(20) != path.stem:
                self._add(
                    self._rel(path),
                    "bad-header",
                    0,
                    f"header base {head.base} != its name",
                    fixable=False,
                )
                fine = False
        if not fine:
            return None
        try:
            return kind(folder, 1 << 40)  # segment size only matters to appends: none here
        except CorruptData as exc:  # segments that do not follow each other
            self._add(name, "gap", None, str(exc), fixable=False)
            return None

    def _seg_name(self, log: LogView, seg: Segment) -> str:
        return f"{log.what}/{seg.base:020d}.seg"

    def _tail(
        self,
        log: LogView,
        seg: Segment,
        newest: bool,
        last_good: int,
        first_bad: int,
        facts: LogFacts,
    ) -> None:
        """Name what lies after the segment's last valid record (``last_good``), given
        that the first bad spot at or after it is ``first_bad``."""
        name = self._seg_name(log, seg)
        if newest:
            zeros = log.log.warm_tail(last_good)
        else:
            rest = log.log.read(last_good, seg.end - last_good)
            zeros = len(rest) - len(rest.rstrip(b"\0"))
        data = seg.end - last_good - zeros
        if data <= 0:
            if zeros and newest:
                self._add(
                    name,
                    "warm-tail",
                    last_good,
                    f"{zeros} bytes of zeros after the last record (normal after a kill)",
                    fixable=False,
                    damage=False,
                )
            elif zeros:
                self._add(
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
            self._add(
                name,
                "torn-tail",
                first_bad,
                f"{data} bytes after the last valid record at {last_good} are no record "
                "(a write cut short)",
                fixable=True,
            )
        else:
            self._add(
                name,
                "corrupt-record",
                first_bad,
                f"{data} bytes of a sealed segment after its last valid record at {last_good} "
                "are no record; later segments hold valid ones (not cut)",
                fixable=False,
            )

    def _walk_commitlog(self, cl: CommitLog) -> None:
        facts = self.cl_facts
        # where the next start replays from: a bad record past it is where it cuts
        replay = 0 if self.ckpt is None else min(self.ckpt.replay_from, self.ckpt.applied_end)
        segs = cl.log.segments
        facts.valid_end = HEADER_SIZE
        for i, seg in enumerate(segs):
            name = self._seg_name(cl, seg)
            count, top = 0, -1
            last_good = cl.log.first_record_pos(seg.base)
            bad: list[tuple[int, str]] = []
            for pos, got, length in _frames(cl, seg):
                if isinstance(got, CorruptData):
                    bad.append((pos, str(got)))
                    continue
                count += 1
                last_good = pos + length
                self._collect(pos, got)
                if isinstance(got, formats.Message):
                    top = max(top, got.seq)
            if top >= 0:
                self._max_seq.append((last_good, top))
            facts.records += count
            self.report.file(name).facts.update(records=count, bytes=seg.end - seg.base)
            newest = i == len(segs) - 1
            if newest:
                facts.valid_end = last_good
            middle = [(p, why) for p, why in bad if p < last_good]
            facts.bad += len(middle)
            for pos, why in middle:
                after = sum(1 for p, _ in bad if p > pos)
                self._add(
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
                self._tail(cl, seg, newest, last_good, tail[0] if tail else last_good, facts)

    def _collect(self, pos: int, rec: formats.Record) -> None:
        """Remember what the state checks need of a valid CommitLog record."""
        if isinstance(rec, formats.Deliver):
            self._ended.append((pos, rec.seq, MessageState.DELIVERED))
        elif isinstance(rec, formats.Cancels):
            self._ended += [(pos, s, MessageState.CANCELLED) for s in rec.seq]
        elif isinstance(rec, formats.Cancel):
            self._ended.append((pos, rec.seq, MessageState.CANCELLED))
        elif isinstance(rec, formats.Message) and rec.replaces_seq:
            self._ended.append((pos, rec.replaces_seq, MessageState.RESCHEDULED))

    def _kept(self) -> None:
        folder = self.root / "commitlog" / "kept"
        if not folder.is_dir():
            return
        fine = True
        for path in sorted(folder.glob("*.kept")):
            head = self._header(path, KEPT_MAGIC)
            if head is None:
                fine = False
            elif str(head.base).zfill(20) != path.stem:
                self._add(self._rel(path), "bad-header", 0, "header base != name", fixable=False)
                fine = False
            else:
                self.report.file(self._rel(path)).facts["records"] = head.param
        if fine:
            try:
                KeptRecords(folder)
            except (CorruptData, OSError) as exc:
                self._add("commitlog/kept", "unreadable", None, str(exc), fixable=False)

    def _walk_timerlog(self, tl: TimerLog) -> None:
        facts = self.tl_facts
        segs = tl.log.segments
        size = TIMER_RECORD_SIZE
        for i, seg in enumerate(segs):
            newest = i == len(segs) - 1
            name = self._seg_name(tl, seg)
            first = tl.log.first_record_pos(seg.base)
            last_good, bad, count = first, [], 0
            pos = first
            while pos < seg.end:
                data = tl.log.read(pos, min(_READ, seg.end - pos))
                n = len(data) // size
                ok = TIMER_CODEC.valid(data, n) if n else np.zeros(0, dtype=bool)
                good = np.flatnonzero(ok)
                if len(good):
                    last_good = pos + (int(good[-1]) + 1) * size
                count += len(good)
                bad += (pos + np.flatnonzero(~ok) * size).tolist()
                if n * size < len(data):  # a partial record at the end of the file
                    bad.append(pos + n * size)
                if not n:
                    break
                pos += n * size
            facts.records += count
            self.report.file(name).facts.update(records=count, bytes=seg.end - seg.base)
            if newest:
                facts.valid_end = last_good
            middle = [p for p in bad if p < last_good]
            facts.bad += len(middle)
            for p in middle[:20]:
                self._add(
                    name,
                    "corrupt-record",
                    p,
                    "timer record fails its magic/check; valid records follow it (not cut)",
                    fixable=False,
                )
            if len(middle) > 20:
                self._add(
                    name,
                    "corrupt-record",
                    middle[20],
                    f"{len(middle) - 20} more damaged timer records",
                    fixable=False,
                )
            if seg.end > last_good:
                tail = [p for p in bad if p >= last_good]
                self._tail(tl, seg, newest, last_good, tail[0] if tail else last_good, facts)
        if not segs:
            facts.valid_end = HEADER_SIZE

    # -- wheel ------------------------------------------------------------
    def _wheel(self) -> None:
        path = self.root / "timerwheel"
        if not path.exists():
            if self.tl is not None and self.tl_facts.records:
                self._add("timerwheel", "missing", None, "no timerwheel file", fixable=False)
            return
        head = self._header(path, WHEEL_MAGIC)
        if head is None:
            return
        try:
            self.wheel = TimerWheel(path, head.base, head.param, self.now_ms)
        except (CorruptData, OSError) as exc:
            self._add("timerwheel", "bad-header", 0, str(exc), fixable=False)
            return
        rep = self.report.file("timerwheel")
        tl = self.tl
        if tl is None:
            return
        end = self.tl_facts.valid_end
        start = tl.log.start
        scan_from = -1 if self.ckpt is None else self.ckpt.scan_from_slot
        occupied = walked = 0
        for slot, e in self.wheel.occupied():
            occupied += 1
            if e.last >= end or e.first >= end:
                self.rebuild_slots[slot] = self._add(
                    "timerwheel",
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
                self._add(
                    "timerwheel",
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
                self.rebuild_slots[slot] = self._add(
                    "timerwheel",
                    "slot-mismatch",
                    slot,
                    f"slot {slot} says first {e.first}, {e.num} records; its chain has "
                    f"{len(chain)} from {oldest}",
                    fixable=True,
                )
        rep.facts.update(slots=head.base, precision_ms=head.param, occupied=occupied, walked=walked)

    # -- state map --------------------------------------------------------
    def _state(self, open_state: bool) -> None:
        folder = self.root / "state"
        if not folder.is_dir():
            return
        retired = _retired(folder)
        if retired is None:
            self._add(f"state/{RETIRED_FILE}", "unreadable", None, "does not parse", fixable=False)
            return
        paths = sorted(folder.glob("*.map"))
        leftover = False
        chunks: list[int] = []
        fine = True
        for path in paths:
            head = self._header(path, STATE_MAGIC)
            if head is None:
                fine = False
                continue
            if str(head.base).zfill(12) != path.stem:
                self._add(self._rel(path), "bad-header", 0, "header base != name", fixable=False)
                fine = False
                continue
            if head.base in retired:
                leftover = True
                self._add(
                    self._rel(path),
                    "state-leftover",
                    None,
                    "retired chunk still on disk (a kill while retiring): the next open deletes it",
                    fixable=True,
                )
                continue
            chunks.append(head.base)
        if not fine or (leftover and not open_state):
            return  # StateMap's open would delete the leftover: only under --fix
        self.states = StateMap(folder, self.now_ms)
        for n in chunks:
            name = f"state/{n:012d}.map"
            try:
                span = _chunk_entries(folder, n)
                first = n * span
                got = self.states.raw_many(np.arange(first, first + span, dtype=np.uint64))
            except (CorruptData, OSError) as exc:
                self._add(name, "bad-header", 0, str(exc), fixable=False)
                continue
            wrong = np.flatnonzero(got > max(MessageState))
            if len(wrong):
                self._replay(
                    name,
                    "state-bad-value",
                    int(first + wrong[0]),
                    f"{len(wrong)} state bytes hold no known state (first: seq {first + wrong[0]})",
                )
            self.report.file(name).facts["ended"] = int(np.count_nonzero(got))
        self._state_vs_records(set(chunks), retired)

    def _state_vs_records(self, chunks: set[int], retired: Retired) -> None:
        c, states = self.ckpt, self.states
        if c is None or states is None or not self._ended:
            return
        folder = self.root / "state"
        per = _chunk_entries(folder, next(iter(chunks), 0)) if chunks else 1 << 22
        for pos, seq, want in self._ended:
            if pos >= c.applied_end:
                continue  # re-applied by the next start
            n = seq // per
            if n in retired:
                continue  # reads as done
            if n not in chunks:
                self._replay(
                    f"state/{n:012d}.map",
                    "missing",
                    seq,
                    f"state chunk of seq {seq} (ended at {pos}) is not there",
                )
                chunks.add(n)  # once
                continue
            if states.raw(seq) != MessageState.PENDING:
                continue
            f = self._add(
                f"state/{n:012d}.map",
                "state-mismatch",
                seq,
                f"seq {seq} reads PENDING, yet the record at {pos} made it {want.name}",
                fixable=True,
            )
            self.mismatches.append((f, Mismatch(seq, want)))

    # -- ready queues -----------------------------------------------------
    def _ready(self) -> None:
        folder = self.root / "ready"
        c = self.ckpt
        lengths = {} if c is None else {int(t): n for t, n in c.ready_len.items()}
        floors = {} if c is None else {int(t): n for t, n in c.ready_floor.items()}
        seen: set[int] = set()
        for path in sorted(folder.glob("*.idx")) if folder.is_dir() else []:
            name = self._rel(path)
            head = self._header(path, READY_MAGIC)
            if head is None:
                continue
            try:
                tid = int(path.stem)
            except ValueError:
                continue
            seen.add(tid)
            if head.base != tid:
                self._add(name, "bad-header", 0, f"header topic {head.base} != name", fixable=False)
                continue
            ready = ReadyIndex(path, tid, self.now_ms)
            try:
                self._ready_one(name, ready, lengths.get(tid, 0), floors.get(tid, 0))
            finally:
                ready.close(write_tail=False)
        for tid, n in lengths.items():
            if n and tid not in seen:
                self._replay(
                    f"ready/{tid}.idx",
                    "ready-short",
                    0,
                    f"missing, yet the checkpoint counts {n} entries",
                )

    def _ready_one(self, name: str, ready: ReadyIndex, want: int, floor: int) -> None:
        self.report.file(name).facts.update(entries=ready.length, checkpointed=want, floor=floor)
        if ready.length < want:
            self._replay(
                name,
                "ready-short",
                ready.length,
                f"{ready.length} entries, the checkpoint counts {want}",
            )
            want = ready.length
        ready.floor = floor
        at = floor
        while at < want:
            n = min(_READY_BLOCK, want - at)
            try:
                ready.read_many(at, n)
            except CorruptData:
                for k in range(at, at + n):
                    try:
                        ready.read_many(k, 1)
                    except CorruptData as exc:
                        self._replay(name, "ready-corrupt", k, f"entry {k}: {exc}")
                        return
            at += n


# -- pure-ish helpers -------------------------------------------------------
def _never() -> bool:
    return False


def _oldest_position(chain: np.ndarray, last: int) -> int:
    """The TimerLog position of a walked chain's oldest record: the record the
    one before it links to (``prev``), or ``last`` for a chain of one."""
    if len(chain) <= 1:
        return last
    return int(chain["prev"][-2])


def _frames(cl: CommitLog, seg: Segment) -> Iterator[tuple[int, formats.Record | CorruptData, int]]:
    """Every record of one CommitLog segment as (position, record or why it is bad,
    length). A bad record whose length field still fits is stepped over by it; after
    a garbled frame the walk looks for the next valid record (within ``_RESYNC``
    bytes) and ends where it finds none. Zeros to the segment's end end it quietly
    (the caller names them)."""
    pos, end = cl.log.first_record_pos(seg.base), seg.end
    while pos < end:
        chunk = cl.log.read(pos, min(_READ, end - pos))
        first = formats.frame_length(chunk)
        if formats.FRAME <= first <= end - pos and first > len(chunk):
            chunk = cl.log.read(pos, first)  # one record larger than a read
        off = 0
        while off < len(chunk):
            at = pos + off
            length = formats.frame_length(chunk, off)
            if formats.FRAME <= length <= end - at and off + length > len(chunk):
                break  # runs past this read: the next one starts with it
            try:
                rec, length = formats.decode(chunk, off, payload=False)
            except CorruptData as exc:
                if _zeros_to_end(cl, at, end):
                    return
                yield at, exc, 0
                if formats.FRAME <= length <= end - at:
                    off += length  # the frame holds: step over the bad record
                    continue
                nxt = _resync(cl, at + 1, end)
                if nxt is None:
                    return
                off = nxt - pos
                break
            yield at, rec, length
            off += length
        pos += off


def _zeros_to_end(cl: CommitLog, at: int, end: int) -> bool:
    while at < end:
        part = cl.log.read(at, min(_READ, end - at))
        if not part or part.strip(b"\0"):
            return not part
        at += len(part)
    return True


def _resync(cl: CommitLog, start: int, end: int) -> int | None:
    """The position of the first valid record in [start, start + _RESYNC), if any."""
    data = cl.log.read(start, min(_RESYNC, end - start))
    raw = np.frombuffer(data, dtype=np.uint8)
    n = len(raw) - formats.FRAME
    if n <= 0:
        return None
    kinds = raw[8 : 8 + n]
    maybe = np.flatnonzero(
        (raw[9 : 9 + n] == formats.VERSION)
        & (kinds >= min(formats.RecordType))
        & (kinds <= max(formats.RecordType))
        & (raw[10 : 10 + n] == 0)
        & (raw[11 : 11 + n] == 0)
    )
    for at in maybe.tolist():
        length = formats.frame_length(data, at)
        if length < formats.FRAME or at + length > len(data):
            continue
        try:
            formats.decode(data, at, payload=False)
        except CorruptData:
            continue
        return start + at
    return None


def _retired(folder: Path) -> Retired | None:
    """The retired chunks (``state/retired.json``), None if it does not parse."""
    path = folder / RETIRED_FILE
    if not path.exists():
        return Retired()
    try:
        doc = json.loads(path.read_text())
        return Retired.from_ranges((int(a), int(b)) for a, b in doc["retired"])
    except (ValueError, KeyError, TypeError, OSError):
        return None


def _chunk_entries(folder: Path, n: int) -> int:
    """Entries per state chunk, from chunk ``n``'s header (param)."""
    fd = os.open(folder / f"{n:012d}.map", os.O_RDONLY)
    try:
        return FileHeader.decode(os.pread(fd, HEADER_SIZE, 0), STATE_MAGIC, "state").param
    finally:
        os.close(fd)
