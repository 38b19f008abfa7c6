"""Fixed-size records guarded by a magic and a checksum (pure; no file I/O), for
TimerLog records (``timer``) and ready-queue entries (``ready``).

Layout of every FixedCodec record: u32 magic @0, u32 check @4, then the kind's
fields (little-endian) @8; the size is a multiple of 4. The check is a weighted
sum of the record's u32 words after the first two::

    check = (CHECK_SEED + sum(w[i] * K[i] for i in 0..size/4-3)) mod 2**32,
    K[i] = (2*i + 1) * 0x9E3779B1 mod 2**32      (odd, so every 1-word error shows)

Why not CRC32C as in the CommitLog: these records are derived indexes written
and verified tens of thousands at a time, and numpy computes this sum for a
whole batch in two calls, where a CRC costs one Python call per record (it was
0.6 us of the 3.4 us a scheduled message cost). Like a CRC it catches torn
writes, zeroed tails and any error within one word. Weaker than a CRC for some
errors in two or more words: flipping the top bit of an even number of words is
never seen (each adds 2**31 times an odd weight, and two of those sum to 0 mod
2**32); other two-word errors slip by with odds of about 2**-32.

A codec is declared once by its field list and gives both forms of the one
encoding: ``encode`` (one record from values) and ``encode_many`` (a numpy array
of records, byte-identical).
"""

from __future__ import annotations

import functools
import operator
import struct
from typing import Any

import numpy as np

from ..errors import CorruptData

__all__ = ["CHECK_SEED", "FixedCodec", "checksums"]

CHECK_SEED = 0x5F3759DF
_K_BASE = 0x9E3779B1


@functools.lru_cache(maxsize=8)
def _weights(count: int) -> np.ndarray:
    return ((2 * np.arange(count, dtype=np.uint64) + 1) * _K_BASE % (1 << 32)).astype(np.uint32)


def checksums(recs: np.ndarray | bytes | memoryview, size: int) -> np.ndarray:
    """The check of every ``size``-byte record in ``recs`` (an array or raw bytes)."""
    raw = np.frombuffer(recs, dtype=np.uint8) if not isinstance(recs, np.ndarray) else recs
    words = raw.view(np.uint32).reshape(-1, size // 4)[:, 2:]
    # one product of u32 matrices (it wraps mod 2**32 like the sum): no temporary of
    # every word times its weight, 4x faster than multiplying and summing the rows
    total: np.ndarray = np.matmul(words, _weights(size // 4 - 2))
    return total + np.uint32(CHECK_SEED)


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
        spec = [("magic", "<u4"), ("check", "<u4")]
        for i, (name, code) in enumerate(fields):
            spec.append((f"_pad{i}", "u1") if code == "x" else (name, _NP[code]))
        self.dtype = np.dtype(spec)
        assert self.dtype.itemsize == self.size and self.size % 4 == 0
        self._words = struct.Struct(f"<{self.size // 4 - 2}I")
        self._weights = _weights(self.size // 4 - 2).tolist()

    def encode(self, *fields: Any) -> bytes:
        rec = np.zeros(1, dtype=self.dtype)
        for name, value in zip(self.names, fields, strict=True):
            rec[name] = value
        return self.encode_many(rec)

    def encode_many(self, recs: np.ndarray) -> bytes:
        """Encode an array of ``dtype`` (magic, check and padding are set here)."""
        recs["magic"] = self.magic
        for name in self.dtype.names or ():
            if name.startswith("_pad"):
                recs[name] = 0
        recs["check"] = checksums(recs, self.size)
        return recs.tobytes()

    def valid(self, data: bytes | memoryview, count: int) -> np.ndarray:
        """Per record of ``data`` (``count`` of them): magic and check both right."""
        block = np.frombuffer(data, dtype=self.dtype, count=count)
        good: np.ndarray = (block["magic"] == self.magic) & (
            block["check"] == checksums(block, self.size)
        )
        return good

    def decode(self, data: bytes | memoryview, offset: int = 0) -> tuple[Any, ...]:
        if len(data) - offset < self.size:
            raise CorruptData(f"{self.what}: truncated record")
        one = memoryview(data)[offset : offset + self.size]
        magic, check = self._head.unpack_from(one)
        if magic != self.magic:
            raise CorruptData(f"{self.what}: bad magic {magic:#x}")
        words = self._words.unpack_from(one, 8)  # one record: plain Python beats numpy
        if (CHECK_SEED + sum(map(operator.mul, words, self._weights))) & 0xFFFFFFFF != check:
            raise CorruptData(f"{self.what}: checksum mismatch")
        return self._fields.unpack_from(one, self._head.size)

    def check_many(self, data: bytes, count: int) -> int:
        """How many records from the start of ``data`` pass magic and check."""
        bad = np.flatnonzero(~self.valid(data, count))
        return int(bad[0]) if len(bad) else count
