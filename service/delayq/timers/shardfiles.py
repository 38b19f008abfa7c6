"""A shard's open files under its locked data directory (``ShardFiles``):
the CommitLog, TimerLog, TimerWheel, state map and compaction block files,
closed together."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..store.blockfiles import BlockFiles
from ..store.commitlog import CommitLog
from ..store.statemap import StateMap
from ..store.timerlog import TimerLog
from ..store.wheel import TimerWheel

__all__ = ["ShardFiles"]


@dataclass(eq=False)
class ShardFiles:
    """A shard's open files, under its locked data directory."""

    dir: Path
    lock_fd: int  # holds the directory's flock
    cl: CommitLog
    tl: TimerLog
    wheel: TimerWheel
    states: StateMap
    blocks: BlockFiles

    def close(self, *, killed: bool = False) -> None:
        """Close every file; ``killed`` leaves the warm tails, as SIGKILL does."""
        self.cl.close(cut_tail=not killed)
        self.tl.close(cut_tail=not killed)
        self.wheel.close()
        self.states.close()
        self.blocks.close()
        os.close(self.lock_fd)
