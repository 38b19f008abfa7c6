"""A shard's epoch history (pure): epoch -> the first CommitLog position written in it.

Every change of a shard's master raises its epoch (a fencing token); the node
records the new epoch and the log position where its writes start before it
writes anything in it, so the history says which epoch wrote every byte of the
log. Message ids carry the epoch too, so a position that a failover reuses never
names a second message under an old id.

Invariants: epochs strictly increase; start positions never decrease (an epoch
in which nothing was written has the same start as the next). ``divergence``
compares two nodes' histories the way RocketMQ's ``findConsistentPoint`` and
Kafka's KIP-101/279 do: the newest epoch both hold with the same start tells
how far their logs agree.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["EpochHistory"]


@dataclass(frozen=True)
class EpochHistory:
    entries: tuple[tuple[int, int], ...] = ()
    """(epoch, start position) pairs, oldest first."""

    def __post_init__(self) -> None:
        for (e0, s0), (e1, s1) in zip(self.entries, self.entries[1:], strict=False):
            if e1 <= e0 or s1 < s0:
                raise ValueError(f"epoch history must rise: ({e0}, {s0}) then ({e1}, {s1})")
        if any(e < 1 or s < 0 for e, s in self.entries):
            raise ValueError(f"epochs start at 1 and positions at 0: {self.entries}")

    @classmethod
    def of(cls, pairs: Iterable[tuple[int, int]]) -> EpochHistory:
        return cls(tuple((int(e), int(s)) for e, s in pairs))

    @property
    def last(self) -> int:
        """The current epoch (0: none yet)."""
        return self.entries[-1][0] if self.entries else 0

    def begin(self, epoch: int, start: int) -> EpochHistory:
        """The history with ``epoch`` starting at ``start``; ValueError unless the
        epoch is above the last one and ``start`` is not before its start."""
        if epoch <= self.last:
            raise ValueError(f"epoch {epoch} is not above the current epoch {self.last}")
        return EpochHistory((*self.entries, (epoch, start)))

    def epoch_at(self, position: int) -> int:
        """The epoch that wrote ``position`` (0: before the first entry)."""
        found = 0
        for epoch, start in self.entries:
            if start > position:
                break
            found = epoch
        return found

    def end_of(self, epoch: int, log_end: int) -> int:
        """Where ``epoch``'s writes end: the next epoch's start, or ``log_end``."""
        for i, (e, _) in enumerate(self.entries):
            if e == epoch:
                return self.entries[i + 1][1] if i + 1 < len(self.entries) else log_end
        raise KeyError(epoch)

    def truncated(self, end: int) -> EpochHistory:
        """The history of a log cut at ``end``: epochs that start after it are gone
        (one starting exactly there stays: it wrote nothing yet)."""
        return EpochHistory(tuple((e, s) for e, s in self.entries if s <= end))

    def divergence(self, log_end: int, other: EpochHistory, other_end: int) -> int | None:
        """How far this log (ending at ``log_end``) agrees with ``other``'s: the end
        of the newest epoch both began at the same position, capped by both ends.
        None when no epoch agrees (the logs share nothing a follower could keep);
        an empty history agrees up to 0."""
        if not self.entries:
            return 0
        theirs = dict(other.entries)
        for epoch, start in reversed(self.entries):
            if theirs.get(epoch) == start:
                return min(self.end_of(epoch, log_end), other.end_of(epoch, other_end))
        return None
