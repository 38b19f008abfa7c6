"""The key index file ``<data>/keys.idx`` (pure: bytes in, bytes out): a shard's
key indexes (``timers.memory.keyindex``) as they were at a clean close, for the
next open to load instead of rebuilding them from the CommitLog.

Little-endian throughout; T tables (the engine's indexes, in its order), table t
holding n_t entries:

| offset         | size   | type  | meaning                                            |
|---------------:|-------:|-------|----------------------------------------------------|
| 0              | 32     |       | ``FileHeader``: magic b"DQKY", version 1, base =   |
|                |        |       | the CommitLog end the tables were saved at,        |
|                |        |       | created_ms, param = T                              |
| 32             | 4      | u32   | hash kind (1: xxh3-64 of the name seeded by the    |
|                |        |       | topic id, its low 32 bits: ``HASH_KIND``)          |
| 36             | 4      | u32   | reserved, 0                                        |
| 40             | 8 T    | i64   | n_t, each table's entry count                      |
| 40 + 8 T       | 28 n_0 |       | table 0's columns, one after the other: the        |
|                |        |       | names' hashes u32[n_0], seqs u64[n_0], positions   |
|                |        |       | i64[n_0] (rising), holds i64[n_0] (ms, >= 0)       |
| ...            |        |       | the next tables' columns likewise                  |
| size - 4       | 4      | u32   | CRC32C of every byte before it                     |

The hash kind is the key index's (``timers.memory.keyindex.HASH_KIND``): a file
of another is not loaded. The codec is in parts so that ``store.keyfile``
streams the columns between the file and the index's own arrays (no copy of a
10M-entry table in memory):
``encode_head`` / ``decode_head`` for the fixed part, ``COLUMNS`` for the
columns, ``encode_tail`` / ``check_tail`` for the CRC (chained over everything
before it: ``crc32c.crc32c(part, crc)``). ``encode_keys`` / ``decode_keys``
are the whole file at once, built from the same parts.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, NamedTuple

import crc32c
import numpy as np

from ..errors import CorruptData
from .fileheader import HEADER_SIZE, FileHeader

__all__ = [
    "COLUMNS",
    "FIXED_SIZE",
    "MAGIC",
    "ROW_SIZE",
    "TAIL_SIZE",
    "Columns",
    "KeysHead",
    "announced_head_size",
    "check_tail",
    "decode_head",
    "decode_keys",
    "encode_head",
    "encode_keys",
    "encode_tail",
    "file_size",
    "head_size",
]

MAGIC = b"DQKY"
_FIXED = struct.Struct("<II")  # hash kind, reserved
FIXED_SIZE = HEADER_SIZE + _FIXED.size
COLUMNS: tuple[np.dtype[Any], ...] = (
    np.dtype("<u4"),
    np.dtype("<u8"),
    np.dtype("<i8"),
    np.dtype("<i8"),
)
"""A table's columns in file order: hash, seq, position, hold."""
ROW_SIZE = sum(c.itemsize for c in COLUMNS)
_TAIL = struct.Struct("<I")
TAIL_SIZE = _TAIL.size
MAX_TABLES = 16  # a sanity bound on T (the engine has two)

Columns = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class KeysHead(NamedTuple):
    log_end: int
    created_ms: int
    hash_kind: int
    counts: tuple[int, ...]


def head_size(tables: int) -> int:
    return FIXED_SIZE + 8 * tables


def announced_head_size(data: bytes, what: str) -> int:
    """The size of the head whose first ``HEADER_SIZE`` bytes ``data`` holds."""
    tables = FileHeader.decode(data, MAGIC, what).param
    if not 0 <= tables <= MAX_TABLES:
        raise CorruptData(f"{what}: {tables} tables")
    return head_size(tables)


def file_size(head: KeysHead) -> int:
    return head_size(len(head.counts)) + ROW_SIZE * sum(head.counts) + TAIL_SIZE


def encode_head(head: KeysHead) -> bytes:
    counts = head.counts
    return (
        FileHeader(MAGIC, head.log_end, head.created_ms, len(counts)).encode()
        + _FIXED.pack(head.hash_kind, 0)
        + np.asarray(counts, dtype="<i8").tobytes()
    )


def decode_head(data: bytes, what: str) -> KeysHead:
    """The head at the start of ``data`` (at least ``head_size(T)`` bytes, T in it)."""
    header = FileHeader.decode(data, MAGIC, what)
    tables = header.param
    if not 0 <= tables <= MAX_TABLES or len(data) < head_size(tables):
        raise CorruptData(f"{what}: {tables} tables, or shorter than their counts")
    kind, _ = _FIXED.unpack_from(data, HEADER_SIZE)
    counts = np.frombuffer(data, dtype="<i8", count=tables, offset=FIXED_SIZE)
    if (counts < 0).any():
        raise CorruptData(f"{what}: a negative entry count")
    return KeysHead(header.base, header.created_ms, kind, tuple(counts.tolist()))


def encode_tail(crc: int) -> bytes:
    return _TAIL.pack(crc)


def check_tail(tail: bytes, crc: int, what: str) -> None:
    """``CorruptData`` unless ``tail`` holds ``crc`` (of every byte before it)."""
    if len(tail) != TAIL_SIZE or _TAIL.unpack(tail)[0] != crc:
        raise CorruptData(f"{what}: CRC mismatch")


def encode_keys(log_end: int, created_ms: int, hash_kind: int, tables: Sequence[Columns]) -> bytes:
    """The whole file holding ``tables``."""
    head = KeysHead(log_end, created_ms, hash_kind, tuple(len(t[0]) for t in tables))
    parts = [encode_head(head)]
    for table in tables:
        parts += [
            np.ascontiguousarray(c, dtype=d).tobytes() for c, d in zip(table, COLUMNS, strict=True)
        ]
    body = b"".join(parts)
    return body + encode_tail(crc32c.crc32c(body))


def decode_keys(data: bytes, what: str) -> tuple[KeysHead, list[Columns]]:
    """The head and the tables of a whole file; ``CorruptData`` when it is not one."""
    head = decode_head(data, what)
    if len(data) != file_size(head):
        raise CorruptData(f"{what}: {len(data)} bytes, {file_size(head)} announced")
    check_tail(data[-TAIL_SIZE:], crc32c.crc32c(data[:-TAIL_SIZE]), what)
    at = head_size(len(head.counts))
    tables: list[Columns] = []
    for n in head.counts:
        cols = []
        for dtype in COLUMNS:
            cols.append(np.frombuffer(data, dtype=dtype, count=n, offset=at))
            at += n * dtype.itemsize
        tables.append((cols[0], cols[1], cols[2], cols[3]))
    return head, tables
