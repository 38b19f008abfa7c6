"""The import index file ``<data>/imports.idx`` (pure: bytes in, bytes out): which
messages a rebalance moved to this shard, by the id they had on their source.

A ``FileHeader`` (magic b"DQIM", base 0, param = entry count), then the entries,
little-endian, 32 bytes each:

| offset  | size | type | meaning                                            |
|--------:|-----:|------|----------------------------------------------------|
| 32+32*i | 4    | u32  | source shard                                       |
| 36+32*i | 4    | u32  | source epoch (of the message's id there)           |
| 40+32*i | 8    | i64  | source position (of the message's id there)        |
| 48+32*i | 4    | u32  | epoch of the copy here (its id's)                  |
| 52+32*i | 4    | u32  | reserved, 0                                        |
| 56+32*i | 8    | i64  | position of the copy here (its SCHEDULE record)    |

The index is derived data: each imported SCHEDULE record names its source id in
its ``delayq-moved-from`` header (``MOVED_FROM``), after the ids the message had
on the shards it left before (space-separated, oldest first: a message moved
twice keeps every old id working; ``moved_from``).
"""

from __future__ import annotations

import numpy as np

from ..errors import CorruptData
from .fileheader import HEADER_SIZE, FileHeader

__all__ = [
    "ENTRY_DTYPE",
    "MAGIC",
    "MOVED_FROM",
    "decode_imports",
    "encode_imports",
    "moved_from",
]

MAGIC = b"DQIM"
MOVED_FROM = "delayq-moved-from"
"""The header an imported message carries: the id it had on the shard it came from."""
MAX_MOVES = 16  # old ids a message keeps (moves beyond that forget the oldest)


def moved_from(previous: str, source_id: str) -> str:
    """The ``MOVED_FROM`` value of a message moved from ``source_id`` whose value
    there was ``previous`` ("" unless it was moved before)."""
    ids = [*previous.split(), source_id]
    return " ".join(ids[-MAX_MOVES:])


ENTRY_DTYPE = np.dtype(
    [
        ("src_shard", "<u4"),
        ("src_epoch", "<u4"),
        ("src_pos", "<i8"),
        ("epoch", "<u4"),
        ("reserved", "<u4"),
        ("pos", "<i8"),
    ]
)
assert ENTRY_DTYPE.itemsize == 32


def encode_imports(entries: np.ndarray, now_ms: int) -> bytes:
    """The whole file for ``entries`` (an array of ``ENTRY_DTYPE``)."""
    return FileHeader(MAGIC, 0, now_ms, len(entries)).encode() + entries.tobytes()


def decode_imports(data: bytes) -> np.ndarray:
    """The entries of a whole file; ``CorruptData`` when it is not one."""
    header = FileHeader.decode(data[:HEADER_SIZE], MAGIC, "imports.idx")
    body = data[HEADER_SIZE:]
    if len(body) != header.param * ENTRY_DTYPE.itemsize:
        raise CorruptData(
            f"imports.idx: {header.param} entries announced, {len(body)} bytes for them"
        )
    return np.frombuffer(body, dtype=ENTRY_DTYPE).copy()
