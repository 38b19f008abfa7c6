"""Block files on disk (format: ``formats.blockfile``): one append-only file per
compaction block under ``<data>/blocks/``, holding copies of the block's BLOCK
records (``timers.compaction.loading`` decides what goes in and when a file goes).

A block file is derived data, like a ready queue: every entry is a copy of a
CommitLog record. A new file is made whole (header only) and published
atomically (``newfile``); entries are appended with a plain write and fsynced by
the next checkpoint, which records each file's length. An open cuts every file
back to that length (``recover``): what lies past it may be torn by a power loss,
and recovery appends it again from the log; a file the checkpoint does not know
was made after it, and is removed the same way. A file the checkpoint knows that
is gone was deleted after it (a loaded block: see ``timers.compaction.loading``).

Not thread-safe: called with the shard's lock held; ``take_dirty`` hands out
descriptors the caller fsyncs (and then closes) without it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..atomicfile import sync_dir
from ..errors import CorruptData
from ..formats.blockfile import (
    ENTRY_HEAD,
    Entries,
    decode_entries,
    decode_header,
    encode_entry,
    encode_header,
)
from ..formats.fileheader import HEADER_SIZE
from ..formats.frame import frame_length
from .datafile import write_at
from .newfile import create_file

__all__ = ["BlockFiles"]


@dataclass
class _File:
    path: Path
    size: int


class BlockFiles:
    def __init__(self, directory: Path) -> None:
        self._dir = directory
        self._files: dict[int, _File] = {}
        self._dirty: dict[int, int] = {}  # start_ms -> descriptor written since take_dirty
        directory.mkdir(exist_ok=True)
        for path in sorted(directory.glob("*.blk")):
            with open(path, "rb") as fh:
                head = decode_header(fh.read(HEADER_SIZE), f"block file {path.name}")
            if f"{head.base:015d}" != path.stem:
                raise CorruptData(f"block file {path.name}: header says block {head.base}")
            self._files[head.base] = _File(path, path.stat().st_size)

    def _path(self, start_ms: int) -> Path:
        return self._dir / f"{start_ms:015d}.blk"

    @property
    def starts(self) -> list[int]:
        """The blocks that have a file, earliest first."""
        return sorted(self._files)

    def size(self, start_ms: int) -> int:
        """The length of block ``start_ms``'s file (0: none)."""
        f = self._files.get(start_ms)
        return f.size if f is not None else 0

    def lengths(self) -> dict[int, int]:
        """Every file's length (what a checkpoint records)."""
        return {start: f.size for start, f in self._files.items()}

    def recover(self, lengths: Mapping[int, int] | None, complete: bool) -> int:
        """Cut the files back to a checkpoint's ``lengths`` (see the module
        docstring); return how many files were cut or removed. ``lengths`` None
        (no checkpoint): a ``complete`` log (from position 0) is replayed whole, so
        every file goes; otherwise they stay as they are (a replay appends its
        records again: a load skips a message it already loaded)."""
        changed = 0
        for start, f in list(self._files.items()):
            keep = lengths.get(start, 0) if lengths is not None else (0 if complete else f.size)
            if keep == f.size:
                continue
            if keep > f.size:
                raise CorruptData(
                    f"block file {f.path.name}: {f.size} bytes, the checkpoint saw {keep}"
                )
            changed += 1
            if keep == 0:
                self.delete(start)
            else:
                os.truncate(f.path, keep)
                f.size = keep
        return changed

    def append(self, start_ms: int, pos: int, record: bytes, now_ms: int) -> None:
        """Append the BLOCK record written at CommitLog ``pos`` to block
        ``start_ms``'s file (made first if there is none)."""
        f = self._files.get(start_ms)
        if f is None:
            header = encode_header(start_ms, now_ms)
            self._dirty[start_ms] = create_file(self._path(start_ms), header)
            f = self._files[start_ms] = _File(self._path(start_ms), len(header))
        fd = self._dirty.get(start_ms)
        if fd is None:
            fd = self._dirty[start_ms] = os.open(f.path, os.O_WRONLY)
        entry = encode_entry(pos, record)
        write_at(fd, entry, f.size)
        f.size += len(entry)

    def read_entry(self, start_ms: int, offset: int) -> tuple[int, bytes]:
        """The entry at ``offset`` of block ``start_ms``'s file: the CommitLog
        position of its BLOCK record and the record. ``CorruptData`` if it is cut
        short."""
        f = self._files[start_ms]
        fd = os.open(f.path, os.O_RDONLY)
        try:
            head = os.pread(fd, ENTRY_HEAD, offset)
            data = head + os.pread(fd, frame_length(head, ENTRY_HEAD - 4) - 4, offset + len(head))
        finally:
            os.close(fd)
        got = decode_entries(data, 0, f"block file {f.path.name}")
        if len(got.positions) != 1:
            raise CorruptData(f"block file {f.path.name}: no whole entry at byte {offset}")
        return int(got.positions[0]), data[int(got.offsets[0]) :]

    def entries(self, start_ms: int) -> tuple[Entries, bytes]:
        """Every entry of block ``start_ms``'s file, and the file's bytes."""
        f = self._files[start_ms]
        data = f.path.read_bytes()[: f.size]
        return decode_entries(data, HEADER_SIZE, f"block file {f.path.name}"), data

    def cut_from(self, pos: int) -> None:
        """Drop the entries of BLOCK records at or after CommitLog ``pos`` (a log cut
        back there: see ``timers.lifecycle.rewind``); a file left empty goes."""
        for start in self.starts:
            entries, _ = self.entries(start)
            gone = np.flatnonzero(entries.positions >= pos)
            if not len(gone):
                continue
            keep = int(entries.offsets[gone[0]]) - ENTRY_HEAD + 4
            if keep <= HEADER_SIZE:
                self.delete(start)
            else:
                os.truncate(self._files[start].path, keep)
                self._files[start].size = keep

    def take_dirty(self) -> list[int]:
        """Descriptors of the files appended to since the last call: the caller
        fsyncs each and then closes it (later appends open the file again)."""
        fds, self._dirty = list(self._dirty.values()), {}
        return fds

    def delete(self, start_ms: int) -> None:
        """Remove block ``start_ms``'s file."""
        f = self._files.pop(start_ms)
        fd = self._dirty.pop(start_ms, None)
        if fd is not None:
            os.close(fd)
        f.path.unlink(missing_ok=True)
        sync_dir(self._dir)

    def close(self) -> None:
        for fd in self.take_dirty():
            os.close(fd)
