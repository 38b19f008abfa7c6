"""Fixed-size records guarded by a magic and a CRC (pure), for TimerLog and ReadyIndex.

Layout of every such record: u32 magic @0, u32 CRC32C of bytes [8, size) @4,
then the kind's fields (little-endian) @8. A codec is declared once by its
field list and gives both forms of the one encoding: ``encode`` (one record
from values) and ``encode_many`` (a numpy array of records, byte-identical).
"""

from __future__ import annotations

import struct
from typing import Any

import crc32c
import numpy as np

from ..errors import CorruptData

__all__ = ["FixedCodec", "stamp_crcs"]


def stamp_crcs(recs: np.ndarray) -> bytes:
    """Fill the u32 ``crc`` field (bytes 4..8) of every fixed-size record with the
    CRC32C of its bytes [8, size) and return the encoded array."""
    size = recs.dtype.itemsize
    data = memoryview(recs.tobytes())
    crc = crc32c.crc32c
    recs["crc"] = [crc(data[i : i + size - 8]) for i in range(8, len(data), size)]
    return recs.tobytes()


_NP = {"q": "<i8", "Q": "<u8", "I": "<u4", "H": "<u2", "B": "u1"}


class FixedCodec:
    def __init__(self, magic: int, fields: list[tuple[str, str]], what: str) -> None:
        """``fields``: (name, struct code) pairs; codes q Q I H B, and x for one pad byte."""
        self.magic = magic
        self.what = what
        self.names = [name for name, code in fields if code != "x"]
        self._fields = struct.Struct("<" + "".join(code for _, code in fields))
        self._head = struct.Struct("<II")
        self.size = self._head.size + self._fields.size
        spec = [("magic", "<u4"), ("crc", "<u4")]
        for i, (name, code) in enumerate(fields):
            spec.append((f"_pad{i}", "u1") if code == "x" else (name, _NP[code]))
        self.dtype = np.dtype(spec)
        assert self.dtype.itemsize == self.size

    def encode(self, *fields: Any) -> bytes:
        body = self._fields.pack(*fields)
        return self._head.pack(self.magic, crc32c.crc32c(body)) + body

    def encode_many(self, recs: np.ndarray) -> bytes:
        """Encode an array of ``dtype`` (magic, crc and padding are set here)."""
        recs["magic"] = self.magic
        for name in self.dtype.names or ():
            if name.startswith("_pad"):
                recs[name] = 0
        return stamp_crcs(recs)

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

    def check_many(self, data: bytes, count: int) -> int:
        """How many records from the start of ``data`` pass magic and CRC."""
        view = memoryview(data)
        head = self._head
        crc = crc32c.crc32c
        size = self.size
        for i in range(count):
            magic, want = head.unpack_from(view, i * size)
            if magic != self.magic or crc(view[i * size + 8 : (i + 1) * size]) != want:
                return i
        return count
