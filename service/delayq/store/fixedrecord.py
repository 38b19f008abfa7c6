"""Fixed-size records guarded by a magic and a CRC (pure), for TimerLog and ReadyIndex.

Layout of every such record: u32 magic @0, u32 CRC32C of bytes [8, size) @4,
then the kind's fields (a ``struct`` format, little-endian) @8.
"""

from __future__ import annotations

import struct
from typing import Any

import crc32c

from ..errors import CorruptData

__all__ = ["FixedCodec"]


class FixedCodec:
    def __init__(self, magic: int, fields_fmt: str, what: str) -> None:
        self.magic = magic
        self.what = what
        self._fields = struct.Struct("<" + fields_fmt)
        self._head = struct.Struct("<II")
        self.size = self._head.size + self._fields.size

    def encode(self, *fields: Any) -> bytes:
        body = self._fields.pack(*fields)
        return self._head.pack(self.magic, crc32c.crc32c(body)) + body

    def decode(self, data: bytes | memoryview, offset: int = 0) -> tuple[Any, ...]:
        if len(data) - offset < self.size:
            raise CorruptData(f"{self.what}: truncated record")
        magic, crc = self._head.unpack_from(data, offset)
        if magic != self.magic:
            raise CorruptData(f"{self.what}: bad magic {magic:#x}")
        start = offset + self._head.size
        if crc32c.crc32c(data[start : offset + self.size]) != crc:
            raise CorruptData(f"{self.what}: CRC mismatch")
        return self._fields.unpack_from(data, start)
