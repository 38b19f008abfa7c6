"""What a check of a data directory found (pure: plain values, no I/O).

A ``Finding`` is one fact about one file: its ``kind`` (one of ``KINDS``, the
names the report and the tests use), where in the file (a global log position
or a byte offset, None for the whole file), a one-line detail, whether it is
damage (a note is not: a kill's warm tail, a stray ``.new`` file) and whether
``--fix`` can repair it. A ``FileReport`` gathers a file's findings; a
``Report`` the whole directory's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["KINDS", "FileReport", "Finding", "Report"]

KINDS: dict[str, str] = {
    # any file
    "bad-header": "the 32-byte header is short, or its magic, version, base or shape is wrong",
    "missing": "a file or folder every data directory has is not there",
    "gap": "log segments do not follow each other (a gap or an overlap)",
    # CommitLog and TimerLog
    "torn-tail": "the newest segment ends in a partial or garbled record after the last valid one",
    "corrupt-record": "a record fails its CRC/check (or framing) and valid records follow it",
    "warm-tail": "zeros after the last record of the newest segment (normal after a kill)",
    # TimerWheel
    "slot-past-end": "a wheel slot points at or past the end of the valid TimerLog",
    "slot-mismatch": "a wheel slot's first record or count disagrees with its chain",
    "chain-broken": "a wheel slot's chain runs into a damaged or foreign TimerLog record",
    # checkpoint
    "checkpoint-missing": "no checkpoint.json: the next start replays the whole CommitLog",
    "checkpoint-corrupt": "checkpoint.json does not parse or fails its CRC",
    "checkpoint-ahead": "the checkpoint names positions past the end of the valid logs",
    "checkpoint-seq": "the checkpoint's next_seq is not above a sequence number it covers",
    # epoch history
    "epochs-corrupt": "epochs.json does not parse, fails its CRC, or its epochs do not rise",
    "epochs-ahead": "the newest epoch begins past the valid CommitLog end (its writes were "
    "lost; the next start writes in a new epoch)",
    "receipt-key-corrupt": "receipt.key is short, of another kind, or fails its CRC",
    # state map and ready queues
    "state-mismatch": "a message's state byte is pending though a record before the "
    "checkpoint ended it",
    "state-bad-value": "a state byte holds no known state",
    "state-leftover": "a retired state chunk's file is still there (a kill while retiring)",
    "ready-short": "a ready queue holds fewer entries than the checkpoint says",
    "ready-corrupt": "a ready-queue entry the checkpoint covers fails its check",
    # compaction blocks
    "block-short": "a block file holds less than the checkpoint recorded",
    "block-corrupt": "a block file's entry the checkpoint covers is cut short or fails its CRC",
    "block-orphan": "messages read BLOCKED but no block file (or replayed record) holds them",
    "block-tail": "bytes past a block file's checkpointed length (the next start cuts them)",
    # the saved key indexes
    "keys-corrupt": "keys.idx is short, of another kind, or fails its CRC",
    "keys-mismatch": "keys.idx disagrees with the CommitLog's keyed SCHEDULE records",
    "keys-stale": "keys.idx was saved for another CommitLog end (the next start rebuilds)",
    "unreadable": "a file that could not be opened or parsed at all",
    "stray": "a file no reader looks at (a '.new' or '.tmp' left by a kill)",
}


@dataclass
class Finding:
    file: str
    """Path relative to the data directory."""
    kind: str
    """One of ``KINDS``."""
    position: int | None
    """Global log position (logs), byte offset (other files) or slot number (wheel)."""
    detail: str
    fixable: bool
    damage: bool = True
    fixed: bool = False
    action: str = ""
    """What ``--fix`` did (or why it did not)."""

    def __post_init__(self) -> None:
        assert self.kind in KINDS, self.kind


@dataclass
class FileReport:
    file: str
    findings: list[Finding] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    """What was read (records, bytes, slots ...), for the report."""

    @property
    def status(self) -> str:
        damage = [f for f in self.findings if f.damage]
        if not damage:
            return "OK"
        return "FIXED" if all(f.fixed for f in damage) else "DAMAGED"


@dataclass
class Report:
    data_dir: str
    fix: bool
    files: dict[str, FileReport] = field(default_factory=dict)

    def file(self, name: str) -> FileReport:
        got = self.files.get(name)
        if got is None:
            got = self.files[name] = FileReport(name)
        return got

    def add(self, finding: Finding) -> Finding:
        self.file(finding.file).findings.append(finding)
        return finding

    @property
    def findings(self) -> list[Finding]:
        return [f for r in self.files.values() for f in r.findings]

    @property
    def damaged(self) -> list[Finding]:
        """Damage not (or not yet) repaired."""
        return [f for f in self.findings if f.damage and not f.fixed]

    @property
    def exit_code(self) -> int:
        """0: clean, or every damage repaired; 1: damage remains."""
        return 1 if self.damaged else 0

    def to_dict(self) -> dict[str, Any]:
        files = [
            {
                "file": r.file,
                "status": r.status,
                "facts": r.facts,
                "findings": [asdict(f) for f in r.findings],
            }
            for r in sorted(self.files.values(), key=lambda r: r.file)
        ]
        counts = {s: sum(1 for f in files if f["status"] == s) for s in ("OK", "DAMAGED", "FIXED")}
        return {
            "data_dir": self.data_dir,
            "fix": self.fix,
            "files": files,
            "summary": {"files": len(files), **counts, "damage_left": len(self.damaged)},
            "exit_code": self.exit_code,
        }
