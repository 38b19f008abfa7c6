"""Block files (pure; no file I/O): the BLOCK records of one compaction block,
copied from the CommitLog as they were (frame and CRC), so that the block's
messages outlive the log segments retention deletes (``store.blockfiles`` writes
and reads them; ``timers.compaction.loading`` says when).

File ``<data>/blocks/<start_ms:015d>.blk``: a ``FileHeader`` (magic b"DQBK",
format version 1, base = the block's start_ms, created_ms, param 0), then one
entry per BLOCK record of the block, in CommitLog order, little-endian:

| offset | size | type | meaning                                           |
|-------:|-----:|------|---------------------------------------------------|
| 0      | 8    | u64  | position of the BLOCK record in the CommitLog     |
| 8      | L    |      | the BLOCK record, as written (L: its frame length) |

Entries are only ever appended. One encoder, ``encode_entry`` (``encode_header``
for the file's start), one decoder, ``decode_entries`` (where each entry's
record lies); ``decode_header`` checks the header.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

from ..errors import CorruptData
from .fileheader import HEADER_SIZE, FileHeader
from .frame import FRAME, Buffer, frame_length

__all__ = [
    "ENTRY_HEAD",
    "MAGIC",
    "Entries",
    "decode_entries",
    "decode_header",
    "encode_entry",
    "encode_header",
]

MAGIC = b"DQBK"
_POS = struct.Struct("<Q")
ENTRY_HEAD = _POS.size + 4  # an entry's position and its record's length field


class Entries(NamedTuple):
    """Where the entries of a stretch of a block file lie."""

    positions: np.ndarray  # of each BLOCK record in the CommitLog
    offsets: np.ndarray  # of each record in the stretch
    lengths: np.ndarray  # of each record


def encode_header(start_ms: int, created_ms: int) -> bytes:
    return FileHeader(MAGIC, start_ms, created_ms).encode()


def decode_header(data: Buffer, what: str) -> FileHeader:
    """The header of a block file; ``CorruptData`` (naming ``what``) if it is not one."""
    return FileHeader.decode(bytes(data[:HEADER_SIZE]), MAGIC, what)


def encode_entry(pos: int, record: Buffer) -> bytes:
    """The entry of the BLOCK record ``record`` written at CommitLog ``pos``."""
    return _POS.pack(pos) + bytes(record)


def decode_entries(data: Buffer, start: int, what: str) -> Entries:
    """The entries of ``data`` from ``start`` (an entry's start) to its end;
    ``CorruptData`` (naming ``what``) if one is cut short."""
    positions, offsets, lengths = [], [], []
    at = start
    while at < len(data):
        length = frame_length(data, at + _POS.size)
        if at + ENTRY_HEAD > len(data) or length < FRAME or at + _POS.size + length > len(data):
            raise CorruptData(f"{what}: entry cut short at byte {at}")
        positions.append(_POS.unpack_from(data, at)[0])
        offsets.append(at + _POS.size)
        lengths.append(length)
        at += _POS.size + length
    return Entries(
        np.array(positions, dtype=np.int64),
        np.array(offsets, dtype=np.int64),
        np.array(lengths, dtype=np.int64),
    )
