"""The compaction blocks a shard holds (``ShardState.blocks``): their files, how far
each block's load got, and the loaded blocks whose files wait for a checkpoint to
go. What the blocks do is in ``compaction.loading``; this is only their bookkeeping. Not
thread-safe: used with the shard's lock held.
"""

from __future__ import annotations

from ...store.blockfiles import BlockFiles

__all__ = ["BlockBook"]


class BlockBook:
    def __init__(self, files: BlockFiles) -> None:
        self.files = files
        self.loading: dict[int, int] = {}  # start_ms -> file offset of the next entry
        self.loaded: dict[int, int] = {}  # start_ms -> file size when LOADED was applied
        self.stuck: set[int] = set()  # blocks whose file could not be read (quarantined)

    def was_loaded(self, start_ms: int) -> None:
        """Apply a LOADED record: the block's file goes after the next checkpoint."""
        self.loading.pop(start_ms, None)
        if self.files.size(start_ms):
            self.loaded[start_ms] = self.files.size(start_ms)

    def lengths(self) -> dict[str, int]:
        """Each block file's length, for the checkpoint (its keys are strings)."""
        return {str(start): size for start, size in self.files.lengths().items()}

    def done(self) -> list[int]:
        """The loaded blocks (their LOADED records lie before the checkpoint being
        taken): their files go once it is saved (``drop``)."""
        return [s for s, size in self.loaded.items() if self.files.size(s) == size]

    def drop(self, starts: list[int]) -> None:
        """Delete the files of these loaded blocks (after the checkpoint that covers
        their LOADED records), unless a BLOCK record came to them since."""
        for start in starts:
            if self.loaded.get(start) == self.files.size(start):
                self.files.delete(start)
                del self.loaded[start]
