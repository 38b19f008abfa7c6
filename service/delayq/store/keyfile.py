"""``<data>/keys.idx`` on disk (format: ``formats.keyindex``): a shard's key indexes
saved whole at a clean close and loaded at the next open, which then does not
rebuild them from the CommitLog.

- ``save_keys(data_dir, indexes, log_end, now_ms)``: the indexes
  (``timers.memory.keyindex.KeyIndex``, or any ``Table``; in the caller's order:
  the engine's keys, then its dedup ids) as they are now,
  for a CommitLog ending at ``log_end``. Called at a clean close after the last
  append. The file is built under a temp name (``.keys.idx.<pid>.tmp``, never
  read), fsynced and renamed into place (``atomicfile.write_atomic_with``): a kill leaves
  the old file or the new one, and a stray temp file.
- ``load_keys(data_dir, log_end, KeyIndex.filled, tables=2, hash_kind=HASH_KIND)``:
  the saved indexes, made by ``make`` (``KeyIndex.filled``), or None when the
  file is missing, damaged (short, another kind, its CRC, rows out of order),
  saved for another CommitLog end (the log moved on since: records appended,
  cut or repaired), of another hash or table count. The file is **deleted**
  whatever it held, before the indexes are returned: from the open on, the
  log and the indexes move on and only the next clean close saves them again,
  so a kill after the open finds no file and the next open rebuilds.
- ``read_keys(data_dir)``: the file's head and tables as they are, without
  deleting it (``delayq verify``); None when there is none.

The columns are streamed between the file and the index's own arrays (no
second copy of a table in memory), the CRC chained over them.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Sequence
from io import BufferedReader
from pathlib import Path
from typing import BinaryIO, Protocol, TypeVar

import crc32c
import numpy as np

from ..atomicfile import sync_dir, write_atomic_with
from ..errors import CorruptData
from ..formats import keyindex as fmt
from .datadir import KEYS

__all__ = ["FILE", "Table", "TableMaker", "load_keys", "read_keys", "save_keys"]

FILE = KEYS
T = TypeVar("T", covariant=True)


class Table(Protocol):
    """What is saved of an index (``KeyIndex`` is one)."""

    @property
    def hash_kind(self) -> int: ...

    def columns(self) -> fmt.Columns: ...


class TableMaker(Protocol[T]):
    """An index of ``count`` entries whose columns ``fill`` writes in place
    (``KeyIndex.filled``); ``ValueError`` when they are not an index's."""

    def __call__(self, count: int, fill: Callable[..., None]) -> T: ...


def save_keys(data_dir: Path, indexes: Sequence[Table], log_end: int, now_ms: int) -> None:
    """Write ``indexes`` as they are for a CommitLog ending at ``log_end``."""
    path = data_dir / FILE
    tables = [ix.columns() for ix in indexes]
    kinds = {ix.hash_kind for ix in indexes}
    kind = kinds.pop() if len(kinds) == 1 else 0
    head = fmt.KeysHead(log_end, now_ms, kind, tuple(len(t[0]) for t in tables))

    def write(f: BinaryIO) -> None:
        crc = _write(f, memoryview(fmt.encode_head(head)), 0)
        for table in tables:
            for col, dtype in zip(table, fmt.COLUMNS, strict=True):
                crc = _write(f, np.ascontiguousarray(col, dtype=dtype).data, crc)
        f.write(fmt.encode_tail(crc))

    write_atomic_with(path, write)


def load_keys(
    data_dir: Path, log_end: int, make: TableMaker[T], *, tables: int, hash_kind: int
) -> list[T] | None:
    """The indexes saved for ``log_end`` (``tables`` of them, of ``hash_kind``),
    or None; the file is gone when this returns (see the module docstring)."""
    path = data_dir / FILE
    try:
        with open(path, "rb") as f:
            want = fmt.KeysHead(log_end, 0, hash_kind, (0,) * tables)
            got = _load(f, os.fstat(f.fileno()).st_size, want, make)
    except FileNotFoundError:
        return None
    except (CorruptData, ValueError, OSError):
        got = None
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
        sync_dir(data_dir)
    return got


def read_keys(data_dir: Path) -> tuple[fmt.KeysHead, list[fmt.Columns]] | None:
    """The file's head and tables (``CorruptData`` when damaged), None when absent."""
    try:
        data = (data_dir / FILE).read_bytes()
    except FileNotFoundError:
        return None
    return fmt.decode_keys(data, FILE)


def _load(f: BufferedReader, size: int, want: fmt.KeysHead, make: TableMaker[T]) -> list[T] | None:
    data = f.read(fmt.FIXED_SIZE)
    data += f.read(fmt.announced_head_size(data, FILE) - len(data))
    head = fmt.decode_head(data, FILE)
    if (
        head.log_end != want.log_end
        or head.hash_kind != want.hash_kind
        or len(head.counts) != len(want.counts)
        or size != fmt.file_size(head)
    ):
        return None
    crc = crc32c.crc32c(data)
    got: list[T] = []
    for n in head.counts:

        def fill(*cols: np.ndarray) -> None:
            nonlocal crc
            for col in cols:
                view = col.data.cast("B")
                if f.readinto(view) != len(view):
                    raise CorruptData(f"{FILE}: shorter than its counts")
                crc = crc32c.crc32c(view, crc)
                if sys.byteorder != "little":
                    col.byteswap(inplace=True)

        got.append(make(n, fill))
    fmt.check_tail(f.read(fmt.TAIL_SIZE), crc, FILE)
    return got


def _write(f: BinaryIO, part: memoryview, crc: int) -> int:
    view = part.cast("B")
    f.write(view)
    return int(crc32c.crc32c(view, crc))
