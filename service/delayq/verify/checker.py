"""What the checks of a data directory share: the stores they hold open, the
findings they add, the facts the fix repairs from, and the checks every file
gets (its 32-byte header) or that no file kind owns (strays).

Damage here: a ``bad-header`` (short, or its magic, version or base wrong; a
base that disagrees with the file's name). A note: a ``stray`` ``.new`` or
``.tmp`` file a kill left while it was being made (never read; the next make of
that name overwrites it). A file of unknown kind is left alone.

The per-file checks (``checkpoint``, ``logs``, ``wheel``, ``statemap``, ``ready``)
are functions taking the ``Checker``; ``checks`` runs them in order and ``fix``
repairs through the same open stores.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CorruptData
from ..formats.fileheader import HEADER_SIZE, FileHeader
from ..store.checkpoint import Checkpoint
from ..store.commitlog import CommitLog
from ..store.statemap import StateMap
from ..store.timerlog import TimerLog
from ..store.wheel import TimerWheel
from .findings import Finding, Report

__all__ = ["Checker", "LogFacts", "Mismatch"]


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
    state: int  # the byte (``formats.messagestate``)


@dataclass
class Checker:
    """The checks' view of ``root``: the stores they opened (``close`` lets go of
    them), what they found (``report``) and what ``fix`` repairs from."""

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
    ended: list[tuple[int, int, int]] = field(default_factory=list)
    """What the CommitLog walk collected for the state checks: (position, seq, state)."""
    max_seq: list[tuple[int, int]] = field(default_factory=list)
    """(position, seq) per CommitLog segment: its last valid record's end, its top seq."""
    blocked_in_log: list[int] = field(default_factory=list)
    """Seqs of the BLOCK records the next start replays (at or past the applied end)."""
    state_chunks: list[tuple[tuple[int, int], str]] = field(default_factory=list)
    """Each state chunk checked: its seqs [first, end) and its file's name."""

    def close(self) -> None:
        for log in (self.cl, self.tl):
            if log is not None:
                log.close(cut_tail=False)  # a warm tail is left as it was
        if self.wheel is not None:
            self.wheel.close()
        if self.states is not None:
            self.states.close()
        self.cl = self.tl = self.wheel = self.states = None

    # -- findings ---------------------------------------------------------
    def add(
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

    def replay(self, file: str, kind: str, position: int | None, detail: str) -> Finding:
        """A finding that a replay of the whole CommitLog repairs (if it is complete)."""
        f = self.add(file, kind, position, detail, fixable=True)
        self.needs_replay.append(f)
        return f

    def rel(self, path: Path) -> str:
        return str(path.relative_to(self.root))

    # -- what every file gets ---------------------------------------------
    def header(self, path: Path, magic: bytes) -> FileHeader | None:
        """The file's header, or None after a ``bad-header`` finding."""
        try:
            with open(path, "rb") as fh:
                return FileHeader.decode(fh.read(HEADER_SIZE), magic, self.rel(path))
        except (CorruptData, OSError) as exc:
            self.add(self.rel(path), "bad-header", 0, str(exc), fixable=False)
            return None

    def named_header(self, path: Path, magic: bytes, width: int, says: str) -> FileHeader | None:
        """The header of a file named by its base (``width`` digits), or None after
        a ``bad-header`` finding (``says``, formatted with ``base``, when the base
        and the name disagree)."""
        head = self.header(path, magic)
        if head is not None and str(head.base).zfill(width) != path.stem:
            self.add(self.rel(path), "bad-header", 0, says.format(base=head.base), fixable=False)
            return None
        return head

    def strays(self) -> None:
        for path in sorted(self.root.rglob("*")):
            if path.is_file() and path.suffix in (".new", ".tmp"):
                self.add(
                    self.rel(path),
                    "stray",
                    None,
                    "left by a kill while it was being made; never read (the next "
                    "make of the same name overwrites it)",
                    fixable=False,
                    damage=False,
                )
