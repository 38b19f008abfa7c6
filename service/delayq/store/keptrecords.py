"""SCHEDULE records kept past their CommitLog segment, so that a message can be
cancelled, looked up and rescheduled by its id for as long as it is pending.

A message id is the CommitLog position of its SCHEDULE record. Retention deletes
a segment once it is a window plus the retention period old, but a message due
later than that (rolled: its body lives on in newer ROLL copies) still needs
that record. So before a segment is deleted, the SCHEDULE records in it whose
message is still pending are copied here, as they were (frame and CRC), into
one file per segment: ``<data>/commitlog/kept/<segment base:020d>.kept``.

File format: ``formats.kept``. Written whole and published atomically
(``newfile``) before the segment goes; rewritten the same way when ``retire``
drops records.

In memory: each file's positions, offsets and seqs (24 bytes per kept record).
Reads open the file (id-addressed calls on old messages are rare).
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import formats
from ..atomicfile import sync_dir
from ..formats.kept import decode_kept, encode_kept, kept_record
from .newfile import create_file

__all__ = ["KeptRecords"]

Pending = Callable[[np.ndarray], np.ndarray]
"""Which of some seqs are still pending (a boolean mask)."""


@dataclass
class _File:
    path: Path
    created_ms: int
    positions: np.ndarray  # ascending
    offsets: np.ndarray  # of each record in the file
    seqs: np.ndarray


class KeptRecords:
    """Writes (file I/O: ``write``, ``retire``) touch no shared state; ``install``
    applies what they made and is the only change to it, under the caller's lock.
    One thread at a time writes; any may read under that lock."""

    def __init__(self, directory: Path) -> None:
        self._dir = directory  # made by the first write
        self._files: dict[int, _File] = {}
        self._bases: list[int] = []  # sorted keys of _files
        self._chunks: tuple[int, frozenset[int]] | None = None  # see ``chunks``
        for path in sorted(directory.glob("*.kept")):
            self.install(_parse(path, path.read_bytes()))

    @property
    def count(self) -> int:
        """Records kept."""
        return sum(len(f.positions) for f in self._files.values())

    def chunks(self, bits: int) -> frozenset[int]:
        """The numbers ``seq >> bits`` of every kept record's seq (pending or done);
        computed again only after ``install`` changed the records."""
        if self._chunks is None or self._chunks[0] != bits:
            got = [np.unique(f.seqs >> np.uint64(bits)) for f in self._files.values()]
            chunks = frozenset(np.concatenate(got).tolist()) if got else frozenset()
            self._chunks = bits, chunks
        return self._chunks[1]

    def write(
        self, base: int, now_ms: int, positions: Sequence[int], recs: Sequence[bytes]
    ) -> Kept:
        """Durably (re)write the file of segment ``base`` with these records (ascending
        positions; none: remove it). Returns what ``install`` then applies."""
        path = self._dir / f"{base:020d}.kept"
        if not recs:
            path.unlink(missing_ok=True)
            return base, None
        if not self._dir.exists():
            self._dir.mkdir()
            sync_dir(self._dir.parent)  # before a segment goes, its records' dir is durable
        header, body = encode_kept(base, now_ms, positions, recs)
        os.close(create_file(path, header, fill=body))
        return _parse(path, header + body)

    def install(self, kept: Kept) -> None:
        """Apply a ``write``: index the file's records, or forget a removed file."""
        base, f = kept
        self._chunks = None
        if f is None:
            self._files.pop(base, None)
            if base in self._bases:
                self._bases.remove(base)
            return
        self._files[base] = f
        if base not in self._bases:
            bisect.insort(self._bases, base)

    def below(self, pos: int) -> tuple[np.ndarray, np.ndarray]:
        """The positions and seqs of the kept records before ``pos``, ascending."""
        files = [self._files[b] for b in self._bases]
        if not files:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.uint64)
        positions = np.concatenate([f.positions for f in files]).astype(np.int64)
        seqs = np.concatenate([f.seqs for f in files]).astype(np.uint64)
        rows = positions < pos
        return positions[rows], seqs[rows]

    def read(self, pos: int) -> bytes:
        """The kept record at ``pos``, or b"" if none."""
        i = bisect.bisect_right(self._bases, pos) - 1
        if i < 0:
            return b""
        f = self._files[self._bases[i]]
        j = int(np.searchsorted(f.positions, pos))
        if j == len(f.positions) or int(f.positions[j]) != pos:
            return b""
        fd = os.open(f.path, os.O_RDONLY)
        try:
            return _read_at(fd, int(f.offsets[j]))
        finally:
            os.close(fd)

    def read_many(self, positions: Sequence[int]) -> list[bytes]:
        """``read`` for many positions: each file opened once, not once a record."""
        out = [b""] * len(positions)
        by_file: dict[int, list[tuple[int, int]]] = {}
        for k, pos in enumerate(positions):
            i = bisect.bisect_right(self._bases, pos) - 1
            if i < 0:
                continue
            f = self._files[self._bases[i]]
            j = int(np.searchsorted(f.positions, pos))
            if j < len(f.positions) and int(f.positions[j]) == pos:
                by_file.setdefault(self._bases[i], []).append((k, int(f.offsets[j])))
        for base, wanted in by_file.items():
            fd = os.open(self._files[base].path, os.O_RDONLY)
            try:
                for k, offset in wanted:
                    out[k] = _read_at(fd, offset)
            finally:
                os.close(fd)
        return out

    def retire(self, pending: Pending, created_before_ms: int, now_ms: int) -> list[Kept]:
        """Rewrite the files created before ``created_before_ms`` without the records
        of messages no longer pending (a file left empty is removed). Returns the
        writes to ``install``."""
        out: list[Kept] = []
        for base in list(self._bases):
            f = self._files[base]
            if f.created_ms >= created_before_ms:
                continue
            live = pending(f.seqs)
            if live.all():
                continue
            keep = np.flatnonzero(live).tolist()
            data = f.path.read_bytes()  # once, not a read per record kept
            recs = [kept_record(data, off) for off in f.offsets[keep].tolist()]
            out.append(self.write(base, now_ms, f.positions[keep].tolist(), recs))
        return out


Kept = tuple[int, "_File | None"]
"""A written (or removed) file of kept records: its segment's base and contents."""


def _parse(path: Path, data: bytes) -> Kept:
    index = decode_kept(data, f"kept records {path.name}")
    f = _File(path, index.header.created_ms, index.positions, index.offsets, index.seqs)
    return index.header.base, f


def _read_at(fd: int, offset: int) -> bytes:
    head = os.pread(fd, formats.MESSAGE_FIXED, offset)
    return head + os.pread(fd, formats.frame_length(head) - len(head), offset + len(head))
