"""The 32-byte header at the start of every delayq data file (pure).

| offset | size | type | meaning                                               |
|-------:|-----:|------|-------------------------------------------------------|
| 0      | 4    | 4s   | magic, names the file kind (b"DQCL", b"DQTL", ...)     |
| 4      | 2    | u16  | format version (1)                                     |
| 6      | 2    | u16  | reserved, 0                                            |
| 8      | 8    | i64  | base: global position (segments) or index (chunks)     |
| 16     | 8    | i64  | created_ms: engine-clock time the file was created     |
| 24     | 8    | i64  | param: kind-specific (record size, precision, ...)     |

Little-endian throughout.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from ..errors import CorruptData

__all__ = ["HEADER_SIZE", "FileHeader"]

_FMT = struct.Struct("<4sHHqqq")
HEADER_SIZE = _FMT.size
FORMAT_VERSION = 1


class FileHeader(NamedTuple):
    magic: bytes
    base: int
    created_ms: int
    param: int = 0

    def encode(self) -> bytes:
        return _FMT.pack(self.magic, FORMAT_VERSION, 0, self.base, self.created_ms, self.param)

    @classmethod
    def decode(cls, data: bytes, magic: bytes, what: str) -> FileHeader:
        if len(data) < HEADER_SIZE:
            raise CorruptData(f"{what}: file shorter than its header")
        got, version, _, base, created, param = _FMT.unpack_from(data)
        if got != magic:
            raise CorruptData(f"{what}: bad magic {got!r}, expected {magic!r}")
        if version != FORMAT_VERSION:
            raise CorruptData(f"{what}: unsupported format version {version}")
        return cls(got, base, created, param)
