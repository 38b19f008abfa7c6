"""The import index: the messages a rebalance moved to this shard, by the id they
had on their source shard, so that the old id still works here (cancel, lookup,
reschedule) and an import sent twice (a job re-run) makes no second copy.

An imported SCHEDULE record carries its source id in its ``delayq-moved-from``
header, so the index derives from the CommitLog: ``note`` adds an entry when such
a record is written, replayed after a checkpoint, or applied by a replica. Each
checkpoint that finds it changed saves it whole (``store.importfile``); an open
loads it and drops entries past the log's valid end (a record the crash cut).
Not thread-safe: used with the shard's lock held.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np

from ...errors import DelayqError
from ...formats.imports import ENTRY_DTYPE, MOVED_FROM
from ...ids import MessageId
from ...store.importfile import load_imports

__all__ = ["MOVED_FROM", "ImportIndex"]

Key = tuple[int, int, int]  # (shard, epoch, position) of an id


class ImportIndex:
    def __init__(self) -> None:
        self._by_source: dict[Key, tuple[int, int]] = {}  # -> (epoch, position) here
        self.dirty = False

    def __len__(self) -> int:
        return len(self._by_source)

    def get(self, source: MessageId) -> tuple[int, int] | None:
        """(epoch, position) of the copy here of the message ``source`` names."""
        return self._by_source.get((source.shard, source.epoch, source.position))

    def add(self, source: MessageId, epoch: int, pos: int) -> None:
        self._by_source[(source.shard, source.epoch, source.position)] = (epoch, pos)
        self.dirty = True

    def note(self, pos: int, epoch: int, headers: dict[str, str]) -> None:
        """A SCHEDULE record at ``pos`` with these headers was written or applied:
        every id its message had before (``formats.imports.moved_from``) names it."""
        for text in headers.get(MOVED_FROM, "").split():
            with contextlib.suppress(DelayqError):  # (validation refuses it from clients)
                self.add(MessageId.parse(text), epoch, pos)

    def load(self, data_dir: Path, valid_end: int) -> None:
        """Add the saved entries whose copy lies before ``valid_end``."""
        for e in load_imports(data_dir).tolist():
            src_shard, src_epoch, src_pos, epoch, _, pos = e
            if pos < valid_end:
                self._by_source.setdefault((src_shard, src_epoch, src_pos), (epoch, pos))

    def entries(self) -> np.ndarray:
        """The index as ``formats.imports`` entries (what a checkpoint saves)."""
        out = np.zeros(len(self._by_source), dtype=ENTRY_DTYPE)
        if self._by_source:
            keys = np.array(list(self._by_source.keys()), dtype=np.int64)
            vals = np.array(list(self._by_source.values()), dtype=np.int64)
            out["src_shard"], out["src_epoch"], out["src_pos"] = keys.T
            out["epoch"], out["pos"] = vals.T
        return out

    def drop_from(self, end: int) -> None:
        """Forget copies at or after ``end`` (the log was cut there)."""
        gone = [k for k, (_, pos) in self._by_source.items() if pos >= end]
        for k in gone:
            del self._by_source[k]
        self.dirty = self.dirty or bool(gone)
