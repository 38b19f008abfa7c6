"""The checkpoint: where recovery starts, written atomically.

``<data>/checkpoint.json`` is a ``jsonfile`` of format "delayq-checkpoint",
version 1, whose body is a ``Checkpoint``: written atomically, so a crash
leaves either the old or the new checkpoint, never a mix. Everything it points at (log positions,
ready-index lengths) was fsynced before it was written.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import jsonfile

__all__ = ["Checkpoint", "GroupCheckpoint"]

FORMAT = "delayq-checkpoint"
VERSION = 1


@dataclass
class GroupCheckpoint:
    committed: int = 0
    """Every ready-queue offset below this is acked."""
    acked: list[int] = field(default_factory=list)
    """Acked offsets at or above ``committed``."""
    inflight: list[list[int]] = field(default_factory=list)
    """[offset, ticket, until_ms, waiting (0/1)] of each message held in flight
    (see ``formats.handout``): attempts and receipts survive a restart."""


@dataclass
class Checkpoint:
    shard: int
    epoch: int
    written_ms: int = 0
    replay_from: int = 0
    """CommitLog position: SCHEDULE/ROLL records from here may not be in the wheel yet."""
    applied_end: int = 0
    """CommitLog position: CANCEL/DELIVER/ACK/TOPIC/HANDOUT/POLICY before it are in
    the derived files (and this checkpoint)."""
    timerlog_end: int = 0
    """TimerLog end when ``replay_from`` was taken; records after it are re-linked."""
    scan_from_slot: int = -1
    """First wheel slot not fully released (-1: start at now)."""
    next_seq: int = 1
    topics: dict[str, int] = field(default_factory=dict)
    pending: dict[str, int] = field(default_factory=dict)
    """topic id -> pending message count."""
    ready_len: dict[str, int] = field(default_factory=dict)
    """topic id -> ready index length."""
    ready_floor: dict[str, int] = field(default_factory=dict)
    """topic id -> first ready entry not expired by retention (absent: 0)."""
    groups: dict[str, dict[str, GroupCheckpoint]] = field(default_factory=dict)
    """topic id -> group name -> state."""
    counters: dict[str, int] = field(default_factory=dict)
    due: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    """topic id -> pending-by-due-time tables (see engine.duecounts)."""
    blocks: dict[str, int] = field(default_factory=dict)
    """compaction block (its start_ms) -> its file's length (see store.blockfiles)."""
    policies: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    """topic id -> group -> its delivery policy as set: the fields of a POLICY
    record (``formats.grouppolicy.PolicyDef``) but topic_id and group."""

    def save(self, path: Path) -> None:
        jsonfile.save(path, FORMAT, VERSION, asdict(self))

    @classmethod
    def load(cls, path: Path) -> Checkpoint | None:
        """The saved checkpoint, or None when there is none yet."""
        body = jsonfile.load(path, FORMAT, VERSION, "checkpoint")
        if body is None:
            return None
        groups = {
            t: {g: GroupCheckpoint(**s) for g, s in gs.items()}
            for t, gs in body.pop("groups").items()
        }
        return cls(groups=groups, **body)
