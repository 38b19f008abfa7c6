"""One segment file of a ``SegmentedLog``: its name, its header, its descriptor.

A segment is named by its 20-digit *base* (the global position of its first
byte) plus ``.seg`` and starts with a ``FileHeader`` holding that base; opening
one checks both. ``size`` is what was written (header included: where the next
append goes); ``ready`` is the file's length, ``size`` plus any warm tail of
zeros (``warmtail``), so ``ready >= size`` always. ``view`` caches a read-only
map of the segment's first bytes (as many as its length says: ``views``).

Not thread-safe: the log's writer changes ``size``, ``ready`` and the map under
its owner's lock; readers outside it read single fields (each a whole value).
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CorruptData
from ..formats.fileheader import HEADER_SIZE, FileHeader
from .datafile import open_data_file
from .newfile import create_file

__all__ = ["SUFFIX", "Segment"]

SUFFIX = ".seg"


@dataclass(slots=True)
class Segment:
    base: int
    created_ms: int
    fd: int
    size: int  # bytes written, header included (where the next append goes)
    ready: int = 0  # the file's length: ``size`` plus any warm tail of zeros
    view: mmap.mmap | None = field(default=None, repr=False)  # read-only, len(view) bytes

    @classmethod
    def open(cls, path: Path, magic: bytes, what: str) -> Segment:
        """The existing segment at ``path``: header checked, its base the file's name."""
        fd, header = open_data_file(path, magic, f"{what} {path.name}")
        if header.base != int(path.stem):
            os.close(fd)
            raise CorruptData(f"{what} {path.name}: header base {header.base} != name")
        size = os.fstat(fd).st_size  # with any warm tail: the owner's scan finds the end
        return cls(header.base, header.created_ms, fd, size, size)

    @classmethod
    def create(cls, directory: Path, magic: bytes, base: int, now_ms: int) -> Segment:
        """A new, empty segment (just its header, durable) in ``directory``."""
        fd = create_file(_path(directory, base), FileHeader(magic, base, now_ms).encode())
        return cls(base, now_ms, fd, HEADER_SIZE, HEADER_SIZE)

    @property
    def end(self) -> int:
        return self.base + self.size

    def drop_view(self) -> None:
        """Forget the map (a truncate must not leave one reaching past the file)."""
        self.view = None

    def close(self) -> None:
        """Let the map go and close the file."""
        self.drop_view()
        os.close(self.fd)

    def remove(self, directory: Path) -> None:
        """Close the file and delete it from ``directory``."""
        self.close()
        _path(directory, self.base).unlink()


def _path(directory: Path, base: int) -> Path:
    return directory / f"{base:020d}{SUFFIX}"
